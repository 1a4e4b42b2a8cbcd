"""
rag_experiments.py: change one setting at a time and measure what it does to retrieval.

    python rag_experiments.py                      # every experiment, A to J
    python rag_experiments.py --only B             # one experiment, or a list: --only A,B,E
    python rag_experiments.py --plot plots/        # also write PNG charts (needs matplotlib)
    python rag_experiments.py --collection data/cisi          # a real test collection
    python rag_experiments.py --collection data/cisi --json   # the same as one JSON object

A to E print the tutorial's "common mistakes" figures line for line: A embedding backend,
B chunk size and overlap, C a 12-word chunk, D chunks in the prompt, E does the top chunk hold
the answer? F to I measure its exercises: F sentence-aware chunking, G BM25 and hybrids,
H refusing unanswerable questions, I merging overlapping chunks. J is Rocchio feedback.
Tables add MRR, nDCG and 95% bootstrap intervals: with ten questions, one moves a rate by 0.10.
Offline and free; without MiniLM the TF-IDF and BM25 parts run and the skips are named.
The test-collection scores (--collection) live in rageval/ir_scores.py.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

import rag_from_scratch as rag
from ragkit import support
from rageval.score_matrices import ROCCHIO_A, ROCCHIO_B, ROCCHIO_M, evaluate_scores, rocchio
from rageval.arguments import add_cache, add_collection
from ragkit.folder_index import dense
from ragkit.retrieval import (BM25_B, BM25_K1, SEED, bm25_matrix, bm25_scores, bootstrap_ci, hybrid_scores, paired_bootstrap, per_question, reciprocal_rank_fusion)
from ragkit.support import split_sentences

# The lab's new holiday policy and its question (tutorial, hands-on lab, task 2): with it,
# MiniLM sends "How many vacation days do I get each year?" to holidays, not annual leave.
HR05_DOC = {"doc_id": "HR-05", "title": "Public and floating holidays", "text": (
    "Kestrelwood observes 10 fixed public holidays each calendar year; the list is published "
    "in the PeoplePortal every December. In addition, every employee can take 2 floating "
    "holidays for festivals of their choice. Apply for a floating holiday in the PeoplePortal "
    "like annual leave. Unused floating holidays cannot be carried forward.")}
HR05_QUESTION = {"question": "Can I take a day off for a festival that is not on the holiday list?",
                 "relevant": {"HR-05"}}

# The one place the defaults live; the retrieval maths' own (BM25_K1, ...) are in ragkit/retrieval.py,
# Rocchio's (ROCCHIO_A, ...) in rageval/score_matrices.py.
SIZE, OVERLAP = rag.defaults(rag.build_chunks).values()   # the tutorial's 50 words, 10 shared
CHUNKS = rag.build_chunks(rag.CORPUS, SIZE, OVERLAP)      # its 17 chunks: A, D, G, H and J
EXPERIMENTS = "ABCDEFGHIJ"
B_SWEEP = [6, 8, 12, 16, 20, 30, 40, 50, 80]       # chunk sizes for B's chart
D_KS = [1, 3, 5, 10]                               # chunks in D's prompt
FATHERS = "How much time off do new fathers get?"     # the question Experiments E and F follow
NO_MATPLOTLIB = ("matplotlib is not installed: run `.venv/bin/pip install matplotlib` "
                 "(needed only for --plot)")

# Questions the ten documents cannot answer: a good assistant should refuse them all.
UNANSWERABLE = [
    "What is Kestrelwood's share price today?",
    "Who is the chief executive of Kestrelwood Systems?",
    "Is there a gym or fitness allowance?",
    "What is the dress code in the office?",
    "Does the canteen serve vegetarian lunch?",
    "How do I nominate a colleague for the employee of the month award?",
    "Can I get an advance on my salary?",
    "What is the notice period if I resign?",
]

# A phrase the answer to each EVAL_SET question must contain, to check a prompt still holds it.
ANSWER_FACTS = {
    "How many vacation days do I get each year?": ["24 days"],
    "Can I carry unused leave into next year?": ["10 unused days"],
    "Do I need a doctor's note if I am ill for three days?": ["medical certificate"],
    "I forgot my password. How do I reset it?": ["self-service portal"],
    "My laptop was stolen at the airport. What should I do?": ["extension 4040"],
    "What is the hotel limit when I travel to Mumbai?": ["INR 6,000"],
    "Can I use ChatGPT to summarise a customer's complaint?": ["external AI chatbots"],
    FATHERS: ["4 weeks"],
    "Will the company pay for my AWS certification exam?": ["certification exams"],
    "How do I book flights for a client visit and claim the costs afterwards?":
        ["internal travel desk", "ExpenseDesk"],
}


# == 1. Shared helpers: indexes, rankings from scores, the rows every table prints ==========
def setup(backend: str, chunks: list[dict], minilm: rag.Embedder | None = None):
    """(embedder, index) for these chunks: TF-IDF is refit (cheap), MiniLM reuses one model."""
    embedder = rag.Embedder("tfidf") if backend == "tfidf" else minilm
    return embedder, rag.build_index(chunks, embedder)


def score_matrix(questions: list[str], index, embedder: rag.Embedder) -> np.ndarray:
    """Cosine score of every question against every row: row i is `index @ q_i`."""
    return dense(embedder.encode(questions, sparse=True) @ index.T)   # sparse for TF-IDF


def row(m1: dict, m3: dict) -> dict:
    """The numbers one setting reports: tutorial metrics, then MRR, nDCG and an interval on hit@1."""
    return {"hit@1": m1["hit_rate"], "recall@1": m1["recall"], "hit@3": m3["hit_rate"],
            "recall@3": m3["recall"], "mrr@3": m3["mrr"], "ndcg@3": m3["ndcg"],
            "hit@1_ci": bootstrap_ci(per_question(m1, "hit")), "hits@1": per_question(m1, "hit")}


def rates(chunks: list[dict], embedder, index, verbose: bool = False) -> dict:
    """row() of the lesson's Step 6 evaluation (k=1 printed question by question if verbose)."""
    m1 = rag.evaluate_retrieval(rag.EVAL_SET, index, chunks, embedder, k=1, verbose=verbose)
    return row(m1, rag.evaluate_retrieval(rag.EVAL_SET, index, chunks, embedder, k=3))


