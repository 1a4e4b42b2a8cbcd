"""
rag_retrieval.py: the retrieval maths the experiments and the test-collection scores share.

    from rag_retrieval import bm25_matrix, bm25_scores, hybrid_scores, minmax, reciprocal_rank_fusion
    vectorizer, W = bm25_matrix(texts)                # sparse: W[d, t] = BM25 weight of term t in d
    keyword = bm25_scores(["new fathers"], vectorizer, W)
    fused = hybrid_scores(minmax(keyword), minmax(dense), weight=0.3)
    fused = reciprocal_rank_fusion([keyword, dense])  # by rank alone
    q2 = rocchio(q, doc_vectors, q @ doc_vectors.T)   # pseudo-relevance feedback

Every function takes and returns score matrices (one row per query, one column per document)
or vectors, so a grid of settings costs matrix products, not new searches. Nothing here loads
a model; scikit-learn and SciPy are imported inside the functions that need them.
"""

from __future__ import annotations

import functools
import re

import numpy as np

# ---------------------------------------------------------------------------
# Defaults: the one place they live (the experiments' CLI reads them from here)
# ---------------------------------------------------------------------------
BM25_K1 = 1.5            # how quickly repeats of a word stop adding score (rank_bm25's default)
BM25_B = 0.75            # how strongly long documents are penalised (0 = not at all)
HYBRID_WEIGHT = 0.5      # share of the keyword score in a weighted hybrid
RRF_K = 60               # reciprocal rank fusion constant (Cormack, Clarke and Buettcher, 2009)
ROCCHIO_A = 1.0          # weight of the query itself in Rocchio feedback
ROCCHIO_B = 0.75         # weight of the feedback documents' mean (SMART's classic beta)
ROCCHIO_M = 3            # how many top documents count as (pseudo-)relevant
RESAMPLES = 2000         # bootstrap resamples of the question set
SEED = 0                 # fixes every bootstrap interval, so reruns print the same numbers


# ---------------------------------------------------------------------------
# 1. BM25 as a sparse matrix
# ---------------------------------------------------------------------------
def bm25_idf(doc_freq: np.ndarray, n_docs: int, idf: str = "lucene") -> np.ndarray:
    """Inverse document frequency of each term from the number of documents that contain it.

    lucene: ln(1 + (N - n + 0.5) / (n + 0.5)), never negative (Lucene, Elasticsearch).
    okapi:  ln((N - n + 0.5) / (n + 0.5)); terms in more than half the documents would score
            negative, so rank_bm25 lifts those to 0.25 * the mean idf. Kept to test against it.
    """
    if idf == "lucene":
        return np.log(1 + (n_docs - doc_freq + 0.5) / (doc_freq + 0.5))
    if idf == "okapi":
        raw = np.log(n_docs - doc_freq + 0.5) - np.log(doc_freq + 0.5)
        return np.where(raw < 0, 0.25 * raw.mean(), raw)
    raise ValueError(f"unknown idf {idf!r}: choose lucene or okapi")


def word_analyzer(stem: bool = False):
    """The function that turns a text into the words BM25 counts: lower case, no stop words.

    stem=True also cuts words to their stem with the Porter2 stemmer ("retrieval",
    "retrieving" -> "retriev"), so different forms of one word match.
    """
    from sklearn.feature_extraction.text import CountVectorizer
    words = CountVectorizer(stop_words="english").build_analyzer()   # words of 2+ letters
    if not stem:
        return words
    try:
        import snowballstemmer
    except ImportError:
        raise RuntimeError("stemming needs snowballstemmer: run `pip install snowballstemmer`") from None
    stem = functools.lru_cache(maxsize=None)(snowballstemmer.stemmer("english").stemWord)
    return lambda text: [stem(word) for word in words(text)]   # each distinct word stemmed once


def bm25_weights(counts, k1: float = BM25_K1, b: float = BM25_B, idf: str = "lucene"):
    """BM25 weights from a sparse document-term count matrix (one row per document).

    weight(t, d) = idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(d) / mean_len))
    Counting words is the slow part, so a grid over k1 and b counts once and calls this.
    """
    from scipy import sparse
    if k1 < 0 or not 0 <= b <= 1:
        raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
    tf = sparse.csr_matrix(counts, dtype=np.float64)
    doc_len = np.asarray(tf.sum(axis=1)).ravel()
    doc_freq = np.bincount(tf.indices, minlength=tf.shape[1])
    term_idf = bm25_idf(doc_freq, tf.shape[0], idf)
    # Only the stored (non-zero) counts change: each is scaled by its document's length norm.
    length_norm = k1 * (1 - b + b * doc_len / max(doc_len.mean(), 1e-12))
    row_of = np.repeat(np.arange(tf.shape[0]), np.diff(tf.indptr))
    data = term_idf[tf.indices] * tf.data * (k1 + 1) / (tf.data + length_norm[row_of])
    return sparse.csr_matrix((data, tf.indices, tf.indptr), shape=tf.shape)


