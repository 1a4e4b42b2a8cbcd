"""
rageval/score_matrices.py: retrieval on score matrices that only the experiments and the
evaluation run: Rocchio feedback (the query moved), neighbour smoothing (the documents moved)
and the lesson's Step 6 metrics for rankings given as scores. The kit's command line runs none
of them; ragkit/retrieval.py holds what it does run (BM25, fusion, intervals, reranking).

    q2 = rocchio(q, doc_vectors, q @ doc_vectors.T)   # pseudo-relevance feedback
    docs2 = neighbour_smoothed(doc_vectors)            # each document pulled to its neighbours
    metrics = evaluate_scores(q2 @ docs2.T, chunks, eval_set, k=3)

Each takes and returns score matrices (one row per query, one column per document) or
vectors, so a grid of settings costs matrix products, not new searches.
"""

from __future__ import annotations

import numpy as np

import rag_from_scratch as rag  # light: NumPy only at import
from ragkit.retrieval import scored

ROCCHIO_A = 1.0          # weight of the query itself in Rocchio feedback
ROCCHIO_B = 0.75         # weight of the feedback documents' mean (SMART's classic beta)
ROCCHIO_M = 3            # how many top documents count as (pseudo-)relevant


# == Moving the query (Rocchio) and the documents (neighbours) ==============================
def unit_rows(vectors):
    """Each row divided by its length (dense or sparse); a zero row stays zero."""
    from sklearn.preprocessing import normalize
    return normalize(vectors)


def top_rows(scores: np.ndarray, m: int):
    """Sparse (queries x docs) matrix with 1/m at each row's m best scores: @ docs = their mean."""
    from scipy import sparse
    scores = np.asarray(scores)
    m = min(m, scores.shape[1])
    best = np.argsort(-scores, axis=1, kind="stable")[:, :m]
    return sparse.csr_matrix((np.full(best.size, 1.0 / m), best.ravel(),
                              np.arange(0, best.size + 1, m)), shape=scores.shape)


def rocchio(queries, docs, scores: np.ndarray, a: float = ROCCHIO_A, b: float = ROCCHIO_B,
            m: int = ROCCHIO_M):
    """Pseudo-relevance feedback: q' = a*q + b*mean of the m top-scoring docs, unit length.

    queries and docs are dense or sparse rows; scores (queries x docs) picks the m docs taken
    as relevant. Only b / a changes the ranking, since the length is normalised away.
    """
    if a < 0 or b < 0 or m < 1:
        raise ValueError(f"Rocchio needs a >= 0, b >= 0 and m >= 1, got a={a}, b={b}, m={m}")
    return unit_rows(a * queries + b * (top_rows(scores, m) @ docs))


def neighbour_smoothed(docs: np.ndarray, g: float = 0.5, neighbours: int = 10) -> np.ndarray:
    """Each unit document vector plus g * the mean of its nearest neighbours, unit length:
    Rocchio's move applied to the documents (the cluster hypothesis)."""
    if g < 0 or neighbours < 1:
        raise ValueError(f"need g >= 0 and neighbours >= 1, got g={g}, neighbours={neighbours}")
    similar = docs @ docs.T
    np.fill_diagonal(similar, -np.inf)               # a document is not its own neighbour
    return unit_rows(docs + g * (top_rows(similar, neighbours) @ docs))


# == Scoring rankings given as scores =======================================================
def evaluate_scores(scores: np.ndarray, chunks: list[dict], eval_set: list[dict], k: int) -> dict:
    """The lesson's Step 6 metrics for rankings given as scores (row i: question i's score for
    every chunk), so a grid of settings costs matrix products, not new searches."""
    rankings = [[chunks[i]["doc_id"] for i in rag.top_k(row, k)] for row in scores]
    return scored(eval_set, rankings, k)