def score_rates(scores: np.ndarray, chunks: list[dict], eval_set=rag.EVAL_SET) -> dict:
    """row() for rankings given as a score matrix (questions x chunks)."""
    return row(*(evaluate_scores(scores, chunks, eval_set, k) for k in (1, 3)))


def print_more(rows: dict[str, dict]) -> None:
    """MRR@3, nDCG@3 and hit@1 with its 95% interval, one aligned line per setting."""
    width = max(len(label) for label in rows) + 2
    print(f"  {'':<{width}}mrr@3 ndcg@3  hit@1 [95% interval]")
    for label, r in rows.items():
        lo, hi = r["hit@1_ci"]
        print(f"  {label:<{width}}{r['mrr@3']:.2f}  {r['ndcg@3']:.2f}    "
              f"{r['hit@1']:.2f} [{lo:.2f}, {hi:.2f}]")


def print_difference(label: str, diff: tuple[float, float, float]) -> None:
    """One line: the change in a rate and its paired-bootstrap 95% interval."""
    d, lo, hi = diff
    verdict = ("no difference" if lo == hi == 0 else
               "could be chance" if lo <= 0 <= hi else "holds across resamples")
    print(f"  {label}: {d:+.2f} [{lo:+.2f}, {hi:+.2f}]  ({verdict})")


def hit_difference(label: str, before: dict, after: dict) -> tuple[float, float, float]:
    """after's hit@1 minus before's, question by question: printed, and returned."""
    diff = paired_bootstrap(before["hits@1"], after["hits@1"])
    print_difference(label, diff)
    return diff


# == 2. Sentence-aware chunks and merged prompts ============================================
def sentence_chunks(text: str, max_words: int) -> list[str]:
    """Pack whole sentences into chunks of at most max_words words (a longer sentence is cut)."""
    chunks, current = [], []
    for sentence in split_sentences(text):
        words = sentence.split()
        if current and len(current) + len(words) > max_words:
            chunks.append(" ".join(current))
            current = []
        if len(words) > max_words:                   # a sentence longer than the limit
            pieces = rag.chunk_text(sentence, max_words, 0)
            chunks.extend(pieces[:-1])
            words = pieces[-1].split()
        current += words
    if current:
        chunks.append(" ".join(current))
    return chunks


def build_sentence_chunks(corpus: list[dict], max_words: int) -> list[dict]:
    """build_chunks over sentence-packed pieces: each piece fits one window, so it stays whole."""
    pieces = [{**doc, "text": piece} for doc in corpus
              for piece in sentence_chunks(doc["text"], max_words)]
    return rag.build_chunks(pieces, chunk_size=max_words, overlap=0)


