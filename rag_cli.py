"""
rag_cli.py: the command line of rag_from_scratch.py, and the plumbing every script shares.

  main            `python rag_from_scratch.py [flags]`: every flag of the kit is declared in
                  parse_args; run() calls the companion file a flag needs, with a plain import
                  inside a plain `if`, and the core's functions for the rest
  OneLineParser   a bad flag gives one line, not a usage block
  run_cli         the one error path: an error is one line on stderr and exit status 1;
                  Ctrl-C is "interrupted" and exit status 130; never a traceback
  with_deadline   the one way to wait on the network: say what we wait for and for how
                  long, then give up with one line that names what to check
  progress        the one progress display: a bar on a terminal, a few lines in a log
  read_jsonl      the one JSON Lines reader (--eval, --gold): each bad line named by file
                  and line

Nothing here is needed to understand RAG; it keeps the scripts kind to bad input.
"""

import argparse
import os
import signal
import sys
import threading

EXIT_ERROR = 1
EXIT_INTERRUPTED = 130


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag gives one line instead of a usage block."""

    def error(self, message):
        self.exit(2, f"error: {message} (see --help)\n")


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (some libraries put newlines in theirs)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def interrupted(signum=None, frame=None):
    """Ctrl-C before the work starts (while NumPy or torch load): one line, exit 130."""
    print("interrupted", file=sys.stderr, flush=True)
    os._exit(EXIT_INTERRUPTED)         # mid-import, a clean exit can wait on half-made threads


def quiet_interrupts() -> None:
    """Call first thing in a script run as a command, before its heavy imports.

    Ctrl-C is held until run_cli starts, then handled there. Threads that libraries start
    meanwhile (BLAS, llama.cpp) inherit the hold, so Ctrl-C always reaches Python's main
    thread, never a library's own handler (llama.cpp's can leave its start-up stuck).
    Where threads cannot hold signals (Windows), Ctrl-C during the imports just exits.
    """
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    else:
        signal.signal(signal.SIGINT, interrupted)


def run_cli(work, *args) -> int:
    """Run work(*args) for a command line; return its exit status: what work returns if it
    returns a number, else 0; 1 after an error (one line on stderr); 130 after Ctrl-C."""
    mask = getattr(signal, "pthread_sigmask", None)
    held = bool(mask) and signal.SIGINT in mask(signal.SIG_BLOCK, [])   # a script, from start-up
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if held:                                   # a Ctrl-C held since start-up arrives here
            mask(signal.SIG_UNBLOCK, {signal.SIGINT})
        status = work(*args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ValueError, RuntimeError, OSError, ImportError, LookupError) as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:                  # `... | head` closed the pipe: not an error
        return 0
    finally:
        if held:                    # a script: held again, so a Ctrl-C from here on reaches
            mask(signal.SIG_BLOCK, {signal.SIGINT})     # leave(): one line, never a traceback
        sys.stdout.flush()
    return status if isinstance(status, int) else 0


def main_for(run, parse_args):
    """A script's main(argv=None) -> exit status: its flags parsed, `run(args)` through
    run_cli (one error path for every script)."""
    def main(argv=None) -> int:
        return run_cli(run, parse_args(argv))
    main.__doc__ = f"`python {run.__module__}.py --help` lists the flags; errors are one line."
    return main


def refuse_empty(args, flags: tuple, what: str = "a value") -> None:
    """ValueError if one of these flags was given as an empty string ("--docs ''")."""
    for flag in flags:
        value = getattr(args, flag)
        if value is not None and not str(value).strip():
            raise ValueError(f"--{flag} needs {what}, got an empty string")


def leave(status: int) -> None:
    """Exit a command with `status`; after Ctrl-C, do not wait for worker threads (a model
    server, a stuck network call) that would keep the process alive."""
    sys.stdout.flush()
    sys.stderr.flush()
    if status == EXIT_INTERRUPTED:
        os._exit(status)
    signal.signal(signal.SIGINT, interrupted)   # the work is done: a Ctrl-C from here, or one
    if hasattr(signal, "pthread_sigmask"):      # held since run_cli, is one line and exit 130
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    sys.exit(status)


def with_deadline(what: str, seconds: float, work, check: str):
    """Return work(), run in a helper thread; after `seconds` give up with one line.

    Socket timeouts do not cover name lookups or libraries' own retries; one overall
    deadline does. `what` names the wait ("the model hub at ..."), `check` what to do.
    """
    print(f"waiting for {what} (up to {seconds:g} s) ...", file=sys.stderr, flush=True)
    box = {}

    def target():
        try:
            box["value"] = work()
        except BaseException as exc:         # handed to the caller's thread below
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)   # a stuck call never blocks exit
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"{what} did not answer within {seconds:g} s: {check}")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def progress(items, total: int, what: str, unit: str = ""):
    """Yield `items`, showing progress on stderr: tqdm's bar on a terminal; in a log (stderr
    not a terminal) a plain line at every tenth, not hundreds of redrawn frames."""
    if sys.stderr.isatty():
        from tqdm import tqdm
        yield from tqdm(items, total=total, desc=what, unit=unit, file=sys.stderr, leave=False)
        return
    step, done = max(1, total // 10), 0
    for item in items:
        yield item
        done += 1
        if done % step == 0 or done == total:
            print(f"{what}: {done:,} of {total:,}{unit}", file=sys.stderr, flush=True)


def parse_json(text):
    """json.loads with the garbage collector paused: a deeply nested line drives the parser to
    the recursion limit, and a finalizer the collector ran at that depth would fail noisily."""
    import gc
    import json
    paused = gc.isenabled()
    gc.disable()
    try:
        return json.loads(text)
    finally:
        if paused:
            gc.enable()


def read_jsonl(path, parse, what: str) -> list:
    """[parse(record) for each line of a JSON Lines file]. parse raises ValueError on a bad
    record; every bad line is named (file and line) on stderr, then one error is raised.
    A UTF-8 byte-order mark (as some editors save) is accepted."""
    from pathlib import Path
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found: {path}")
    items, bad = [], []
    for n, line in enumerate(path.read_text(encoding="utf-8-sig").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = parse_json(line)
        except (ValueError, RecursionError) as exc:        # RecursionError: nested too deep
            bad.append(f"{path} line {n}: not JSON ({one_line(exc)})")
            continue
        try:
            items.append(parse(record))
        except ValueError as exc:
            bad.append(f"{path} line {n}: {one_line(exc)}")
    if len(bad) == 1:                      # one bad line: the error itself names it
        raise ValueError(bad[0])
    if bad:
        print("\n".join(bad), file=sys.stderr)
        raise ValueError(f"{path}: {len(bad)} bad line(s), named above; fix them and run again")
    if not items:
        raise ValueError(f"{path} has no questions")
    return items


# == rag_from_scratch.py's command line ===================================================
def parse_args(argv=None):
    """The tutorial's flags (the core's own parser), then the kit's, each group naming the
    file that does its work."""
    import rag_from_scratch as rag
    import rag_llm
    p = rag.tutorial_parser()
    g = p.add_argument_group("answers (rag_extractive.py, rag_llm.py)")
    g.add_argument("--generator", choices=rag_llm.GENERATORS,
                   help="write the answer: extractive (no model), local (SmolLM2), openai "
                        "(--llm-url), bedrock (Amazon Bedrock, BILLED; --generate says the same)")
    rag_llm.add_model_arguments(g)   # --llm-url, --llm-model, --api-key-env, --max-tokens, --threads
    g.add_argument("--stream", action="store_true",
                   help="print the answer piece by piece as it is written, then time to first "
                        "piece and pieces/s")
    g = p.add_argument_group("your own files (rag_docs.py)")
    g.add_argument("--docs", metavar="FOLDER", help="use your own .md/.txt files instead of the sample")
    g.add_argument("--index", metavar="DIR", help="with --docs: save the index here and reuse it")
    g.add_argument("--eval", metavar="FILE", help='with --docs: JSON Lines of {"question": ..., '
                                                  '"relevant": [file, ...]} to score retrieval')
    g.add_argument("--exclude", metavar="GLOB", action="append",
                   help="with --docs: leave out files whose path matches, e.g. CHANGELOG.md or "
                        "'reference/*' (repeat it for more)")
    g = p.add_argument_group("better retrieval (rag_retrieval.py)")
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
    args = p.parse_args(argv)
    if args.generate and args.generator not in (None, "bedrock"):
        raise ValueError("choose one: --generate (Amazon Bedrock, as in the tutorial) or --generator NAME")
    args.generator = "bedrock" if args.generate else args.generator
    if args.context is None:              # titles in front: the --docs default, measured
        args.context = bool(args.docs)
    if args.stream and not args.generator:
        raise ValueError("--stream shows an answer as it is written: add --generator NAME")
    return args


def better_retrieval(args) -> bool:
    """True if any flag of rag_retrieval.py is given."""
    return any(v not in (None, False) for v in (args.hybrid, args.rerank, args.source, args.tag,
                                                 args.context, args.compare))


def check_args(args) -> None:
    """Every flag's value, before any slow work: nothing is loaded, started or built here."""
    import rag_from_scratch as rag
    rag.check_args(args)
    if args.docs is not None or args.index is not None or args.eval is not None or args.exclude:
        import rag_docs
        rag_docs.check_args(args)
    if args.generator is not None:
        import rag_llm
        rag_llm.check_args(args)
    if better_retrieval(args):
        import rag_retrieval
        rag_retrieval.check_args(args)


