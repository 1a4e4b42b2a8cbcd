"""ragkit/retrieval.py: the retrieval maths beyond cosine: BM25, fusion, intervals, reranking,
and the kit's retriever made from them.

    vectorizer, W = bm25_matrix(texts)                # sparse: W[d, t] = BM25 weight of term t in d
    keyword = bm25_scores(["new fathers"], vectorizer, W)
    fused = hybrid_scores(minmax(keyword), minmax(dense), weight=0.3)
    fused = reciprocal_rank_fusion([keyword, dense])  # by rank alone
    retrieve = make_retriever(chunks, index, embedder, hybrid=0.3, context=True)   # a Retriever

Sections 1-3 take and return score matrices (one row per query, one column per document) or
vectors, so a grid of settings costs matrix products, not new searches. Section 4 reranks with a
cross-encoder; section 5 puts it all into one Retriever: retrieve(question, k). The flags that
ask for them are ragkit/retrieval.py's. Query feedback and neighbour smoothing, which
only the experiments and the evaluation run, are rageval/score_matrices.py's.

Nothing here loads a model at import; scikit-learn, SciPy and the reranker are imported inside
the functions that need them.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import numpy as np

import rag_from_scratch as rag
from ragkit import chunking, folder_index
from ragkit.support import one_line, plural, refuse_empty

# == Defaults: the one place they live (the experiments' CLI reads them from here) =========
BM25_K1 = 1.5            # how quickly repeats of a word stop adding score (rank_bm25's default)
BM25_B = 0.75            # how strongly long documents are penalised (0 = not at all)
HYBRID_WEIGHT = 0.5      # share of the keyword score in a weighted hybrid
RRF_K = 60               # reciprocal rank fusion constant (Cormack, Clarke and Buettcher, 2009)
DOCS_HYBRID = 0.3        # --docs: BM25's share of the fused score (rageval/tuning.py chose it)
RESAMPLES = 2000         # bootstrap resamples of the question set
SEED = 0                 # fixes every bootstrap interval, so reruns print the same numbers


# == 1. BM25 as a sparse matrix ============================================================
def bm25_idf(doc_freq: np.ndarray, n_docs: int) -> np.ndarray:
    """Inverse document frequency of each term from the number n of documents that contain it:
    ln(1 + (N - n + 0.5) / (n + 0.5)), never negative (Lucene's, Elasticsearch's)."""
    return np.log(1 + (n_docs - doc_freq + 0.5) / (doc_freq + 0.5))


def word_analyzer():
    """Text -> the words BM25 counts: lower case, no stop words, words of 2+ letters."""
    from sklearn.feature_extraction.text import CountVectorizer
    return CountVectorizer(stop_words="english").build_analyzer()


def bm25_weights(counts, k1: float = BM25_K1, b: float = BM25_B, idf=bm25_idf):
    """BM25 weights from a sparse document-term count matrix (one row per document).

    weight(t, d) = idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(d) / mean_len))
    Counting words is the slow part, so a grid over k1 and b counts once and calls this.
    idf(doc_freq, n_docs): bm25_idf here; rageval/ir_scores.py holds rank_bm25's, to test against.
    """
    from scipy import sparse
    if k1 < 0 or not 0 <= b <= 1:
        raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
    tf = sparse.csr_matrix(counts, dtype=np.float64)
    doc_len = np.asarray(tf.sum(axis=1)).ravel()
    doc_freq = np.bincount(tf.indices, minlength=tf.shape[1])
    term_idf = idf(doc_freq, tf.shape[0])
    # Only the stored (non-zero) counts change: each is scaled by its document's length norm.
    length_norm = k1 * (1 - b + b * doc_len / max(doc_len.mean(), 1e-12))
    row_of = np.repeat(np.arange(tf.shape[0]), np.diff(tf.indptr))
    data = term_idf[tf.indices] * tf.data * (k1 + 1) / (tf.data + length_norm[row_of])
    return sparse.csr_matrix((data, tf.indices, tf.indptr), shape=tf.shape)


def bm25_matrix(texts: list[str], k1: float = BM25_K1, b: float = BM25_B):
    """(vectorizer, W): sparse W[d, t] is term t's BM25 weight in text d; scores = W @ counts(q)."""
    from sklearn.feature_extraction.text import CountVectorizer
    vectorizer = CountVectorizer(analyzer=word_analyzer())
    return vectorizer, bm25_weights(vectorizer.fit_transform(texts), k1, b)