def merge_overlapping(retrieved: list[dict]) -> list[dict]:
    """Join retrieved neighbours of one document that share words into one passage.

    ["a b c d" (D#0), "d e f" (D#1)] -> ["a b c d e f" (D#0+1)]: the shared words appear
    once. Passages come in the order of their best chunk and keep its score.
    """
    position = lambda r: int(r["chunk_id"].rsplit("#", 1)[1])
    rank = {r["chunk_id"]: i for i, r in enumerate(retrieved)}
    passages = []
    for r in sorted(retrieved, key=lambda r: (r["doc_id"], position(r))):    # reading order
        last = passages[-1] if passages else None
        if last and last["doc_id"] == r["doc_id"] and position(r) == last["parts"][-1] + 1:
            a, b = last["text"].split(), r["text"].split()
            shared = next((n for n in range(min(len(a), len(b)), 0, -1) if a[-n:] == b[:n]), 0)
            if shared:
                last["text"] = " ".join(a + b[shared:])
                last["parts"].append(position(r))
                last["score"] = max(last["score"], r["score"])
                last["rank"] = min(last["rank"], rank[r["chunk_id"]])
                continue
        passages.append({**r, "parts": [position(r)], "rank": rank[r["chunk_id"]]})
    passages.sort(key=lambda p: p["rank"])
    return [{**{k: v for k, v in p.items() if k not in ("parts", "rank")},
             "chunk_id": f"{p['doc_id']}#{'+'.join(map(str, p['parts']))}"} for p in passages]


# == 3. The experiments: each prints its block and returns what it measured =================
def experiment_a(minilm=None) -> dict:
    """A: TF-IDF against MiniLM on the tutorial's 50-word chunks."""
    print(f"== Experiment A: embedding backend (chunk_size={SIZE}, overlap={OVERLAP}) ==")
    rows = {backend: rates(CHUNKS, *setup(backend, CHUNKS, minilm), verbose=(backend == "tfidf"))
            for backend in ["tfidf"] + (["minilm"] if minilm else [])}
    for backend, r in rows.items():
        print(f"{backend:<7} hit@1={r['hit@1']:.2f} recall@1={r['recall@1']:.2f} | "
              f"hit@3={r['hit@3']:.2f} recall@3={r['recall@3']:.2f}")
    print_more(rows)
    if minilm:
        rows["minilm-tfidf hit@1"] = hit_difference("hit@1, minilm - tfidf", rows["tfidf"],
                                                    rows["minilm"])
    return rows


def experiment_b(minilm) -> dict:
    """B: how chunk size and overlap move MiniLM's scores."""
    print("== Experiment B: chunk size and overlap (MiniLM) ==")
    rows = {}
    for size, overlap in [(12, 0), (12, 4), (SIZE, OVERLAP), (500, 0)]:
        chunks = rag.build_chunks(rag.CORPUS, size, overlap)
        r = rows[f"size={size} overlap={overlap}"] = {
            **rates(chunks, *setup("minilm", chunks, minilm)), "chunks": len(chunks)}
        print(f"size={size:<4}overlap={overlap:<3}chunks={len(chunks):<3} hit@1={r['hit@1']:.2f} "
              f"recall@1={r['recall@1']:.2f} recall@3={r['recall@3']:.2f}")
    print_more(rows)
    result = {"settings": rows, "50/10 - 12/0 hit@1": hit_difference(
        f"hit@1, size={SIZE} overlap={OVERLAP} minus size=12 overlap=0",
        rows["size=12 overlap=0"], rows[f"size={SIZE} overlap={OVERLAP}"])}
    # A finer sweep for the chart: no overlap, and a quarter of the chunk repeated.
    sweep = {0.0: [], 0.25: []}
    settings = [(share, size) for share in sweep for size in B_SWEEP]
    for share, size in support.progress(settings, len(settings), "chunking and encoding the sweep",
                                        " sizes"):         # on stderr: the figures stay clean
        chunks = rag.build_chunks(rag.CORPUS, size, int(size * share))
        embedder, index = setup("minilm", chunks, minilm)
        sweep[share].append(rag.evaluate_retrieval(rag.EVAL_SET, index, chunks, embedder,
                                                   k=1)["hit_rate"])
    print("  hit@1 by chunk size   " + " ".join(f"{s:>4}" for s in B_SWEEP))
    for share, hits in sweep.items():
        print(f"  overlap {share:>4.0%} of size  " + " ".join(f"{h:4.2f}" for h in hits))
    result["sweep"] = {"sizes": B_SWEEP, "hit@1": sweep}
    return result


def experiment_c(minilm=None) -> dict:
    """C: the sick-leave policy cut into 12-word chunks with no overlap (no model needed)."""
    print("== Experiment C: what a 12-word chunk with no overlap looks like ==")
    pieces = [c for c in rag.build_chunks(rag.CORPUS, 12, 0) if c["doc_id"] == "HR-02"]
    for c in pieces:
        print(f"  {c['chunk_id']}: {c['text']}")
    return {"chunks": [c["text"] for c in pieces]}