def run(args) -> None:
    """The demo or your own files; then the question, answered if a generator is chosen."""
    import rag_from_scratch as rag
    check_args(args)
    llm = None
    if args.generator:                    # built first, so a missing model or key fails early
        import rag_llm
        llm = rag_llm.make_generator(args.generator, args, args.stream)
    prompt_fn, system_prompt, eval_set = rag.build_prompt, rag.SYSTEM_PROMPT, rag.EVAL_SET
    context = None                        # --context's vectors, when a saved --index has them
    if args.docs:                         # your own folder instead of the sample
        import rag_docs
        chunks, index, embedder, context = rag_docs.index_folder(args)
        prompt_fn, system_prompt = rag_docs.build_fenced_prompt, rag_docs.DOCS_SYSTEM_PROMPT
        eval_set = rag_docs.load_eval_file(args.eval, {c["doc_id"] for c in chunks}) if args.eval else None
        if eval_set:
            print(f"\n== Retrieval evaluation ({args.eval}) ==")
            rag.print_evaluation(eval_set, index, chunks, embedder, args.k)
        elif not args.question:
            print('next: add --question "..." to ask about these files')
    elif args.question or llm:
        chunks, index, embedder = rag.index_sample(args)
    else:
        chunks, index, embedder = rag.run_demo(args)
    retrieve = None
    if better_retrieval(args):            # hybrid, rerank, filters, context, --compare
        import rag_retrieval
        retrieve = rag_retrieval.retriever_for(args, chunks, index, embedder, eval_set, context)
    if args.question or llm:
        rag.answer_question(args.question or rag.VACATION_Q, chunks, index, embedder, args.k, llm,
                            retrieve, prompt_fn, system_prompt)


def main(argv=None) -> int:
    """`python rag_from_scratch.py --help` lists every flag; errors are one line on stderr."""
    return run_cli(lambda: run(parse_args(argv)))
