"""
lab_tasks.py: the hands-on lab, measured. Add a document, catch the regression, fix it.

    python lab/lab_tasks.py                    # all four tasks with MiniLM (TF-IDF if no model)
    python lab/lab_tasks.py --task 3           # one task
    python lab/lab_tasks.py --backend tfidf    # keyword vectors only: needs no torch

Everything runs offline. Every figure comes from the lesson's own chunker, search and
evaluator (rag_from_scratch.py); this file only changes the data and prints the results.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # find rag_from_scratch.py


import rag_from_scratch as rag  # noqa: E402
from rag_experiments import HR05_DOC, HR05_QUESTION, setup  # HR-05: the new policy of Task 2
from rageval.arguments import add_backend
from ragkit.folder_index import CachedEmbedder, model_for
from ragkit.support import OneLineParser, leave, run_cli

# ---------------------------------------------------------------------------
# Lab data: the new policy and its labelled question (Task 2), and the synonym edit (Task 3c)
# ---------------------------------------------------------------------------
EXTENDED_CORPUS = rag.CORPUS + [HR05_DOC]                   # 11 documents
EXTENDED_EVAL_SET = rag.EVAL_SET + [HR05_QUESTION]          # 11 questions
SYNONYM_BEFORE = "24 days of paid annual leave per"
SYNONYM_AFTER = "24 days of paid annual leave (vacation) per"
TITLE_SEPARATORS = {'"Title. text"': ". ", '"Title\\ntext"': "\n"}


def with_vacation_synonym(corpus: list[dict]) -> list[dict]:
    """A copy of the corpus whose HR-01 says "annual leave (vacation)", the word users type."""
    edited = [{**doc, "text": doc["text"].replace(SYNONYM_BEFORE, SYNONYM_AFTER)}
              if doc["doc_id"] == "HR-01" else doc for doc in corpus]
    if edited == corpus:
        raise ValueError(f"HR-01 no longer contains {SYNONYM_BEFORE!r}: update the lab")
    return edited


def with_titles(chunks: list[dict], separator: str) -> list[dict]:
    """Copies of the chunks whose text starts with the document title, joined by `separator`."""
    return [{**c, "text": f"{c['title']}{separator}{c['text']}"} for c in chunks]


# ---------------------------------------------------------------------------
# Shared steps: one index per experiment (setup refits TF-IDF on each corpus), and the
# tutorial's output lines
# ---------------------------------------------------------------------------
def evaluate(eval_set: list[dict], chunks: list[dict], embedder: rag.Embedder,
             k: int, verbose: bool = False) -> dict:
    """Index the chunks and run the lesson's evaluator at one k."""
    embedder, index = setup(embedder.backend, chunks, embedder)
    return rag.evaluate_retrieval(eval_set, index, chunks, embedder, k=k, verbose=verbose)


def metrics_line(m: dict) -> str:
    """'k=1: hit_rate=0.91  recall=0.86', the tutorial's evaluation line."""
    return f"k={m['k']}: hit_rate={m['hit_rate']:.2f}  recall={m['recall']:.2f}"


def verdict(m: dict, i: int) -> str:
    """HIT or MISS for question i of an evaluation result."""
    return "HIT" if m["per_question"][i]["hit"] else "MISS"


def k1_and_k3(eval_set: list[dict], chunks: list[dict], embedder: rag.Embedder) -> dict:
    """The tutorial's evaluation: one line per question at k=1, then the k=1 and k=3 lines."""
    results = {}
    for k in (1, 3):
        results[k] = evaluate(eval_set, chunks, embedder, k, verbose=(k == 1))
        print(metrics_line(results[k]))
    return results


def prompt_words(eval_set: list[dict], chunks: list[dict], embedder: rag.Embedder, k: int) -> float:
    """Average length in words of the prompt sent for each question at this k."""
    embedder, index = setup(embedder.backend, chunks, embedder)
    prompts = [rag.build_prompt(q, rag.search(q, index, chunks, embedder, k))
               for q in (item["question"] for item in eval_set)]
    return sum(len(prompt.split()) for prompt in prompts) / len(prompts)