def experiment_d(minilm) -> dict:
    """D: more chunks in the prompt: precision falls and the prompt grows."""
    print(f"== Experiment D: stuffing more chunks into the prompt (MiniLM, size={SIZE}, "
          f"overlap={OVERLAP}) ==")
    embedder, index = setup("minilm", CHUNKS, minilm)
    first = rag.EVAL_SET[0]["question"]
    rows = {}
    for k in D_KS:
        m = rag.evaluate_retrieval(rag.EVAL_SET, index, CHUNKS, embedder, k=k)
        words = len(rag.build_prompt(first, rag.search(first, index, CHUNKS, embedder, k)).split())
        rows[k] = {"precision": m["precision"], "recall": m["recall"], "mrr": m["mrr"],
                   "ndcg": m["ndcg"], "prompt_words": words,
                   "precision_ci": bootstrap_ci(per_question(m, "precision"))}
        print(f"k={k:<3}precision@k={m['precision']:.2f}  prompt length for Q1={words} words")
    print(f"  {'':<5}recall@k  mrr   ndcg@k  precision@k [95% interval]")
    for k, r in rows.items():
        print(f"  k={k:<3}{r['recall']:.2f}      {r['mrr']:.2f}  {r['ndcg']:.2f}    {r['precision']:.2f}"
              " [{:.2f}, {:.2f}]".format(*r["precision_ci"]))
    return {"k": rows}


def experiment_e(minilm) -> dict:
    """E: the new-fathers question's top chunk, without and with overlap."""
    print("== Experiment E: does the top chunk contain the answer? (MiniLM) ==")
    result = {}
    for size, overlap in [(12, 0), (12, 4)]:
        chunks = rag.build_chunks(rag.CORPUS, size, overlap)
        embedder, index = setup("minilm", chunks, minilm)
        top = rag.search(FATHERS, index, chunks, embedder, k=1)[0]
        print(f"size={size} overlap={overlap}: {top['score']:.3f} {top['chunk_id']}: {top['text']}")
        result[f"size={size} overlap={overlap}"] = {**top, "has_answer": "4 weeks" in top["text"]}
    print("  '4 weeks' in the top chunk: " + ", ".join(
        f"{label} {'yes' if r['has_answer'] else 'no'}" for label, r in result.items()))
    return result


def experiment_f(minilm) -> dict:
    """F: chunks of whole sentences against the word window."""
    print("== Experiment F: sentence-aware chunks against the word window (MiniLM) ==")
    rows = {}
    for kind, size, overlap in [("words", 12, 0), ("words", 12, 4), ("words", SIZE, OVERLAP),
                                ("sentences", 12, 0), ("sentences", 25, 0), ("sentences", 50, 0)]:
        chunks = (rag.build_chunks(rag.CORPUS, size, overlap) if kind == "words"
                  else build_sentence_chunks(rag.CORPUS, size))
        embedder, index = setup("minilm", chunks, minilm)
        top = rag.search(FATHERS, index, chunks, embedder, k=1)[0]
        label = f"words {size}/{overlap}" if kind == "words" else f"sentences <={size}"
        rows[label] = {**rates(chunks, embedder, index), "chunks": len(chunks), "top": top,
                       "has_answer": "4 weeks" in top["text"]}
    width = max(map(len, rows)) + 1
    print(f"{'chunking':<{width}}chunks hit@1 recall@1 recall@3 mrr@3 ndcg@3  top chunk for "
          f"new fathers ('4 weeks'?)")
    for label, r in rows.items():
        print(f"{label:<{width}}{r['chunks']:>6} {r['hit@1']:5.2f} {r['recall@1']:8.2f} "
              f"{r['recall@3']:8.2f} {r['mrr@3']:5.2f} {r['ndcg@3']:6.2f}  "
              f"{r['top']['score']:.3f} {r['top']['chunk_id']:<8} {'yes' if r['has_answer'] else 'no'}")
    print("  top chunk, sentences <=25: " + rows["sentences <=25"]["top"]["text"])
    return {"settings": rows, "sentences<=12 - words 12/0 hit@1": hit_difference(
        "hit@1, sentences <=12 minus words 12/0", rows["words 12/0"], rows["sentences <=12"])}


