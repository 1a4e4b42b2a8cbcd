"""
ragbench/markdown.py: the Markdown reader and the chunker on hostile 2 MB files, timed.

    python -m ragbench.markdown              # every pattern, 2 MB each, read and chunked
    python -m ragbench.markdown --mb 0.5     # smaller files
    python -m ragbench.markdown --minilm     # chunks fitted with MiniLM's own tokenizer too

Each file repeats one pattern a pathological input uses: directives that never close, a line
of spaces, a block quote nested a million deep, lists and admonitions nested a thousand deep,
front matter nested 50,000 deep, one 80,000-word line, one 100 KB line of code. The goal for
each is under 5 s (a pattern that backtracks over a line takes minutes here); the seconds are
this machine's, now: compare them with each other, not across machines.
"""

import sys
import time

from ragkit import chunking, documents, readers, support

GOAL_S = 5.0


def patterns(size: int) -> dict:
    """name -> Markdown text of about `size` characters."""
    half = size // 2
    return {
        "{{ with no closer": "# T\n\n" + "{{" * half + "\n",
        "{* with no closer": "# T\n\n" + "{*" * half + "\n",
        "{% with no closer": "# T\n\n" + "{%" * half + "\n",
        "a line of spaces": "# T\n\n" + " " * size + "x\n",
        "'> ' repeated on one line": "> " * half + "deep\n",
        "lists nested deep": "".join("  " * d + "- item\n" for d in range(min(size // 2000, 1400)))
                             * max(1, size // (2 * 1400 ** 2)),
        "admonitions nested deep": "".join("    " * d + "!!! note\n" for d in range(990))
                                   + "    " * 990 + "body\n",
        "front matter nested deep": "---\ntags: " + "[" * 50_000 + "]" * 50_000 + "\n---\n# T\nbody\n",
        "an 80,000-word line": "# T\n\n" + " ".join(f"word{i % 97}" for i in range(80_000)) + "\n",
        "a 100 KB line of code": "# T\n\n```py\nx = " + "1 + " * 25_000 + "1\n```\n",
        "backticks that never close": "# T\n\n" + "` `` " * (size // 5) + "\n",
        "brackets and parentheses": "# T\n\n" + "[a](" * (size // 4) + "\n",
    }


def timed(fn, *args) -> float:
    """Seconds fn(*args) takes."""
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def run(args) -> None:
    """Read and chunk each pattern; print the seconds and whether each is within the goal."""
    if not 0 < args.mb <= 20:
        raise ValueError("--mb must be between 0 and 20")
    fits = lambda text: True                     # TF-IDF reads any length
    if args.minilm:
        import rag_from_scratch as rag
        fits = chunking.model_fits(rag.Embedder("minilm"))
    size = int(args.mb * 1_000_000)
    print(f"== The Markdown reader and the chunker on {args.mb:g} MB files (seconds; goal < {GOAL_S:g}) ==")
    print(f"  {'pattern':<30} {'read':>7} {'chunk':>7}   {'chunks':>6}")
    for name, text in patterns(size).items():
        print(f"{name} ...", file=sys.stderr, flush=True)
        doc = {"doc_id": "hostile.md", "text": documents.split_front_matter(text)[1]}
        read = timed(readers.read_markdown, doc["text"])
        start = time.perf_counter()
        chunks = chunking.document_chunks([doc], fits=fits)
        chunk = time.perf_counter() - start
        verdict = "ok" if read + chunk < GOAL_S else "SLOW"
        print(f"  {name:<30} {read:7.2f} {chunk:7.2f}   {len(chunks):6}  {verdict}")


def parse_args(argv=None):
    """--mb, --minilm."""
    p = support.OneLineParser(description="Time the Markdown reader on hostile files.")
    p.add_argument("--mb", type=float, default=2.0, help="size of each file (default: %(default)s)")
    p.add_argument("--minilm", action="store_true", help="fit chunks with MiniLM's tokenizer")
    return p.parse_args(argv)


main = support.main_for(run, parse_args)


if __name__ == "__main__":
    support.leave(main())