def bm25_scores(queries: list[str], vectorizer, weights) -> np.ndarray:
    """BM25 score of every text for each query: one row per query, counts(query) @ W.T."""
    counts = vectorizer.transform(queries)           # a word repeated in the query counts twice
    return (counts @ weights.T).toarray()


# == 2. Fusing two rankings ================================================================
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
    return np.argsort(order, axis=-1) + 1        # the order inverted: [2, 0, 1] -> ranks [2, 3, 1]


def reciprocal_rank_fusion(score_list: list[np.ndarray], k: int = RRF_K) -> np.ndarray:
    """Fuse rankings by rank alone: sum over methods of 1 / (k + rank). Scales never meet."""
    return sum(1.0 / (k + ranks(scores)) for scores in score_list)


# == 3. Bootstrap intervals over questions =================================================
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


def per_question(metrics: dict, key: str) -> list[float]:
    """One metric's value for each question ("hit", "ndcg", ...), in question order."""
    return [m[key] for m in metrics["per_question"]]


def scored(eval_set: list[dict], rankings: list[list[str]], k: int, verbose: bool = False) -> dict:
    """The lesson's score_rankings, plus hit@1 of the same rankings ("hit1": per question and
    averaged), which the kit's tables print beside hit@k."""
    m = rag.score_rankings(eval_set, rankings, k, verbose)
    for q, item, ranked in zip(m["per_question"], eval_set, rankings):
        q["hit1"] = rag.retrieval_metrics(ranked, item["relevant"], 1)["hit"]
    m["hit1"] = float(np.mean([q["hit1"] for q in m["per_question"]]))
    return m


def evaluate_retriever(eval_set: list[dict], retrieve, k: int, verbose: bool = False) -> dict:
    """The lesson's Step 6 metrics for any retriever: retrieve(question, k) ranks, the lesson's
    score_rankings scores."""
    rankings = [[r["doc_id"] for r in retrieve(item["question"], k)] for item in eval_set]
    return scored(eval_set, rankings, k, verbose)


# == 4. Re-ranking with a cross-encoder ====================================================
RERANKER = "cross-encoder/ms-marco-MiniLM-L6-v2"
RERANK_DEPTH = 4         # the reranker sees RERANK_DEPTH x k candidates and keeps k
GET_RERANKER = (f"download it once where the network is open (`hf download {RERANKER}`) and "
                f"it loads from the cache, or pass --rerank FOLDER")


def no_reranker(model: str) -> RuntimeError:
    """The one line for a reranker with no local copy."""
    return RuntimeError(f"no local copy of the reranker {model}: {GET_RERANKER} (or --rerank auto "
                        f"to go on without)")


def load_reranker(model: str = RERANKER):
    """A sentence-transformers CrossEncoder from a local copy (ragkit/folder_index.py)."""
    if not (folder_index.looks_like_folder(model) or folder_index.model_folder(model)):
        raise no_reranker(model)
    return folder_index.load_cross_encoder(model)


def rerank(question: str, candidates: list[dict], texts: list[str], reranker, k: int):
    """The k candidates the cross-encoder scores highest, best first: it reads question and
    passage together (two separate vectors cannot), too slowly for every chunk."""
    import torch
    torch.set_num_threads(1)             # one query: two threads on a busy machine wait on each other
    scores = np.asarray(reranker.predict([(question, t) for t in texts], show_progress_bar=False))
    return [{**candidates[i], "score": float(scores[i]), "rerank": float(scores[i])}
            for i in np.argsort(-scores, kind="stable")[:k]]


# == 5. A retriever: filters, context, hybrid, rerank ========================================
def in_filters(doc: dict, source: str | None, tag: str | None) -> bool:
    """True if a document (or chunk) is under --source PREFIX and carries --tag TAG."""
    prefix = (source or "").removeprefix("./")
    tags = {t.casefold() for t in doc.get("tags") or ()}
    return doc["doc_id"].startswith(prefix) and (tag is None or tag.casefold() in tags)