def bm25_worked_example(chunks: list[dict], question: str, term: str, chunk_id: str) -> dict:
    """Print one term's BM25 score in one chunk step by step, next to the matrix entry."""
    vectorizer, weights = bm25_matrix([c["text"] for c in chunks])
    analyse = vectorizer.build_analyzer()
    lengths = [len(analyse(c["text"])) for c in chunks]
    d = next(i for i, c in enumerate(chunks) if c["chunk_id"] == chunk_id)
    tf = analyse(chunks[d]["text"]).count(term)
    n = sum(term in analyse(c["text"]) for c in chunks)
    big_n, avg = len(chunks), sum(lengths) / len(lengths)
    idf = math.log(1 + (big_n - n + 0.5) / (n + 0.5))
    norm = BM25_K1 * (1 - BM25_B + BM25_B * lengths[d] / avg)
    by_hand = idf * tf * (BM25_K1 + 1) / (tf + norm)
    from_matrix = weights[d, vectorizer.vocabulary_[term]]
    print(f"BM25 by hand, term '{term}' in {chunk_id} (k1={BM25_K1}, b={BM25_B}):")
    print(f"  idf = ln(1 + (N - n + 0.5) / (n + 0.5)) = ln(1 + ({big_n} - {n} + 0.5) / ({n} + 0.5))"
          f" = {idf:.3f}")
    print(f"  tf = {tf}, length = {lengths[d]} words, average length = {avg:.3f} words")
    print(f"  score = idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / average))"
          f" = {by_hand:.3f}; matrix entry W[{chunk_id}, '{term}'] = {from_matrix:.3f}")
    words = [w for w in analyse(question) if w in vectorizer.vocabulary_]
    total = bm25_scores([question], vectorizer, weights)[0, d]
    print(f"  the question's words in the vocabulary: {words}; its BM25 score in {chunk_id}: "
          f"{total:.3f}")
    return {"idf": idf, "tf": tf, "n": n, "N": big_n, "length": lengths[d], "average": avg,
            "score": by_hand, "matrix": float(from_matrix), "question_score": float(total)}


def method_scores(questions: list[str], chunks: list[dict], minilm=None) -> dict[str, np.ndarray]:
    """Score matrices (questions x chunks) of every retrieval method that can run here."""
    scores = {"tfidf": score_matrix(questions, *reversed(setup("tfidf", chunks)))}
    scores["bm25"] = bm25_scores(questions, *bm25_matrix([c["text"] for c in chunks]))
    if minilm:
        scores["minilm"] = score_matrix(questions, *reversed(setup("minilm", chunks, minilm)))
        scores["0.5 tfidf + 0.5 minilm"] = hybrid_scores(scores["tfidf"], scores["minilm"])
        scores["rrf(tfidf, minilm)"] = reciprocal_rank_fusion([scores["tfidf"], scores["minilm"]])
        scores["rrf(bm25, minilm)"] = reciprocal_rank_fusion([scores["bm25"], scores["minilm"]])
    return scores


def experiment_g(minilm=None) -> dict:
    """G: BM25, the weighted hybrid and rank fusion, on the tutorial corpus and the lab's."""
    print(f"== Experiment G: BM25 and hybrid retrieval (size={SIZE}, overlap={OVERLAP}) ==")
    result = {"worked_example": bm25_worked_example(CHUNKS, FATHERS, "fathers", "HR-04#0")}
    corpora = {"tutorial": (rag.CORPUS, rag.EVAL_SET),
               "lab": (rag.CORPUS + [HR05_DOC], rag.EVAL_SET + [HR05_QUESTION])}
    tables = {}
    for name, (corpus, eval_set) in corpora.items():
        chunks = rag.build_chunks(corpus, SIZE, OVERLAP)
        questions = [item["question"] for item in eval_set]
        tables[name] = {method: {**score_rates(scores, chunks, eval_set), "top_doc": {
            q: chunks[int(np.argmax(s))]["doc_id"] for q, s in zip(questions, scores)}}
            for method, scores in method_scores(questions, chunks, minilm).items()}
    width = max(len(m) for m in tables["tutorial"]) + 1
    print(f"{'':<{width}}tutorial: 10 docs, 10 questions  | lab: 11 docs, 11 questions")
    print(f"{'method':<{width}}hit@1 recall@1 mrr@3 ndcg@3      | hit@1 recall@1 mrr@3 ndcg@3")
    for method in tables["tutorial"]:
        cells = [f"{r['hit@1']:.2f}  {r['recall@1']:.2f}     {r['mrr@3']:.2f}  {r['ndcg@3']:.2f}"
                 for r in (tables["tutorial"][method], tables["lab"][method])]
        print(f"{method:<{width}}{cells[0]}        | {cells[1]}")
    vacation = rag.EVAL_SET[0]["question"]
    print("  top document for the two known failures (want HR-04, then HR-01):")
    for method, r in tables["tutorial"].items():
        print(f"  {method:<{width}}new fathers -> {r['top_doc'][FATHERS]:<6}  "
              f"vacation (lab) -> {tables['lab'][method]['top_doc'][vacation]}")
    result.update(tables)
    for name in tables if minilm else []:
        result[f"{name}: hybrid - minilm hit@1"] = hit_difference(
            f"hit@1 on the {name} set, 0.5 tfidf + 0.5 minilm minus minilm",
            tables[name]["minilm"], tables[name]["0.5 tfidf + 0.5 minilm"])
    return result


