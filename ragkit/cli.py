"""
ragkit/cli.py: the kit's command line, the layer on top of every other module. It only declares
flags and hands each one to the file that does its work, with a plain import inside a plain `if`.

    python rag_from_scratch.py --docs my_notes/ --question "How do I restart the database?"

rag_from_scratch.py hands a command line with any flag beyond the tutorial's here, whole:
main() -> run(), which goes through the modules in this order:
  --docs, --index              ragkit/folder_index.py (and documents, chunking, saved_index)
  (or the sample)              the lesson's index_sample(), or its demo, run_demo()
  --hybrid, --rerank, --source, --tag, --context   ragkit/retrieval.py, ragkit/retrieval.py
  --eval, --compare            ragkit/documents.py, ragkit/retrieval.py
  --question, --generator, --stream   ragkit/generators.py builds the generator, ragkit/answering.py
                               retrieves, prompts, answers and checks the quotes
"""

import argparse
import sys
from dataclasses import dataclass

import rag_from_scratch as rag
from ragkit import answering, chunking, documents, embeddings, generators, readers, retrieval
from ragkit.support import bounded, run_cli

# What --docs switches on, and the flag that changes each (the values were chosen on the
# development sets: rageval/tuning.py).
# A question, not a document: with the passages it must fit a small model's context, and a
# 126 KB one took 2.5 GB of memory before llama.cpp said it did not fit.
MAX_QUESTION_CHARS = 2_000
MAX_FOLDER_MB = 1_000_000     # --max-folder-mb: a terabyte of notes is no folder to read on a laptop
DOCS_DEFAULTS = {"chunk_size": chunking.WORDS, "k": documents.K, "hybrid": str(retrieval.DOCS_HYBRID),
                 "context": True}


def per_mode(p, dest: str, docs_value) -> None:
    """A tutorial flag whose default differs with --docs: its --help states both, and it is
    left unset (None) until parse_args knows the mode."""
    for action in p._actions:
        if action.dest == dest:
            text = action.help.removesuffix(" (default: %(default)s)")
            action.help = f"{text} (default: {action.default}; with --docs: {docs_value})"
            action.default = None


def add_docs_flags(g) -> None:
    """--docs and the flags that go with it, in their group of the parser."""
    g.add_argument("--docs", metavar="FOLDER", help="use your own files instead of the sample: .md, .txt, "
                                                    "and with their extras .pdf, .html, .docx, .ipynb")
    g.add_argument("--index", metavar="DIR", help="with --docs: save the index here and reuse it")
    g.add_argument("--eval", metavar="FILE", help='with --docs: JSON Lines of {"question": ..., '
                                                  '"relevant": [file, ...]} to score retrieval')
    g.add_argument("--exclude", metavar="GLOB", action="append",
                   help="with --docs: leave out files whose path matches, e.g. CHANGELOG.md or "
                        "'reference/*' (repeat it for more)")
    g.add_argument("--max-pages", type=bounded(int, 1, 100_000), metavar="N",
                   help=f"with --docs: read at most N pages of each PDF (default: {readers.MAX_PAGES})")
    g.add_argument("--max-folder-mb", type=bounded(int, 1, MAX_FOLDER_MB), metavar="N",
                   help=f"with --docs: read at most N MB of files from the folder; the files past it "
                        f"are skipped and counted (default: {documents.MAX_FOLDER_MB})")
    g.add_argument("--notebook-outputs", action="store_true",
                   help="with --docs: read what the code cells of .ipynb notebooks printed, too")


