"""
ragkit/cli.py: the kit's command line, the layer on top of every other module. It only declares
flags and hands each one to the file that does its work, with a plain import inside a plain `if`.

    python rag_from_scratch.py --docs examples/notes/ --question "How do I restart the database?"

rag_from_scratch.py hands a command line with any flag beyond the tutorial's here, whole:
main() -> run(), which goes through the modules in this order:
  check_args()                 every flag checked into one Settings; nothing loaded yet
  --docs, --index              ragkit/documents.py reads the folder, ragkit/folder_index.py
                               chunks, embeds and keeps the index (in --index DIR or the cache)
  (or the sample)              the lesson's index_sample(), or its demo, run_demo()
  --hybrid, --rerank, --source, --tag, --context, --compare   ragkit/retrieval.py
  --eval                       ragkit/documents.py reads it, ragkit/retrieval.py scores it
  --question, --generator, --stream, --show-prompt   ragkit/generators.py builds the generator,
                               ragkit/answering.py retrieves, prompts, answers and checks the quotes
"""

import argparse
import sys
from dataclasses import dataclass

import rag_from_scratch as rag
from ragkit import answering, chunking, documents, folder_index, generators, readers, retrieval
from ragkit.support import bounded, run_cli

# What --docs switches on, and the flag that changes each (the values were chosen on the
# development sets: rageval/tuning.py).
# A question, not a document: with the passages it must fit a small model's context, and a
# 126 KB one took 2.5 GB of memory before llama.cpp said it did not fit.
MAX_QUESTION_CHARS = 2_000
MAX_FOLDER_MB = 1_000_000     # --max-folder-mb: a terabyte of notes is no folder to read on a laptop
DOCS_DEFAULTS = {"chunk_size": chunking.WORDS, "k": documents.K, "hybrid": str(retrieval.DOCS_HYBRID),
                 "context": True}


def add_docs_flags(g) -> None:
    """--docs and the flags that go with it, in their group of the parser."""
    g.add_argument("--docs", metavar="FOLDER", help="use your own files instead of the sample: .md, .txt, "
                                                    "and with their extras .pdf, .html, .docx, .ipynb")
    g.add_argument("--index", metavar="DIR", help="with --docs: keep the index here and reuse it "
                                                  "(default: the kit's cache folder, one a folder)")
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
    p.epilog = None                                  # it points here: --help-all
    p.set_defaults(chunk_size=None, k=None)          # each mode has its own: see for_mode()
    p.add_argument("--help-all", action="help", help="show every flag, the kit's too, and exit")
    p.add_argument("--model", default=rag.defaults(rag.Embedder)["model"],
                   help="MiniLM model name or local folder (default: %(default)s)")
    g = p.add_argument_group("answers (ragkit/answering.py, ragkit/generators.py)")
    g.add_argument("--generator", choices=generators.GENERATORS,
                   help="write the answer: extractive (no model: sentences of the passages), local "
                        "(a model on this machine: Qwen2.5-Coder-1.5B once installed, or "
                        "--local-model), openai (--llm-url: a server such as llama.cpp's or "
                        "Ollama), bedrock (Amazon Bedrock, BILLED; --generate says the same). "
                        "Every answer's quotes are checked against the passages")
    generators.add_model_arguments(g)   # --llm-url, --llm-model, --api-key-env, --max-tokens, ...
    g.add_argument("--show-prompt", action="store_true",
                   help="print the whole prompt before a generator's answer (without a generator "
                        "it is always printed)")
    g.add_argument("--stream", action="store_true",
                   help="print the answer piece by piece as it is written, then check it")
    g.add_argument("--interactive", action="store_true",
                   help="load the index and the model once, then answer one question per line, "
                        "typed at the prompt or piped from a file (an empty line is skipped; "
                        "Ctrl-D or the file's end stops)")
    add_docs_flags(p.add_argument_group(
        "your own files (ragkit/documents.py, ragkit/folder_index.py)",
        f"With --docs four defaults change: --chunk-size {chunking.WORDS} (whole sections up to that "
        f"many words), --k {documents.K}, --hybrid {retrieval.DOCS_HYBRID} and --context on."))
    g = p.add_argument_group("better retrieval (ragkit/retrieval.py)")
    g.add_argument("--hybrid", nargs="?", const="rrf", metavar="rrf|WEIGHT",
                   help="fuse BM25 with the vectors: by rank (rrf, when no value is given) or WEIGHT "
                        "x BM25 + (1 - WEIGHT) x cosine, both rescaled to 0..1 (default: off)")
    g.add_argument("--rerank", nargs="?", const="cross-encoder/ms-marco-MiniLM-L6-v2",
                   metavar="MODEL|FOLDER|auto", help="re-order 4 x k candidates with a cross-encoder "
                                                     "(auto: go on without one if none is installed)")
    g.add_argument("--source", metavar="PREFIX", help="search only files whose path starts with PREFIX")
    g.add_argument("--tag", help="search only files whose front matter lists this tag")
    g.add_argument("--context", action=argparse.BooleanOptionalAction,
                   help='embed each chunk with its title ("file > heading") in front: on the development '
                        'sets it ranked better (default: off)')
    g.add_argument("--compare", action="store_true",
                   help="score plain, hybrid, rerank and context side by side (the demo's questions, "
                        "or --eval FILE with --docs)")
    return p