def bm25_matrix(texts: list[str], k1: float = BM25_K1, b: float = BM25_B, idf: str = "lucene",
                stem: bool = False):
    """Return (vectorizer, W): W[d, t] is term t's BM25 weight in text d, so scores = W @ counts(q).

    tf is how often t occurs in d and len(d) counts d's words; W is sparse, like TF-IDF.
    """
    from sklearn.feature_extraction.text import CountVectorizer
    if k1 < 0 or not 0 <= b <= 1:                    # before the slow counting
        raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
    vectorizer = CountVectorizer(analyzer=word_analyzer(stem))
    return vectorizer, bm25_weights(vectorizer.fit_transform(texts), k1, b, idf)


def bm25_scores(queries: list[str], vectorizer, weights) -> np.ndarray:
    """BM25 score of every text for each query: one row per query, counts(query) @ W.T."""
    counts = vectorizer.transform(queries)           # a word repeated in the query counts twice
    return (counts @ weights.T).toarray()


# ---------------------------------------------------------------------------
# 2. Fusing two rankings
# ---------------------------------------------------------------------------
def minmax(scores: np.ndarray) -> np.ndarray:
    """Rescale each row to 0..1 so scores on different scales (BM25, cosine) can be added."""
    scores = np.asarray(scores, dtype=float)
    low = scores.min(axis=-1, keepdims=True)
    span = scores.max(axis=-1, keepdims=True) - low
    return (scores - low) / np.where(span > 0, span, 1.0)


def hybrid_scores(keyword: np.ndarray, dense: np.ndarray, weight: float = HYBRID_WEIGHT) -> np.ndarray:
    """weight * keyword + (1 - weight) * dense: the exercise's 0.5 s_tfidf + 0.5 s_minilm."""
    if not 0 <= weight <= 1:
        raise ValueError(f"the hybrid weight must be between 0 and 1, got {weight}")
    return weight * np.asarray(keyword) + (1 - weight) * np.asarray(dense)


def ranks(scores: np.ndarray) -> np.ndarray:
    """Rank of each entry within its row, 1 = best; ties keep index order, as top_k does."""
    order = np.argsort(-np.asarray(scores), axis=-1, kind="stable")
    out = np.empty_like(order)
    np.put_along_axis(out, order, np.arange(1, order.shape[-1] + 1) * np.ones_like(order), axis=-1)
    return out


def reciprocal_rank_fusion(score_list: list[np.ndarray], k: int = RRF_K) -> np.ndarray:
    """Fuse rankings by rank alone: sum over methods of 1 / (k + rank). Scales never meet."""
    return sum(1.0 / (k + ranks(scores)) for scores in score_list)


# ---------------------------------------------------------------------------
# 3. Moving the query (Rocchio) and the documents (neighbours)
# ---------------------------------------------------------------------------
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

    queries (q x dims) and docs (d x dims) are dense (MiniLM) or sparse (TF-IDF) rows;
    scores (q x d) ranks the documents that are taken as relevant. Only b / a changes the
    ranking of q' @ docs.T, since the length is normalised away.
    """
    if a < 0 or b < 0 or m < 1:
        raise ValueError(f"Rocchio needs a >= 0, b >= 0 and m >= 1, got a={a}, b={b}, m={m}")
    return unit_rows(a * queries + b * (top_rows(scores, m) @ docs))


def neighbour_smoothed(docs: np.ndarray, g: float = 0.5, neighbours: int = 10) -> np.ndarray:
    """Each unit document vector plus g * the mean of its nearest neighbours, unit length.

    A document then also answers for what its close neighbours say (the cluster hypothesis):
    Rocchio's move applied to the documents, with neighbours found by cosine.
    """
    if g < 0 or neighbours < 1:
        raise ValueError(f"need g >= 0 and neighbours >= 1, got g={g}, neighbours={neighbours}")
    similar = docs @ docs.T
    np.fill_diagonal(similar, -np.inf)               # a document is not its own neighbour
    return unit_rows(docs + g * (top_rows(similar, neighbours) @ docs))


def split_sentences(text: str) -> list[str]:
    """Cut after '.', '!' or '?' followed by a space ("id.kestrelwood.example" stays whole)."""
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]


# ---------------------------------------------------------------------------
# 4. Bootstrap intervals over questions
# ---------------------------------------------------------------------------
def bootstrap_ci(values, resamples: int = RESAMPLES, seed: int = SEED) -> tuple[float, float]:
    """95% interval for the mean of per-question values, resampling questions with replacement."""
    values = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(values), size=(resamples, len(values)))
    means = values[picks].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def paired_bootstrap(before, after, resamples: int = RESAMPLES,
                     seed: int = SEED) -> tuple[float, float, float]:
    """Mean of after - before with a 95% interval; both settings see the same resampled questions."""
    diff = np.asarray(after, dtype=float) - np.asarray(before, dtype=float)
    return (float(diff.mean()), *bootstrap_ci(diff, resamples, seed))