def parser():
    """The tutorial's flags (the lesson's own parser), then the kit's, each group naming the
    file that does its work; --help states each default, per mode (docs/flags.md agrees)."""
    p = rag.tutorial_parser()
    p.epilog = None
    p.add_argument("--help-all", action="help", help="show every flag, the kit's too, and exit")
    p.add_argument("--model", default=rag.defaults(rag.Embedder)["model"],
                   help="MiniLM model name or local folder (default: %(default)s)")
    per_mode(p, "chunk_size", chunking.WORDS)
    per_mode(p, "k", documents.K)
    g = p.add_argument_group("answers (ragkit/answering.py, ragkit/generators.py, ragkit/extractive.py)")
    g.add_argument("--generator", choices=generators.GENERATORS,
                   help="write the answer: extractive (no model: sentences of the passages), local "
                        "(a model on this machine: Qwen2.5-Coder-1.5B once installed, or "
                        "--local-model), openai (--llm-url: a server such as llama.cpp's or "
                        "Ollama), bedrock (Amazon Bedrock, BILLED; --generate says the same). "
                        "Every answer's quotes are checked against the passages")
    generators.add_model_arguments(g)   # --llm-url, --llm-model, --api-key-env, --max-tokens, ...
    g.add_argument("--stream", action="store_true",
                   help="print the answer piece by piece as it is written, then check it")
    g.add_argument("--interactive", action="store_true",
                   help="load the index and the model once, then answer one question per line, "
                        "typed at the prompt or piped from a file (an empty line is skipped; "
                        "Ctrl-D or the file's end stops)")
    add_docs_flags(p.add_argument_group("your own files (ragkit/documents.py, ragkit/folder_index.py)"))
    g = p.add_argument_group("better retrieval (ragkit/retrieval.py)")
    g.add_argument("--hybrid", nargs="?", const="rrf", metavar="rrf|WEIGHT",
                   help="fuse BM25 with the vectors: by rank (rrf, when no value is given) or WEIGHT "
                        "x BM25 + (1 - WEIGHT) x cosine, both rescaled to 0..1 (default: off; with "
                        f"--docs: {retrieval.DOCS_HYBRID})")
    g.add_argument("--rerank", nargs="?", const="cross-encoder/ms-marco-MiniLM-L6-v2",
                   metavar="MODEL|FOLDER|auto", help="re-order 4 x k candidates with a cross-encoder "
                                                     "(auto: go on without one if none is installed)")
    g.add_argument("--source", metavar="PREFIX", help="search only files whose path starts with PREFIX")
    g.add_argument("--tag", help="search only files whose front matter lists this tag")
    g.add_argument("--context", action=argparse.BooleanOptionalAction,
                   help='embed each chunk with its title ("file > heading") in front: on the development '
                        'sets it ranked better (default: off; with --docs: on)')
    g.add_argument("--compare", action="store_true",
                   help="score plain, hybrid, rerank and context side by side (the demo's questions, "
                        "or --eval FILE with --docs)")
    return p


def parse_args(argv=None):
    """The flags, each default set for the mode (--docs or the sample)."""
    args = parser().parse_args(argv)
    tutorial = {"chunk_size": rag.defaults(rag.build_chunks)["chunk_size"],
                "k": rag.defaults(rag.search)["k"], "hybrid": None, "context": False}
    args.given = [name for name in DOCS_DEFAULTS if getattr(args, name) is not None]
    for name, value in (DOCS_DEFAULTS if args.docs else tutorial).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.generate and args.generator not in (None, "bedrock"):
        raise ValueError("choose one: --generate (Amazon Bedrock, as in the tutorial) or --generator NAME")
    args.generator = "bedrock" if args.generate else args.generator
    if args.interactive and args.question:
        raise ValueError("choose one: --question Q (one question) or --interactive (one a line)")
    if args.stream and not args.generator:
        raise ValueError("--stream shows an answer as it is written: add --generator NAME")
    return args


def better_retrieval_flags(args) -> bool:
    """True if any flag of ragkit/retrieval.py is given."""
    return any(v not in (None, False) for v in (args.hybrid, args.rerank, args.source, args.tag,
                                                 args.context, args.compare))


@dataclass
class Checked:
    """What check_args found, passed on to run()."""
    backend: str                        # --backend auto: what loads
    model: str                          # a hub id: its folder in the cache
    questions: list | None = None       # --eval's, read (matched to the index's files later)