def best_threshold(answerable: list[float], unanswerable: list[float]) -> dict:
    """The cut-off on the top score that best spots questions to refuse (refuse below it), by F1."""
    scores = np.array(answerable + unanswerable)
    refuse = np.array([False] * len(answerable) + [True] * len(unanswerable))
    cuts = np.unique(scores)
    candidates = np.concatenate([[cuts[0] - 1e-6], (cuts[:-1] + cuts[1:]) / 2, [cuts[-1] + 1e-6]])
    best = None
    for t in candidates:
        said_refuse = scores < t
        tp = np.sum(said_refuse & refuse)
        precision = tp / max(said_refuse.sum(), 1)
        recall = tp / refuse.sum()
        f1 = 2 * precision * recall / (precision + recall) if tp else 0.0
        if best is None or f1 > best["f1"]:
            best = {"threshold": float(t), "f1": float(f1),
                    "accuracy": float(np.mean(said_refuse == refuse))}
    best["separable"] = bool(max(unanswerable) < min(answerable))
    return best


def experiment_h(minilm=None) -> dict:
    """H: can a threshold on the top score tell answerable from unanswerable questions?"""
    print(f"== Experiment H: refusing questions the documents cannot answer (size={SIZE}, "
          f"overlap={OVERLAP}) ==")
    answerable = [item["question"] for item in rag.EVAL_SET]
    all_scores = method_scores(answerable + UNANSWERABLE, CHUNKS, minilm)
    result = {}
    print(f"{'method':<8}{'answerable top score':<22}{'unanswerable top score':<24}"
          f"best threshold  F1    accuracy  separable")
    for method in [m for m in ["tfidf", "bm25", "minilm"] if m in all_scores]:
        top = all_scores[method].max(axis=1)
        yes, no = top[:len(answerable)].tolist(), top[len(answerable):].tolist()
        best = best_threshold(yes, no)
        result[method] = {"answerable": yes, "unanswerable": no, **best}
        print(f"{method:<8}{min(yes):.3f} to {max(yes):.3f}{'':<8}{min(no):.3f} to {max(no):.3f}"
              f"{'':<10}{best['threshold']:<16.3f}{best['f1']:.2f}  {best['accuracy']:.2f}      "
              f"{'yes' if best['separable'] else 'no'}")
    label = "minilm" if "minilm" in result else "tfidf"
    print(f"  top {label} score of each unanswerable question:")
    for question, score in zip(UNANSWERABLE, result[label]["unanswerable"]):
        print(f"  {score:.3f}  {question}")
    return result


def experiment_i(minilm) -> dict:
    """I: merge overlapping chunks of one document before the prompt; same facts, fewer words."""
    print("== Experiment I: merging overlapping chunks before the prompt (MiniLM) ==")
    print(f"{'setting':<24}prompt words, 10 questions  shorter  answer phrase in prompt  "
          f"chunk text kept")
    result = {}
    for size, overlap, k in [(SIZE, OVERLAP, 3), (12, 4, 5)]:
        chunks = rag.build_chunks(rag.CORPUS, size, overlap)
        embedder, index = setup("minilm", chunks, minilm)
        before = after = shorter = facts_before = facts_after = kept = 0
        for item in rag.EVAL_SET:
            retrieved = rag.search(item["question"], index, chunks, embedder, k)
            p1 = rag.build_prompt(item["question"], retrieved)
            p2 = rag.build_prompt(item["question"], merge_overlapping(retrieved))
            before, after = before + len(p1.split()), after + len(p2.split())
            shorter += len(p2.split()) < len(p1.split())
            facts = ANSWER_FACTS[item["question"]]
            facts_before += all(f in p1 for f in facts)
            facts_after += all(f in p2 for f in facts)
            kept += all(r["text"] in p2 for r in retrieved)
        label = f"size={size} overlap={overlap} k={k}"
        result[label] = {"words_before": before, "words_after": after, "shorter": shorter,
                         "facts_before": facts_before, "facts_after": facts_after, "kept": kept}
        change = f"{before} -> {after} ({(after - before) / before:+.0%})"
        facts = f"{facts_before}/10 -> {facts_after}/10"
        print(f"{label:<24}{change:<28}{shorter:>2}/10    {facts:<25}{kept}/10")
    return result