# ---------------------------------------------------------------------------
# The four tasks
# ---------------------------------------------------------------------------
def task1(embedder: rag.Embedder) -> dict:
    """Baseline: the tutorial corpus and questions, hit@1 and recall@1 to write down."""
    print("== Task 1: baseline ==")
    chunks = rag.build_chunks(rag.CORPUS)
    print(f"{len(rag.CORPUS)} documents -> {len(chunks)} chunks")
    results = k1_and_k3(rag.EVAL_SET, chunks, embedder)
    print(f"write down: hit@1={results[1]['hit_rate']:.2f}  recall@1={results[1]['recall']:.2f}")
    return results


def task2(embedder: rag.Embedder) -> dict:
    """Add HR-05 and its question, then re-run the same evaluation."""
    print("== Task 2: add a document and a labelled question ==")
    chunks = rag.build_chunks(EXTENDED_CORPUS)
    print(f"{len(EXTENDED_CORPUS)} documents -> {len(chunks)} chunks")
    fitted, index = setup(embedder.backend, chunks, embedder)
    top = rag.search(HR05_QUESTION["question"], index, chunks, fitted, k=3)
    print(f"top 3 for the new question: {HR05_QUESTION['question']}")
    rag.print_results(top)
    return {"chunks": len(chunks), "top": top, **k1_and_k3(EXTENDED_EVAL_SET, chunks, embedder)}


def task3(embedder: rag.Embedder, reveal: bool = False) -> dict:
    """Try three fixes one at a time; keep the one that wins on the numbers. The verdict is
    printed only with reveal=True (--reveal), after students have read the table."""
    print("== Task 3: fix the regression, one change at a time ==")
    eval_set, chunks = EXTENDED_EVAL_SET, rag.build_chunks(EXTENDED_CORPUS)
    rows = {"Task 2 as it is": evaluate(eval_set, chunks, embedder, 1)}
    changes = {"(a) k=2": (chunks, 2),
               **{f"(b) {label}": (with_titles(chunks, separator), 1)
                  for label, separator in TITLE_SEPARATORS.items()},
               '(c) HR-01 "(vacation)"': (rag.build_chunks(with_vacation_synonym(EXTENDED_CORPUS)), 1)}
    for n, (label, (changed, k)) in enumerate(changes.items(), 1):
        print(f"  measuring change {n} of {len(changes)}: {label} (a new index) ...",
              file=sys.stderr, flush=True)
        rows[label] = evaluate(eval_set, changed, embedder, k)

    # the vacation question (the first) is the one Task 2 breaks; the festival one is HR-05's
    print(f"{'change':<24} {'k':>2}  {'hit':>4}  {'recall':>6}  {'vacation Q':<10}  {'festival Q'}")
    for label, m in rows.items():
        print(f"{label:<24} {m['k']:>2}  {m['hit_rate']:>4.2f}  {m['recall']:>6.2f}  "
              f"{verdict(m, 0):<10}  {verdict(m, -1)}")

    words = {k: prompt_words(eval_set, chunks, embedder, k) for k in (1, 2)}
    print(f"  (a) sends 2 chunks per question instead of 1: the average prompt grows from "
          f"{words[1]:.0f} to {words[2]:.0f} words")
    (dot, newline) = (rows[f"(b) {label}"]["hit_rate"] for label in TITLE_SEPARATORS)
    print(f"  (b) same titles, only the separator differs: hit@1={dot:.2f} with '. ', "
          f"{newline:.2f} with a newline")
    for label in TITLE_SEPARATORS:
        before, after = rows["Task 2 as it is"], rows[f"(b) {label}"]
        for i, item in enumerate(eval_set):
            if verdict(before, i) != verdict(after, i):
                print(f"  (b) {label} turns a {verdict(before, i)} into a {verdict(after, i)}: "
                      f"{item['question']}")
    if not reveal:
        print("which change restores hit@1=1.00 at k=1 and keeps the festival question a HIT? "
              "Decide from the table, then run: python lab/lab_tasks.py --task 3 --reveal")
        return {**rows, "prompt_words": words}
    winners = [label for label, m in rows.items() if m["k"] == 1 and m["hit_rate"] == 1.0
               and verdict(m, -1) == "HIT"]
    print("restores hit@1=1.00 at k=1 with the festival question still a HIT: "
          + (", ".join(winners) or "none of them"))
    if not winners:                  # say which miss no change reached (TF-IDF: the fathers one)
        for i, item in enumerate(eval_set):
            if all(verdict(m, i) == "MISS" for m in rows.values() if m["k"] == 1):
                print(f"  a MISS in every k=1 row: {item['question']}")
    return {**rows, "prompt_words": words}