def check_filters(docs: list[dict], source: str | None, tag: str | None) -> None:
    """One sentence and ValueError if --source or --tag leaves no document to search."""
    if tag is not None and not any(d.get("tags") for d in docs):
        raise ValueError(f"--tag {tag}: no file has tags; add `tags: [a, b]` to the front matter "
                         f"(a '---' block at the top of a .md file)")
    if not any(in_filters(d, source, tag) for d in docs):
        asked = " and ".join(f"--{f} {v}" for f, v in (("source", source), ("tag", tag)) if v is not None)
        tags = sorted({t for d in docs for t in d.get("tags") or ()})
        hint = f"tags in these files: {', '.join(tags[:8])}" if tag is not None else \
            f"doc ids look like {docs[0]['doc_id']!r}"
        raise ValueError(f"{asked} matches no document ({hint})")


def first_stage(question: str, index, embedder, bm25=None, hybrid=None):
    """(every chunk's score, its cosine, its BM25 or None): the cosine of Step 3, or its fusion
    with BM25 (by rank, or a weighted sum of both rescaled to 0..1)."""
    dense = np.asarray(index @ embedder.encode([question])[0]).ravel()
    if hybrid is None:
        return dense, dense, None
    keyword = bm25_scores([question], *bm25)[0]
    if hybrid == "rrf":
        return reciprocal_rank_fusion([keyword, dense]), dense, keyword
    return hybrid_scores(minmax(keyword), minmax(dense), hybrid), dense, keyword


def ranking_name(hybrid=None, reranker=None) -> str:
    """What orders a retriever's results, in words a learner can read."""
    if reranker is not None:
        return "ranked by a cross-encoder reading question and chunk together"
    if hybrid == "rrf":
        return "ranked by reciprocal rank fusion of BM25 and cosine (1/(60 + rank), summed)"
    if hybrid is not None:
        return (f"ranked by {hybrid:g} x BM25 + {1 - hybrid:g} x cosine, each rescaled to 0..1 "
                f"over all chunks")
    return "ranked by cosine similarity"


@dataclass
class Retriever:
    """retriever(question, k) -> the k best chunks with their "score" (what ranked them),
    "cosine" and, with hybrid, "bm25": filter, fuse, then rerank. Made by make_retriever()."""
    chunks: list[dict]
    texts: list[str]         # what was embedded: each chunk's text, its title in front with context
    index: object            # their vectors, one row per chunk
    embedder: object
    allowed: np.ndarray      # the rows --source and --tag leave
    hybrid: object = None    # None, "rrf" or BM25's weight
    bm25: tuple | None = None            # (vectorizer, weights) with hybrid
    reranker: object = None
    timing: dict = field(default_factory=lambda: {"seconds": 0.0, "queries": 0})   # reranking's

    @property
    def cosine_only(self) -> bool:
        """Ranked by cosine alone: no BM25 fused in, no reranker."""
        return self.hybrid is None and self.reranker is None

    @property
    def ranking(self) -> str:
        """What orders the results, in words a learner can read."""
        return ranking_name(self.hybrid, self.reranker)

    def __call__(self, question: str, k: int, report: bool = False) -> list[dict]:
        """The k best chunks for the question (report: say the rerank's time on stderr)."""
        allowed = self.allowed
        scores, dense, keyword = (v if v is None else v[allowed]          # filter first
                                  for v in first_stage(question, self.index, self.embedder,
                                                       self.bm25, self.hybrid))
        best = rag.top_k(scores, min(RERANK_DEPTH * k if self.reranker else k, len(allowed)))
        found = [{**self.chunks[allowed[p]], "score": float(scores[p]), "cosine": float(dense[p]),
                  **({} if keyword is None else {"bm25": float(keyword[p])})} for p in best]
        if self.reranker is None:
            return found
        start = time.perf_counter()
        found = rerank(question, found, [self.texts[allowed[p]] for p in best], self.reranker, k)
        seconds = time.perf_counter() - start
        self.timing["seconds"] += seconds
        self.timing["queries"] += 1
        if report:
            print(f"reranked {len(best)} candidates in {1000 * seconds:.1f} ms", file=sys.stderr)
        return found