def experiment_j(minilm=None) -> dict:
    """J: Rocchio pseudo-relevance feedback: move each question toward its top chunks, search again."""
    print(f"== Experiment J: Rocchio feedback, q' = {ROCCHIO_A:g} q + {ROCCHIO_B:g} * mean of the "
          f"top {ROCCHIO_M} chunks (size={SIZE}, overlap={OVERLAP}) ==")
    questions = [item["question"] for item in rag.EVAL_SET]
    rows = {}
    for backend in ["tfidf"] + (["minilm"] if minilm else []):
        embedder, index = setup(backend, CHUNKS, minilm)
        plain = score_matrix(questions, index, embedder)
        moved = rocchio(embedder.encode(questions, sparse=True), index, plain)
        rows[backend] = score_rates(plain, CHUNKS)
        rows[f"{backend} + rocchio"] = score_rates(dense(moved @ index.T), CHUNKS)
    width = max(map(len, rows)) + 2
    print(f"{'method':<{width}}hit@1 recall@1 recall@3 mrr@3")
    for label, r in rows.items():
        print(f"{label:<{width}}{r['hit@1']:.2f}  {r['recall@1']:.2f}     {r['recall@3']:.2f}     "
              f"{r['mrr@3']:.2f}")
    print_more(rows)
    for backend in [label for label in rows if "+" not in label]:
        rows[f"{backend}: rocchio - plain hit@1"] = hit_difference(
            f"hit@1, {backend} + rocchio minus {backend}", rows[backend], rows[f"{backend} + rocchio"])
    return rows


EXPERIMENT_FUNCTIONS = dict(zip(EXPERIMENTS, [experiment_a, experiment_b, experiment_c,
                                              experiment_d, experiment_e, experiment_f,
                                              experiment_g, experiment_h, experiment_i,
                                              experiment_j]))
NEEDS_MINILM = set("BDEFI")          # A, G, H and J run their TF-IDF and BM25 parts without it
NO_EMBEDDINGS = set("C")


def run_experiments(letters: str = EXPERIMENTS, minilm: rag.Embedder | None = None,
                    plot_dir: str | None = None) -> dict:
    """Run the chosen experiments in order, sharing one MiniLM (loaded if None): every text is
    embedded once. Returns {letter: measured numbers, "skipped": {letter: why}}."""
    letters = parse_letters(letters)
    results, skipped = {}, {}
    if minilm is None and set(letters) - NO_EMBEDDINGS:
        from ragkit.folder_index import minilm_embedder
        try:
            minilm = minilm_embedder()
        except RuntimeError as exc:
            reason = f"MiniLM could not be loaded ({exc})"
            skipped = {x: reason for x in letters if x in NEEDS_MINILM}
            if set(letters) & set("AGHJ"):
                print(f"[info] {reason}: A, G, H and J show their TF-IDF and BM25 rows only\n")
    for letter in [x for x in letters if x not in skipped]:
        results[letter] = EXPERIMENT_FUNCTIONS[letter](minilm)
        print()
    if skipped:
        print(f"skipped {', '.join(skipped)}: they measure MiniLM, and "
              f"{next(iter(skipped.values()))}")
    if minilm:
        print(f"MiniLM has embedded {minilm.texts_encoded} distinct texts so far, each once")
    results["skipped"] = skipped
    if plot_dir:
        results["plots"] = write_plots(results, plot_dir)
        print("charts: " + ", ".join(results["plots"]) if results["plots"]
              else "no charts: run B, D or H to get some")
    return results


def parse_letters(letters: str) -> str:
    """'A,B,e' or 'ABE' -> 'ABE' in run order; an unknown letter is a ValueError."""
    picked = re.sub(r"[,\s]", "", letters.upper())
    unknown = sorted(set(picked) - set(EXPERIMENTS))
    if unknown or not picked:
        raise ValueError(f"unknown experiment {', '.join(unknown) or repr(letters)}: "
                         f"choose letters from {EXPERIMENTS}, e.g. --only A,B,E")
    return "".join(x for x in EXPERIMENTS if x in picked)