def parse_args(argv=None):
    """The flags as given; an unknown one is one line that suggests the nearest."""
    p = parser()
    args, unknown = p.parse_known_args(argv)
    if unknown:
        import difflib
        flags = [f for f in p._option_string_actions if f.startswith("--")]   # argparse's own table
        near = difflib.get_close_matches(unknown[0].split("=")[0], flags, n=2)
        p.error(f"unrecognized arguments: {' '.join(unknown)}"
                + (f" (did you mean {' or '.join(near)}?)" if near else ""))
    return args


TUTORIAL_DEFAULTS = {"chunk_size": rag.defaults(rag.build_chunks)["chunk_size"],
                     "k": rag.defaults(rag.search)["k"], "hybrid": None, "context": False}


def for_mode(name: str, given, docs: bool):
    """A flag's value as given, else its default for the mode: --docs or the sample."""
    if given is not None:
        return given
    return DOCS_DEFAULTS[name] if docs else TUTORIAL_DEFAULTS[name]


def better_retrieval(args) -> bool:
    """True if any flag of ragkit/retrieval.py is given."""
    return any(v not in (None, False) for v in (args.hybrid, args.rerank, args.source, args.tag,
                                                 args.context, args.compare))


@dataclass(frozen=True)
class Settings:
    """The flags checked, each default resolved for the mode: what run() works from."""
    backend: str                        # --backend auto: what loads
    model: str                          # a hub id: its folder in the cache
    chunk_size: int
    k: int
    hybrid: str | None
    context: bool
    generator: str | None               # --generate is --generator bedrock
    models: generators.ModelSettings
    reading: documents.Reading
    questions: list | None = None       # --eval's, read (matched to the index's files later)


def check_args(args) -> Settings:
    """Every flag's value, before any slow work: nothing is loaded, started or built here."""
    docs = args.docs is not None
    chunk_size, k = for_mode("chunk_size", args.chunk_size, docs), for_mode("k", args.k, docs)
    if args.generate and args.generator not in (None, "bedrock"):
        raise ValueError("choose one: --generate (Amazon Bedrock, as in the tutorial) or --generator NAME")
    rag.check_args(argparse.Namespace(**{**vars(args), "chunk_size": chunk_size, "k": k}))
    generator = "bedrock" if args.generate else args.generator
    if args.interactive and args.question:
        raise ValueError("choose one: --question Q (one question) or --interactive (one a line)")
    if args.stream and not generator:
        raise ValueError("--stream shows an answer as it is written: add --generator NAME")
    if args.question:
        answering.check_length(len(args.question), MAX_QUESTION_CHARS, "--question")
    backend, model = folder_index.model_for(args.backend, args.model)     # --model: one line now
    documents.check_paths(args.docs, args.index, args.eval, tuple(args.exclude or ()))
    if not docs and (args.index or args.eval or args.exclude or args.max_pages is not None
                     or args.notebook_outputs or args.max_folder_mb is not None):
        raise ValueError("--index, --eval, --exclude, --max-pages, --max-folder-mb and "
                         "--notebook-outputs work with --docs FOLDER")
    if args.compare and docs and not args.eval:
        raise ValueError("--compare with --docs needs --eval FILE: questions labelled with the files "
                         "that answer them")
    retrieval.check_flags(args.hybrid, args.rerank, args.source, args.tag)
    if not docs and (args.source is not None or args.tag is not None):
        retrieval.check_filters(rag.CORPUS, args.source, args.tag)   # a folder's: once it is read
    models = generators.ModelSettings(args.local_model, args.threads, args.max_tokens, args.llm_url,
                                      args.llm_model, args.api_key_env, args.model_id, args.region)
    if generator:
        generators.check_generator(generator, models)    # a missing model or key fails now
    reading = documents.Reading(tuple(args.exclude or ()), args.max_pages or readers.MAX_PAGES,
                                args.notebook_outputs, args.max_folder_mb or documents.MAX_FOLDER_MB)
    questions = documents.load_eval_file(args.eval) if args.eval else None   # a bad file: now
    return Settings(backend, model, chunk_size, k, for_mode("hybrid", args.hybrid, docs),
                    for_mode("context", args.context, docs), generator, models, reading, questions)