def make_retriever(chunks: list[dict], index, embedder, hybrid=None, reranker=None,
                   context: bool = False, allowed=None, context_vectors=None) -> Retriever:
    """The kit's retriever over these chunks: their vectors made here with context (or taken
    from context_vectors), BM25 counted with hybrid, every row searched unless `allowed`."""
    texts = chunking.with_context(chunks) if context else [c["text"] for c in chunks]
    if context and context_vectors is not None:      # made already (--docs embeds titles)
        index = context_vectors
    elif context or index is None:                   # made here; TF-IDF learns its words anew
        embedder = rag.Embedder("tfidf") if embedder.backend == "tfidf" else embedder
        index = rag.build_index([{"text": t} for t in texts], embedder)
    bm25 = bm25_matrix(texts) if hybrid is not None else None
    allowed = np.arange(len(chunks)) if allowed is None else np.asarray(allowed)
    return Retriever(chunks, texts, index, embedder, allowed, hybrid, bm25, reranker)


# == The retrieval flags: from the command line to a Retriever, and --compare ======================
# the retrieval flags beyond the tutorial, from the command line to
# a retriever, and --compare.
#
#     python rag_from_scratch.py --hybrid rrf --question "How much time off do new fathers get?"
#     python rag_from_scratch.py --docs notes/ --hybrid 0.3 --rerank auto --question "..."
#     python rag_from_scratch.py --docs notes/ --source ops/ --tag database --question "..."
#     python rag_from_scratch.py --context --compare     # plain, hybrid, rerank, context: one table
#
# settings(args, chunks) turns --hybrid, --rerank, --source, --tag and --context into the settings
# of one Retriever (ragkit/retrieval.py's make_retriever); print_evaluation scores what it found
# for labelled questions, and print_compare (--compare) prints every variant side by side, with
# bootstrap intervals, so a difference can be told from noise.


def hybrid_setting(value: str):
    """--hybrid's value: "rrf", or the BM25 share of a weighted sum as a float in [0, 1]."""
    if value.strip().lower() == "rrf":
        return "rrf"
    try:
        if 0 <= float(value) <= 1:
            return float(value)
    except ValueError:
        pass
    raise ValueError(f"--hybrid takes rrf or a BM25 weight between 0 and 1 (e.g. 0.3), got {value!r}")


def variant_name(hybrid=None, reranker=None, context: bool = False) -> str:
    """A row label: "plain", "hybrid rrf", "hybrid 0.3 + rerank + context", ..."""
    parts = ([f"hybrid {hybrid}"] if hybrid is not None else []) + (["rerank"] if reranker else []) \
        + (["context"] if context else [])
    return " + ".join(parts) or "plain"


def compare_variants(eval_set, chunks, index, embedder, k, hybrid="rrf", reranker=None, allowed=None,
                     context_vectors=None):
    """{name: metrics} for plain, hybrid, rerank (if a reranker is given), context, and all."""
    settings = [{}, {"hybrid": hybrid}] + ([{"reranker": reranker}] if reranker else []) \
        + [{"context": True}, {"hybrid": hybrid, "reranker": reranker, "context": True}]
    rows = {}
    for chosen in settings:
        retrieve = make_retriever(chunks, index, embedder, allowed=allowed, **chosen,
                                  context_vectors=context_vectors)
        metrics = evaluate_retriever(eval_set, retrieve, k)
        rows[variant_name(**chosen)] = {**metrics, "timing": retrieve.timing}
    return rows


def print_comparison(rows: dict, k: int) -> None:
    """One line per variant: hit@1, hit/recall/MRR/nDCG at k, nDCG's interval and its gain over plain."""
    width = max(len(name) for name in rows) + 2
    print(f"{'variant':<{width}}hit@1  hit@{k}  recall@{k}  mrr@{k}  ndcg@{k}  "
          f"ndcg 95% CI    ndcg - plain [95% CI]")
    plain = per_question(rows["plain"], "ndcg")
    for name, m in rows.items():
        low, high = bootstrap_ci(per_question(m, "ndcg"))
        line = (f"{name:<{width}}{m['hit1']:.2f}   {m['hit_rate']:.2f}   {m['recall']:.2f}      "
                f"{m['mrr']:.2f}   {m['ndcg']:.2f}    [{low:.2f}, {high:.2f}]")
        if name != "plain":
            diff, low, high = paired_bootstrap(plain, per_question(m, "ndcg"))
            line += f"   {diff:+.2f} [{low:+.2f}, {high:+.2f}]"
        print(line)
    timed = [m["timing"] for m in rows.values() if m["timing"]["queries"]]
    if timed:
        ms = 1000 * timed[0]["seconds"] / timed[0]["queries"]
        print(f"reranking added {ms:.1f} ms per query ({RERANK_DEPTH * k} candidates, 1 thread, "
              f"this machine and this reranker)")


