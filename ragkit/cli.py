"""
ragkit/cli.py: the kit's command line, on top of every other room. It only declares flags and
hands each one to the file that does its work, with a plain import inside a plain `if`.

    python rag_from_scratch.py --docs my_notes/ --question "How do I restart the database?"

rag_from_scratch.py parses the tutorial's flags itself and hands a command line with any
other flag here, whole: main() -> run() -> the rooms below, in this order:
  --generator, --stream         ragkit/llm.py (extractive, local, openai, bedrock)
  --docs, --index, --eval       ragkit/documents.py and ragkit/saved_index.py
  --hybrid, --rerank, --source, --tag, --context, --compare   ragkit/retrieval.py
then the core's answer_question() shows the chunks, the prompt and the answer.
"""

import argparse

import rag_from_scratch as rag
from ragkit import chunking, documents, embeddings, readers, retrieval
from ragkit import llm as generators
from ragkit.plumbing import bounded, run_cli


def parse_args(argv=None):
    """The tutorial's flags (the core's own parser), then the kit's, each group naming the
    file that does its work."""
    p = rag.tutorial_parser()
    g = p.add_argument_group("answers (ragkit/extractive.py, ragkit/llm.py)")
    g.add_argument("--generator", choices=generators.GENERATORS,
                   help="write the answer: extractive (no model), local (SmolLM2-135M: a tiny "
                        "model to watch, not to trust; it got 0 of 30 right on a development set), "
                        "openai (--llm-url: a real model on llama.cpp's server or Ollama, for real "
                        "answers), bedrock (Amazon Bedrock, BILLED; --generate says the same)")
    generators.add_model_arguments(g)   # --llm-url, --llm-model, --api-key-env, --max-tokens, --threads
    g.add_argument("--stream", action="store_true",
                   help="print the answer piece by piece as it is written, then time to first "
                        "piece and pieces/s")
    g = p.add_argument_group("your own files (ragkit/documents.py, ragkit/saved_index.py)")
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
    g.add_argument("--notebook-outputs", action="store_true",
                   help="with --docs: read what the code cells of .ipynb notebooks printed, too")
    g = p.add_argument_group("better retrieval (ragkit/retrieval.py)")
    g.add_argument("--hybrid", nargs="?", const="rrf", metavar="rrf|WEIGHT",
                   help="fuse BM25 with the vectors: by rank (rrf, the default) or WEIGHT x BM25 + "
                        "(1 - WEIGHT) x cosine, both rescaled to 0..1")
    g.add_argument("--rerank", nargs="?", const="cross-encoder/ms-marco-MiniLM-L6-v2",
                   metavar="MODEL|FOLDER|auto", help="re-order 4 x k candidates with a cross-encoder "
                                                     "(auto: go on without one if none is installed)")
    g.add_argument("--source", metavar="PREFIX", help="search only files whose path starts with PREFIX")
    g.add_argument("--tag", help="search only files whose front matter lists this tag")
    g.add_argument("--context", action=argparse.BooleanOptionalAction,
                   help='embed each chunk with its title ("file > heading") in front (the default '
                        'with --docs: it ranked better on the development set; --no-context: off)')
    g.add_argument("--compare", action="store_true",
                   help="score plain, hybrid, rerank and context side by side (the demo's questions, "
                        "or --eval FILE with --docs)")
    p.set_defaults(chunk_size=None, k=None)   # the tutorial's, or --docs' own (chosen on real docs)
    args = p.parse_args(argv)
    if args.chunk_size is None:
        args.chunk_size = chunking.WORDS if args.docs else rag.defaults(rag.build_chunks)["chunk_size"]
    if args.k is None:
        args.k = documents.K if args.docs else rag.defaults(rag.search)["k"]
    if args.hybrid is None and args.docs:
        args.hybrid = str(retrieval.DOCS_HYBRID)
    if args.generate and args.generator not in (None, "bedrock"):
        raise ValueError("choose one: --generate (Amazon Bedrock, as in the tutorial) or --generator NAME")
    args.generator = "bedrock" if args.generate else args.generator
    if args.context is None:              # titles in front: the --docs default, measured
        args.context = bool(args.docs)
    if args.stream and not args.generator:
        raise ValueError("--stream shows an answer as it is written: add --generator NAME")
    return args


def better_retrieval(args) -> bool:
    """True if any flag of ragkit/retrieval.py is given."""
    return any(v not in (None, False) for v in (args.hybrid, args.rerank, args.source, args.tag,
                                                 args.context, args.compare))


def check_args(args) -> None:
    """Every flag's value, before any slow work: nothing is loaded, started or built here."""
    rag.check_args(args)
    if args.backend == "minilm" or (args.backend == "auto" and embeddings.looks_like_folder(args.model)):
        embeddings.model_for(args.backend, args.model)    # --model: one line now if it cannot load
    if args.docs is not None or args.index is not None or args.eval is not None or args.exclude \
            or args.max_pages is not None or args.notebook_outputs:
        from ragkit import documents
        documents.check_args(args)
    if better_retrieval(args):
        from ragkit import retrieval
        retrieval.check_args(args)


def run(args) -> None:
    """The demo or your own files; then the question, answered if a generator is chosen."""
    check_args(args)
    args.backend, args.model = embeddings.model_for(args.backend, args.model)   # hub id: its folder
    llm = None
    if args.generator and args.generator != "extractive":   # first: a missing model or key fails early
        llm = generators.make_generator(args.generator, args, args.stream)
    prompt_fn, system_prompt, eval_set = rag.build_prompt, rag.SYSTEM_PROMPT, rag.EVAL_SET
    context = None                        # vectors of each chunk with its title in front
    if args.docs:                         # your own folder instead of the sample
        from ragkit import saved_index
        chunks, index, embedder = saved_index.index_folder(args)
        context = index if args.context else None       # --context: the index embeds titles
        prompt_fn, system_prompt = documents.build_fenced_prompt, documents.DOCS_SYSTEM_PROMPT
        eval_set = documents.load_eval_file(args.eval, {c["doc_id"] for c in chunks}) if args.eval else None
        if eval_set:
            print(f"\n== Retrieval evaluation ({args.eval}) ==")
            rag.print_evaluation(eval_set, index, chunks, embedder, args.k)
        elif not args.question:
            print('next: add --question "..." to ask about these files')
    elif args.question or args.generator:
        chunks, index, embedder = rag.index_sample(args)
    else:
        chunks, index, embedder = rag.run_demo(args)
    if args.generator == "extractive":    # on your pages it scores sentences with the index's model
        llm = generators.make_generator(args.generator, args, args.stream, *((embedder, chunks) if args.docs else ()))
    retrieve = None
    if better_retrieval(args):            # hybrid, rerank, filters, context, --compare
        retrieve = retrieval.retriever_for(args, chunks, index, embedder, eval_set, context)
    if args.docs and eval_set:            # the facts, if the file has them: can any answer be right?
        documents.print_answer_in_context(eval_set, index, chunks, embedder, args.k, retrieve)
    if args.question or args.generator:
        rag.answer_question(args.question or rag.VACATION_Q, chunks, index, embedder, args.k, llm,
                            retrieve, prompt_fn, system_prompt, flag_uncited=bool(args.docs))


def main(argv=None) -> int:
    """`python rag_from_scratch.py --help` lists every flag; errors are one line on stderr."""
    return run_cli(lambda: run(parse_args(argv)))