def task4(embedder: rag.Embedder) -> dict:
    """TF-IDF against MiniLM on the tutorial corpus, and why TF-IDF misses the fathers question."""
    print("== Task 4: TF-IDF against MiniLM (tutorial corpus) ==")
    chunks = rag.build_chunks(rag.CORPUS)
    backends = {"tfidf": rag.Embedder("tfidf")}
    if embedder.backend == "minilm":
        backends["minilm"] = embedder
    results = {}
    for name, backend in backends.items():
        m1, m3 = (evaluate(rag.EVAL_SET, chunks, backend, k) for k in (1, 3))
        results[name] = {1: m1, 3: m3}
        print(f"{name:<7} hit@1={m1['hit_rate']:.2f} recall@1={m1['recall']:.2f} | "
              f"hit@3={m3['hit_rate']:.2f} recall@3={m3['recall']:.2f}")
    if "minilm" not in backends:
        print("minilm  (not run: this run uses TF-IDF only)")

    question = "How much time off do new fathers get?"
    tfidf, index = setup("tfidf", chunks)
    analyse, vocabulary = tfidf.model.build_analyzer(), tfidf.model.vocabulary_
    terms = analyse(question)                       # the exact terms TF-IDF compares
    print(f'TF-IDF sees "{question}" as: {", ".join(terms)}')
    q = tfidf.encode([question])[0]
    shared = []
    for r in rag.search(question, index, chunks, tfidf, k=2):
        row = tfidf.encode([r["text"]])[0]
        common = [t for t in terms if t in set(analyse(r["text"]))]
        shared.append((r, common))
        # a score is a sum over shared terms of (question weight x chunk weight)
        parts = " + ".join(f"{t} {q[vocabulary[t]]:.3f} x {row[vocabulary[t]]:.3f}" for t in common)
        print(f"  {r['score']:.3f}  {r['chunk_id']:<9} {r['title']:<22} = {parts}")
    results["fathers"] = shared
    return results


TASKS = {1: task1, 2: task2, 3: task3, 4: task4}


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------
def main(argv=None) -> int:
    """Run the chosen tasks; a bad setting becomes one line on stderr and exit status 1."""
    p = OneLineParser(description="The RAG lab: baseline, new document, regression, fixes.")
    p.add_argument("--task", type=int, choices=sorted(TASKS), help="run only this task")
    defaults = rag.defaults(rag.Embedder)              # the lesson's, from its signature
    add_backend(p, defaults["backend"])
    p.add_argument("--model", default=defaults["model"], help="MiniLM model name or local folder")
    p.add_argument("--reveal", action="store_true", help="Task 3: also print which change wins")
    return run_cli(run_tasks, p.parse_args(argv))


def run_tasks(args) -> None:
    """Load the embedder once and run the chosen tasks with it: each text encoded once, a
    question on one thread (two wait on each other on a busy laptop)."""
    if args.backend == "tfidf":     # MiniLM says "loading ..." itself
        print("loading scikit-learn for TF-IDF ...", file=sys.stderr, flush=True)
    args.backend, args.model = model_for(args.backend, args.model)   # one line if it cannot load
    embedder = CachedEmbedder(args.backend, args.model) if args.backend == "minilm" \
        else rag.Embedder(args.backend, args.model)
    for number in [args.task] if args.task else sorted(TASKS):
        if number != (args.task or 1):
            print()
        if number == 3:
            task3(embedder, reveal=args.reveal)
        else:
            TASKS[number](embedder)


if __name__ == "__main__":
    leave(main())     # a Ctrl-C while Python shuts down is one line too