def print_evaluation(eval_set, found: list[list[dict]], k: int, name: str, source: str,
                     timing: dict) -> None:
    """Step 6 for the retrieval --question uses, in a block that names its settings: found[i]
    holds the k chunks it retrieved for question i, and @1 scores the first of them. timing:
    the retriever's (the reranker's time)."""
    print(f"\n== Retrieval evaluation ({source}, {plural(len(eval_set), 'question')}): {name}, "
          f"the retrieval --question uses ==")
    rankings = [[r["doc_id"] for r in chunks] for chunks in found]
    for n in sorted({1, k}):                           # as the lesson's print_evaluation
        print(rag.evaluation_line(rag.score_rankings(eval_set, [r[:n] for r in rankings], n,
                                                     verbose=(n == 1))))
    if timing["queries"]:
        ms = 1000 * timing["seconds"] / timing["queries"]
        print(f"reranking added {ms:.1f} ms per query")


def check_flags(hybrid: str | None, rerank: str | None, source: str | None, tag: str | None) -> None:
    """--hybrid, --rerank, --source and --tag: the values, before slow work (whether a filter
    keeps any file is known once the files are read: allowed_rows)."""
    refuse_empty({"--source": source, "--tag": tag, "--rerank": rerank})
    if hybrid is not None:
        hybrid_setting(hybrid)
    if rerank not in (None, "auto") and not folder_index.model_folder(rerank):
        if folder_index.looks_like_folder(rerank):
            raise FileNotFoundError(f"model folder not found: {rerank} (give a folder holding config.json)")
        raise no_reranker(rerank)


def reranker_for(value: str, without: str = "--rerank auto: going on without reranking"):
    """The reranker --rerank asks for; with auto, None (and one line) when none can be had."""
    if value != "auto":
        return load_reranker(value)
    if not folder_index.model_folder(RERANKER):
        print(f"[info] {without} (no local copy of the reranker {RERANKER}: {GET_RERANKER})",
              file=sys.stderr)
        return None
    try:
        return load_reranker(RERANKER)
    except (RuntimeError, OSError) as exc:          # the copy is there but cannot load
        print(f"[info] {without} ({one_line(exc)})", file=sys.stderr)
        return None


def allowed_rows(chunks: list[dict], source: str | None, tag: str | None):
    """Indices of the chunks the filters keep, or None without filters."""
    if source is None and tag is None:
        return None
    check_filters(chunks, source, tag)
    rows = [i for i, c in enumerate(chunks) if in_filters(c, source, tag)]
    print(f"searching {len(rows)} of {len(chunks)} chunks (" + " ".join(
        f"--{f} {v}" for f, v in (("source", source), ("tag", tag)) if v is not None) + ")")
    return np.array(rows)


def settings(chunks: list[dict], hybrid: str | None, rerank: str | None, source: str | None,
             tag: str | None, context: bool) -> dict:
    """make_retriever's settings from the flags: hybrid, reranker, context and the rows the
    filters allow (None: all)."""
    return {"hybrid": hybrid_setting(hybrid) if hybrid is not None else None,
            "reranker": reranker_for(rerank) if rerank else None,
            "context": context, "allowed": allowed_rows(chunks, source, tag)}


def print_compare(eval_set, chunks, index, embedder, k: int, chosen: dict, context_vectors=None) -> None:
    """--compare: plain, hybrid, rerank and context side by side on eval_set, with intervals."""
    reranker = chosen["reranker"] or reranker_for("auto", "--compare: no rerank rows without a reranker")
    print(f"\n== Retrieval variants side by side ({plural(len(eval_set), 'question')}, k={k}, "
          f"backend={embedder.backend}) ==")
    plain = index if context_vectors is None else None   # --docs embedded titles: made anew
    rows = compare_variants(eval_set, chunks, plain, embedder, k,
                            chosen["hybrid"] if chosen["hybrid"] is not None else "rrf", reranker,
                            chosen["allowed"], context_vectors)
    print_comparison(rows, k)
