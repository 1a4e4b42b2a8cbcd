"""
rageval/devset.py: score the --docs path on a real documentation folder: what the reader made of
the pages, how well retrieval finds the right file, and what the extractive generator answers.

    python -m rageval.devset                       # MkDocs' own docs (data/devset), MiniLM
    python -m rageval.devset --backend tfidf
    python -m rageval.devset --show-answers        # every answer, worst first
    python -m rageval.devset --docs my_docs/ --questions my_questions.jsonl

The development set (data/devset/README.md says how it was made): 19 pages of MkDocs' docs
(admonitions, code, tables, a long changelog); 38 questions in users' words, each with the files
and a phrase that answer it, and 8 the pages cannot answer. Settings are tuned here, not on the
tutorial's ten policies alone. Offline; MiniLM runs on this machine's cores.
"""

import re

import rag_from_scratch as rag
from rageval import generation as gen
from rageval.devsets import DEVSET
from ragkit import documents, extractive, plumbing
from ragkit.arguments import add_backend

K = 5                       # hit@5 and MRR@5; the answer's prompt gets the top 3

# What markup left in a chunk's prose looks like (code blocks are left out of the count).
ARTEFACTS = {
    "heading attribute {#id}": r"\{:?\s*[#.][^{}\n]*\}",
    "admonition or tab marker": r"(?m)^\s*(?:!!!|\?\?\?|///|:::|===)",
    "HTML tag or comment": r"<!--|</?[A-Za-z][\w-]*(?:\s[^<>]*)?/?>",
    "include or template directive": r"\{\*|\{%|\{\{",
    "block quote marker": r"(?m)^\s*>",
    "link target or URL in brackets": r"(?m)\]\([^)\s]*\)|^\s*\[[^\]]+\]:\s",
}


def artefact_counts(chunks: list[dict], fits) -> dict:
    """How many chunks show each kind of left-over markup, and the other faults of a chunk."""
    prose = [re.sub(r"```[^\n]*\n.*?\n```", "", c["text"], flags=re.S) for c in chunks]  # no code
    counts = {name: sum(bool(re.search(p, text)) for text in prose) for name, p in ARTEFACTS.items()}
    code = [c for c in chunks if "```" in c["text"]]
    counts["code block on one line"] = sum("\n" not in c["text"] for c in code)
    counts["longer than the model reads"] = sum(not fits(c["text"]) for c in chunks)
    counts["ten words or fewer"] = sum(len(c["text"].split()) <= 10 for c in chunks)
    return counts


def verdict(row: dict, item: dict) -> str:
    """right / wrong / refused for an answerable question; refused / answered for the others."""
    if not item["answerable"]:
        return "refused (right)" if row["refused"] else "answered (wrong)"
    if row["refused"]:
        return "refused (wrong)"
    return "right" if row["fact"] and row["cited"] else "partial" if row["fact"] else "wrong"


def run(args) -> None:
    """Index the folder, then print the artefacts, retrieval and answer tables."""
    from ragkit import retrieval
    gold = gen.load_gold(args.questions)
    docs = documents.load_documents(args.docs)
    embedder = rag.Embedder(args.backend)
    fits = documents.model_fits(embedder)
    chunks = documents.document_chunks(docs, fits=fits)
    index = rag.build_index(chunks, embedder)
    print(f"{len(docs)} files -> {len(chunks)} chunks, backend={embedder.backend}")
    documents.print_biggest_file(chunks)

    print("\n== What the reader left in the chunks (0 is the goal) ==")
    for name, n in artefact_counts(chunks, fits).items():
        print(f"  {n:5d}  {name}")

    answerable = [g for g in gold if g["answerable"]]
    print(f"\n== Retrieval ({len(answerable)} answerable questions, by file) ==")
    print(f"  {'variant':<9} hit@1  hit@{K}  mrr@{K}")
    for name, context in (("plain", False), ("context", True)):   # context: the --docs default
        retrieve = retrieval.make_retriever(chunks, index, embedder, context=context)
        m = rag.evaluate_retrieval(answerable, index, chunks, embedder, k=K, retrieve=retrieve)
        print(f"  {name:<9} {m['hit1']:.2f}   {m['hit_rate']:.2f}   {m['mrr']:.2f}")

    results = gen.evaluate_generation(gold, {"extractive": extractive.extractive_generator()}, index,
                                      chunks, embedder, k=3, system_prompt=documents.DOCS_SYSTEM_PROMPT,
                                      prompt_fn=documents.build_fenced_prompt, retrieve=retrieve)["extractive"]
    verdicts = [verdict(row, item) for row, item in zip(results["rows"], gold)]
    print(f"\n== Extractive answers ({len(gold)} questions, top 3 chunks with context) ==")
    for name in ("right", "partial", "wrong", "refused (wrong)", "refused (right)", "answered (wrong)"):
        print(f"  {verdicts.count(name):3d}  {name}")
    if args.show_answers:
        order = sorted(range(len(gold)), key=lambda i: ["answered (wrong)", "wrong", "refused (wrong)",
                                                        "partial", "refused (right)", "right"].index(verdicts[i]))
        for i in order:
            print(f"\n[{verdicts[i]}] {gold[i]['question']}\n  {results['rows'][i]['answer'][:300]}")


def main(argv=None) -> int:
    """`python -m rageval.devset --help` lists the flags."""
    p = plumbing.OneLineParser(description="Score the --docs path on a real documentation folder.")
    p.add_argument("--docs", default=str(DEVSET / "docs"), help="the folder (default: data/devset/docs)")
    p.add_argument("--questions", default=str(DEVSET / "questions.jsonl"),
                   help="JSON Lines: question, relevant files, answer patterns (or answerable: false)")
    add_backend(p, "minilm", auto=False)
    p.add_argument("--show-answers", action="store_true", help="print every answer, worst first")
    return plumbing.run_cli(run, p.parse_args(argv))


if __name__ == "__main__":
    plumbing.leave(main())