def print_docs_settings(args, chosen: Settings) -> None:
    """What --docs switches on, once, with its values and the flag that changes each."""
    said = {"chunk_size": f"chunks of whole sections up to {chosen.chunk_size} words (--chunk-size)",
            "k": f"{chosen.k} passages a question (--k)",
            "hybrid": f"hybrid search, {chosen.hybrid} x BM25 + the rest cosine (--hybrid)",
            "context": "each chunk embedded with its title in front "
                       "(--context; --no-context turns it off)"}
    defaults = [said[name] for name in DOCS_DEFAULTS if getattr(args, name) is None
                and (name != "context" or chosen.context)]
    if defaults:
        print("--docs uses: " + "; ".join(defaults))


def run(args) -> None:
    """The demo or your own files; then the question, answered if a generator is chosen."""
    chosen = check_args(args)
    lesson = argparse.Namespace(**{**vars(args), "backend": chosen.backend, "model": chosen.model,
                                   "chunk_size": chosen.chunk_size, "k": chosen.k})
    context = None                        # vectors of each chunk with its title in front
    if args.docs:                         # your own folder instead of the sample
        print_docs_settings(args, chosen)
        docs = documents.load_folder(args.docs, chosen.reading)
        if args.source is not None or args.tag is not None:
            retrieval.check_filters(docs, args.source, args.tag)      # before the slow part
        index_dir = args.index or folder_index.kept_folder(args.docs)    # no --index: the kit's cache
        chunks, index, embedder = folder_index.index_folder(
            docs, chosen.backend, chosen.model, chosen.chunk_size, chosen.context, index_dir,
            kept=args.index is None)
        context = index if chosen.context else None       # --context: the index embeds titles
    elif args.question or chosen.generator or args.interactive:
        chunks, index, embedder = rag.index_sample(lesson)
    else:
        chunks, index, embedder = rag.run_demo(lesson)
    found_by = retrieval.settings(chunks, chosen.hybrid, args.rerank, args.source, args.tag,
                                  chosen.context)
    retrieve = retrieval.make_retriever(chunks, index, embedder, **found_by, context_vectors=context)
    k = min(chosen.k, len(chunks) if found_by["allowed"] is None else len(found_by["allowed"]))
    name = retrieval.variant_name(found_by["hybrid"], found_by["reranker"], chosen.context)
    eval_set = rag.EVAL_SET
    if args.docs and args.eval:           # your labelled questions, scored as --question retrieves
        indexed = {c["doc_id"] for c in chunks}          # documents that gave chunks
        eval_set = documents.indexed_only(chosen.questions, {d["doc_id"]: d["file"] for d in docs
                                                             if d["doc_id"] in indexed}, args.eval)
        found = [retrieve(item["question"], k) for item in eval_set]     # once, for both scores
        retrieval.print_evaluation(eval_set, found, k, name, args.eval, retrieve.timing)
        documents.print_answer_in_context(eval_set, found, k)
    elif args.docs:
        eval_set = None
        if not (args.question or args.interactive):
            print('next: add --question "..." to ask about these files')
    elif better_retrieval(args) and not (args.question or chosen.generator):
        found = [retrieve(item["question"], k) for item in eval_set]
        retrieval.print_evaluation(eval_set, found, k, name, "the sample's questions", retrieve.timing)
    if args.compare:
        retrieval.print_compare(eval_set, chunks, index, embedder, k, found_by, context)
    if args.question or chosen.generator or args.interactive:
        llm = None
        if chosen.generator:              # built once: a local model loads at the first question
            llm = generators.make_generator(chosen.generator, chosen.models, args.stream, embedder, chunks)
        who = "the extractive answer" if chosen.generator == "extractive" else "the model"
        questions = [args.question or rag.VACATION_Q]
        if args.interactive:              # one a line, typed or piped, all with this index and model
            questions = answering.typed_questions(sys.stdin, MAX_QUESTION_CHARS)
        for question in questions:
            if not args.interactive:
                answering.ask(question, retrieve, k, llm, who, args.show_prompt)
                continue
            try:                          # Ctrl-C stops this answer; at question>, the session
                answering.ask(question, retrieve, k, llm, who, args.show_prompt)
            except KeyboardInterrupt:
                print("\n(interrupted: ask the next question, or press Ctrl-C again to stop)",
                      file=sys.stderr, flush=True)


def main(argv=None) -> int:
    """`python rag_from_scratch.py --help` lists every flag; errors are one line on stderr."""
    return run_cli(lambda: run(parse_args(argv)))