# == 4. Charts ==============================================================================
def write_plots(results: dict, folder: str) -> list[str]:
    """PNG charts of B (chunk size), D (k) and H (refusal scores); returns the paths written."""
    try:
        import matplotlib
        matplotlib.use("Agg")                        # files only, no window
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError(NO_MATPLOTLIB) from None
    out = plot_folder(folder, claim=True)
    figures = {}
    if "B" in results:
        sweep = results["B"]["sweep"]
        fig, ax = plt.subplots(figsize=(6.4, 4))
        for share, hits in sweep["hit@1"].items():
            ax.plot(sweep["sizes"], hits, marker="o", label=f"overlap {share:.0%} of the chunk")
        ax.set(xscale="log", xlabel="chunk size (words, log scale)", ylabel="hit@1 (10 questions)",
               title="B: chunk size against hit@1 (MiniLM)", ylim=(0.5, 1.05))
        ax.set_xticks(sweep["sizes"], [str(s) for s in sweep["sizes"]])
        ax.minorticks_off()                          # no "6x10^1" labels between ours
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
        figures["b_chunk_size.png"] = fig
    if "D" in results:
        ks, rows = list(results["D"]["k"]), list(results["D"]["k"].values())
        fig, ax = plt.subplots(figsize=(6.4, 4))
        ax.plot(ks, [r["precision"] for r in rows], marker="o", color="tab:blue")
        ax.set(xticks=ks, xlabel="k (chunks put in the prompt)", ylabel="precision@k",
               ylim=(0, 1.05), title="D: more chunks, less precision, longer prompts (MiniLM)")
        ax.yaxis.label.set_color("tab:blue")
        twin = ax.twinx()
        twin.plot(ks, [r["prompt_words"] for r in rows], marker="s", color="tab:orange")
        twin.set_ylabel("prompt length for Q1 (words)", color="tab:orange")
        twin.set_ylim(0, None)
        ax.grid(alpha=0.3)
        figures["d_top_k.png"] = fig
    if "H" in results:
        methods = list(results["H"])
        fig, axes = plt.subplots(1, len(methods), figsize=(3.2 * len(methods), 4), squeeze=False)
        rng = np.random.default_rng(SEED)             # a little sideways jitter so dots don't hide
        for ax, method in zip(axes[0], methods):
            r = results["H"][method]
            for x, (group, color) in enumerate([("answerable", "tab:green"),
                                                ("unanswerable", "tab:red")]):
                ax.scatter(x + rng.uniform(-0.12, 0.12, len(r[group])), r[group], color=color,
                           alpha=0.8)
            ax.axhline(r["threshold"], color="grey", linestyle="--")
            ax.set(xticks=[0, 1], xticklabels=["answerable", "unanswerable"], xlim=(-0.5, 1.5))
            ax.set_title(f"{method}\nbest threshold {r['threshold']:.3f} (dashed), F1 {r['f1']:.2f}",
                         fontsize=10)
        axes[0][0].set_ylabel("top retrieval score")
        fig.suptitle("H: top scores of answerable and unanswerable questions")
        figures["h_refusal_scores.png"] = fig
    for name, fig in figures.items():
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)                               # free its memory
    return [str(out / name) for name in figures]


def plot_folder(folder: str, claim: bool = False) -> Path:
    """The --plot folder if the kit may write there (new, empty or ours); claim=True marks it."""
    from ragkit.support import claim_folder, usable_folder
    return claim_folder(folder, "--plot") if claim else usable_folder(folder, "--plot")


# == 5. Command line ========================================================================
def parse_args(argv=None):
    """Command-line flags; every default comes from the block at the top of the file."""
    from rageval.ir_collection import GRADE_READINGS
    p = support.OneLineParser(description="Measure what each RAG setting does to retrieval: "
                                          "the tutorial's experiments A-J, or a test collection.")
    p.add_argument("--only",
                   help=f"experiments to run, e.g. B or A,B,E (default: all of {EXPERIMENTS})")
    p.add_argument("--plot", metavar="DIR", help="also write PNG charts into DIR (needs matplotlib)")
    add_collection(p, help="score TF-IDF, BM25, MiniLM, hybrids and feedback on a SMART test "
                           "collection folder, tuned settings cross-validated")
    p.add_argument("--json", action="store_true", help="with --collection: print one JSON object")
    p.add_argument("--grades", default="auto",
                   help=f"with --collection: how to read relevance grades: auto (higher "
                        f"when the file's grades differ, else binary) or one of {', '.join(GRADE_READINGS)} "
                        f"(default: %(default)s)")
    add_cache(p, "with --collection: folder for cached document vectors")
    return p.parse_args(argv)


def check_flags(args) -> None:
    """Every flag checked before any slow work: a bad one is one line, nothing written."""
    support.refuse_empty({"--plot": args.plot, "--cache": args.cache, "--collection": args.collection},
                         "a path")
    if args.collection is None:
        for flag, given in [("--json", args.json), ("--cache", args.cache is not None),
                            ("--grades", args.grades != "auto")]:
            if given:
                raise ValueError(f"{flag} goes with --collection PATH")
    for flag, value in [("--only", args.only), ("--plot", args.plot)]:
        if args.collection is not None and value is not None:
            raise ValueError(f"{flag} is for the experiments A-J; it does not go with --collection")
    if args.only is not None:
        parse_letters(args.only)
    if args.plot is not None:
        plot_folder(args.plot)
        import importlib.util  # before the work, not after it
        if importlib.util.find_spec("matplotlib") is None:
            raise RuntimeError(NO_MATPLOTLIB)


def run(args) -> None:
    """The experiments, or the test collection if --collection was given."""
    check_flags(args)
    if args.collection:
        from rageval.ir_scores import run_collection
        run_collection(args.collection, args.json, args.cache, grades=args.grades)
    else:
        run_experiments(args.only or EXPERIMENTS, plot_dir=args.plot)


main = support.main_for(run, parse_args)     # bad input: one line on stderr, exit status 1


if __name__ == "__main__":
    support.leave(main())