def check_args(args) -> Checked:
    """Every flag's value, before any slow work: nothing is loaded, started or built here."""
    rag.check_args(args)
    if args.question:
        answering.check_length(len(args.question), MAX_QUESTION_CHARS, "--question")
    checked = Checked(*embeddings.model_for(args.backend, args.model))   # --model: one line now
    if args.docs is not None or args.index is not None or args.eval is not None or args.exclude \
            or args.max_pages is not None or args.max_folder_mb is not None or args.notebook_outputs:
        documents.check_args(args)
    if args.eval:
        checked.questions = documents.load_eval_file(args.eval)   # a malformed file: now, not after embedding
    if better_retrieval_flags(args):
        retrieval.check_args(args)
    if args.generator:
        generators.check_generator(args)         # a missing model or key fails now
    return checked


def print_docs_settings(args) -> None:
    """What --docs switches on, once, with its values and the flag that changes each."""
    said = {"chunk_size": f"chunks of whole sections up to {args.chunk_size} words (--chunk-size)",
            "k": f"{args.k} passages a question (--k)",
            "hybrid": f"hybrid search, {args.hybrid} x BM25 + the rest cosine (--hybrid)",
            "context": "each chunk embedded with its title in front "
                       "(--context; --no-context turns it off)"}
    defaults = [said[name] for name in DOCS_DEFAULTS if name not in args.given
                and (name != "context" or args.context)]
    if defaults:
        print("--docs uses: " + "; ".join(defaults))


def run(args) -> None:
    """The demo or your own files; then the question, answered if a generator is chosen."""
    checked = check_args(args)
    args.backend, args.model = checked.backend, checked.model
    context = None                        # vectors of each chunk with its title in front
    if args.docs:                         # your own folder instead of the sample
        from ragkit import folder_index
        print_docs_settings(args)
        chunks, index, embedder = folder_index.index_folder(args)
        context = index if args.context else None       # --context: the index embeds titles
    elif args.question or args.generator or args.interactive:
        chunks, index, embedder = rag.index_sample(args)
    else:
        chunks, index, embedder = rag.run_demo(args)
    chosen = retrieval.settings(args, chunks)
    retrieve = retrieval.make_retriever(chunks, index, embedder, **chosen, context_vectors=context)
    k = min(args.k, len(chunks) if chosen["allowed"] is None else len(chosen["allowed"]))
    name = retrieval.variant_name(chosen["hybrid"], chosen["reranker"], args.context)
    eval_set = rag.EVAL_SET
    if args.docs and args.eval:           # your labelled questions, scored as --question retrieves
        eval_set = documents.indexed_only(checked.questions, {c["doc_id"] for c in chunks}, args.eval)
        found = [retrieve(item["question"], k) for item in eval_set]     # once, for both scores
        retrieval.print_evaluation(eval_set, found, k, name, args.eval, retrieve.timing)
        documents.print_answer_in_context(eval_set, found, k)
    elif args.docs:
        eval_set = None
        if not (args.question or args.interactive):
            print('next: add --question "..." to ask about these files')
    elif better_retrieval_flags(args) and not (args.question or args.generator):
        found = [retrieve(item["question"], k) for item in eval_set]
        retrieval.print_evaluation(eval_set, found, k, name, "the sample's questions",
                                          retrieve.timing)
    if args.compare:
        retrieval.print_compare(eval_set, chunks, index, embedder, k, chosen, context)
    if args.question or args.generator or args.interactive:
        llm = None
        if args.generator:                # built once: a local model loads at the first question
            llm = generators.make_generator(args.generator, args, args.stream, embedder, chunks)
        questions = [args.question or rag.VACATION_Q]
        if args.interactive:              # one a line, typed or piped, all with this index and model
            questions = answering.typed_questions(sys.stdin, MAX_QUESTION_CHARS)
        for question in questions:
            answering.ask(question, retrieve, k, llm)


def main(argv=None) -> int:
    """`python rag_from_scratch.py --help` lists every flag; errors are one line on stderr."""
    return run_cli(lambda: run(parse_args(argv)))
