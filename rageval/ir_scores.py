"""
rageval/ir_scores.py: score retrieval methods on a classic IR test collection (CISI ships).

    python -m rageval.ir_scores data/cisi            # counts, files, grades, notes
    python -m rageval.ir_scores data/cisi --embed    # MiniLM vectors of every document,
                                                       # cached in .rag_cache/ (run it twice)
    python -m rageval.ir_scores data/cisi --embed --cache /tmp/vectors   # another cache folder
    python rag_experiments.py --collection data/cisi   # every method scored, cross-validated

Everything here runs offline. rageval/ir_collection.py reads the collection's files and
rageval/embedding_cache.py keeps document vectors on disk; this file scores TF-IDF, BM25, MiniLM and
their hybrids and feedback against the relevance judgements. A method with settings chooses
them by cross-validation over queries: each fold of queries is scored with the setting that
did best on the other folds, so no query helps choose its own setting.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from rageval.embedding_cache import EmbeddingCache
from rageval.ir_collection import DEFAULT_COLLECTION, GRADE_READINGS, load_collection
from ragkit import folder_index, support
from rageval.arguments import add_cache
from ragkit.folder_index import CACHE_DIR, minilm_embedder
from ragkit.retrieval import BM25_B, BM25_K1

# ---------------------------------------------------------------------------
# 1. Scoring retrieval methods, with every tuned setting cross-validated
# ---------------------------------------------------------------------------
CUTOFF = 10              # recall, MRR and nDCG count the top 10 documents
FOLDS = 5                # cross-validation folds over the judged queries
CV_SEED = 0              # which query goes to which fold
# The settings cross-validation chooses from. Rocchio's a stays 1: the query is renormalised,
# so only b / a moves the ranking, and b = 0 (no feedback) is always on the list.
K1S, BS = [0.9, 1.2, 1.5, 2.0], [0.3, 0.5, 0.75, 0.9]           # BM25
WEIGHTS = [round(0.1 * i, 1) for i in range(11)]                # keyword share of a hybrid
RRF_KS = [5, 10, 20, 40, 60, 100]
FEEDBACK_BS, FEEDBACK_MS = [0, 0.25, 0.5, 1, 2], [3, 5, 10]     # Rocchio b and m
NEIGHBOURS = 10          # neighbours of a document for neighbour_smoothed


def query_metrics(scores: np.ndarray, doc_ids: list[str], relevant: list[dict],
                  k: int = CUTOFF) -> np.ndarray:
    """(queries x 4) array of hit@1, recall@k, reciprocal rank and nDCG@k, by the lesson's metrics."""
    from rageval.score_matrices import evaluate_scores
    m = evaluate_scores(scores, [{"doc_id": d} for d in doc_ids],
                        [{"relevant": gains} for gains in relevant], k)
    return np.array([(q["hit1"], q["recall"], q["rr"], q["ndcg"]) for q in m["per_question"]])


def fold_of_each_query(n: int, folds: int = FOLDS, seed: int = CV_SEED) -> np.ndarray:
    """Fold of each query: a seeded shuffle dealt out in turn, so fold sizes differ by <= 1."""
    if not 2 <= folds <= n:
        raise ValueError(f"cross-validation needs at least 2 judged queries, the collection "
                         f"has {n}" if n < 2 else
                         f"cross-validation needs 2 to {n} folds for {n} judged queries, "
                         f"got {folds}")
    return np.random.default_rng(seed).permutation(n) % folds


def cross_validate(grid: dict[str, np.ndarray], folds: int = FOLDS,
                   seed: int = CV_SEED) -> tuple[np.ndarray, list[str]]:
    """For each fold, pick the setting with the best mean nDCG on the other folds and score
    the held-out queries with it. grid: {setting: query_metrics}; returns (held-out metrics,
    the setting chosen for each fold). Ties go to the first setting in the grid."""
    labels = list(grid)
    ndcg = np.array([grid[label][:, 3] for label in labels])
    fold = fold_of_each_query(ndcg.shape[1], folds, seed)
    held_out, chosen = np.empty_like(grid[labels[0]]), []
    for f in range(folds):
        test = fold == f
        best = labels[int(np.argmax(ndcg[:, ~test].mean(axis=1)))]
        held_out[test] = grid[best][test]
        chosen.append(best)
    return held_out, chosen


def okapi_idf(doc_freq: np.ndarray, n_docs: int) -> np.ndarray:
    """BM25's original idf, ln((N - n + 0.5) / (n + 0.5)), as rank_bm25 computes it: terms in more
    than half the documents would score negative, so it lifts those to 0.25 * the mean idf.
    The kit uses Lucene's never-negative one (ragkit/retrieval.py's bm25_idf); the tests check
    retrieval.bm25_weights against rank_bm25 through this one."""
    raw = np.log(n_docs - doc_freq + 0.5) - np.log(doc_freq + 0.5)
    return np.where(raw < 0, 0.25 * raw.mean(), raw)


def stemmed_analyzer():
    """Text -> the words BM25 counts, each cut to its Porter2 stem ("retrieval", "retrieving" ->
    "retriev"), so forms of one word match: the collections' BM25 rows."""
    import functools

    from ragkit.retrieval import word_analyzer
    words = word_analyzer()
    try:
        import snowballstemmer
    except ImportError:
        raise RuntimeError("stemming needs snowballstemmer: run "
                           "`.venv/bin/pip install snowballstemmer`") from None
    stem = functools.lru_cache(maxsize=None)(snowballstemmer.stemmer("english").stemWord)
    return lambda text: [stem(word) for word in words(text)]   # each distinct word stemmed once


def score_inputs(collection: dict, minilm=None, cache=None) -> dict:
    """Everything the methods need, computed once: texts, word counts, TF-IDF and MiniLM vectors."""
    from sklearn.feature_extraction.text import CountVectorizer

    import rag_from_scratch as rag
    from rageval.score_matrices import unit_rows
    from ragkit.support import split_sentences
    judged = [q for q in collection["queries"] if q["qid"] in collection["qrels"]]
    if not judged:
        raise ValueError("the collection has no query with relevance judgements to score")
    docs = collection["docs"]
    inputs = {"questions": [q["text"] for q in judged], "texts": [d["text"] for d in docs],
              "doc_ids": [d["doc_id"] for d in docs],
              "relevant": [collection["qrels"][q["qid"]] for q in judged]}
    tfidf = rag.Embedder("tfidf")
    index = rag.build_index(docs, tfidf)              # fits the vocabulary first
    inputs["tfidf"] = (tfidf.encode(inputs["questions"], sparse=True), index)
    try:                                              # stemmed word counts, for every BM25
        counter = CountVectorizer(analyzer=stemmed_analyzer())
        inputs["counts"] = (counter.fit_transform(inputs["texts"]),
                            counter.transform(inputs["questions"]))
    except RuntimeError as exc:                       # snowballstemmer is not installed
        print(f"[info] {exc}: the stemmed BM25 rows are left out", file=sys.stderr)
    if minilm:
        def encode(texts, what):
            return cache.encode(minilm, texts, what) if cache else minilm.encode(texts)
        vectors = encode(inputs["texts"], "documents")
        whole = encode(inputs["questions"], "queries")
        # A long question read whole and sentence by sentence: the mean of the two unit vectors.
        sentences = [split_sentences(q) or [q] for q in inputs["questions"]]
        encoded = iter(encode([s for group in sentences for s in group], "query sentences"))
        by_sentence = unit_rows(np.array([np.mean([next(encoded) for _ in group], axis=0)
                                          for group in sentences]))
        inputs["minilm"] = {"docs": np.asarray(vectors, dtype=np.float64), "whole": whole,
                            "sentences": unit_rows(whole + by_sentence)}
    return inputs


def bm25_from_counts(inputs: dict, k1: float = BM25_K1, b: float = BM25_B):
    """(stemmed BM25 scores, BM25 weights W) from the counted words: no recounting."""
    from ragkit.retrieval import bm25_weights
    doc_counts, query_counts = inputs["counts"]
    weights = bm25_weights(doc_counts, k1, b)
    return (query_counts @ weights.T).toarray(), weights


def bm25_feedback(inputs: dict, weights, first: np.ndarray, b: float, m: int) -> np.ndarray:
    """BM25 scores of Rocchio-moved queries in BM25's term space: unit query counts plus
    b * the mean unit row of W over the m documents `first` ranks highest (b = 0: unmoved)."""
    from rageval.score_matrices import rocchio, unit_rows
    queries = inputs["counts"][1]
    if b:
        queries = rocchio(unit_rows(queries.astype(np.float64)), unit_rows(weights), first,
                          1.0, b, m)
    return (queries @ weights.T).toarray()


def settings(inputs: dict) -> list[tuple]:
    """Every (method, setting, scores) cross-validation may choose from; scores() computes
    that setting's (queries x docs) scores when called."""
    from functools import cache, partial
    from itertools import product

    from rageval.score_matrices import rocchio
    from ragkit.retrieval import hybrid_scores, minmax, reciprocal_rank_fusion
    q, index = inputs["tfidf"]
    plain = (q @ index.T).toarray()
    dense = inputs.get("minilm")
    if dense:
        docs, whole = dense["docs"], dense["whole"]
        cosine = whole @ docs.T

    def rocchio_scores(queries, docs, first, b, m):      # sparse (TF-IDF) or dense (MiniLM)
        return folder_index.dense(rocchio(queries, docs, first, 1.0, b, m) @ docs.T)

    @cache
    def bm25(k1=BM25_K1, b=BM25_B):         # (scores, weights W), computed once per k1 and b
        return bm25_from_counts(inputs, k1, b)

    def bm25_stemmed(k1, b):
        return bm25(k1, b)[0]

    def bm25_rocchio(k1, b, fb, m):
        keyword, weights = bm25(k1, b)
        return bm25_feedback(inputs, weights, keyword, fb, m)

    def bm25_minilm(k1, b, w):
        return hybrid_scores(minmax(bm25(k1, b)[0]), minmax(cosine), w)

    def rrf(k):
        return reciprocal_rank_fusion([bm25()[0], cosine], k)

    # Rocchio's b = 0 is no feedback at all, so it needs only one m.
    feedback = [(b, m) for b in FEEDBACK_BS for m in (FEEDBACK_MS[:1] if b == 0 else FEEDBACK_MS)]
    grid = [("tfidf + rocchio", f"a=1 b={b} m={m}", partial(rocchio_scores, q, index, plain, b, m))
            for b, m in feedback]
    if dense:
        grid += [("minilm + rocchio", f"a=1 b={b} m={m}",
                  partial(rocchio_scores, whole, docs, cosine, b, m)) for b, m in feedback]
    if "counts" not in inputs:
        return grid
    bm25s = list(product(K1S, BS))
    grid += [("bm25 stemmed", f"k1={k1} b={b}", partial(bm25_stemmed, k1, b))
             for k1, b in bm25s]
    grid += [("bm25 stemmed + rocchio", f"k1={k1} b={b} fb={fb} m={m}",
              partial(bm25_rocchio, k1, b, fb, m))
             for k1, b in bm25s for fb in FEEDBACK_BS[1:] for m in FEEDBACK_MS]
    if not dense:
        return grid
    grid += [("w bm25 stemmed + (1-w) minilm", f"k1={k1} b={b} w={w}",
              partial(bm25_minilm, k1, b, w)) for k1, b in bm25s for w in WEIGHTS]
    grid += [("rrf(bm25 stemmed, minilm)", f"k={k}", partial(rrf, k)) for k in RRF_KS]
    return grid + fused_feedback(inputs, bm25, dense)


def fused_feedback(inputs: dict, bm25, dense: dict) -> list[tuple]:
    """The "fused feedback" settings: feedback on both sides (BM25 and MiniLM, the documents
    optionally moved towards their neighbours) from the hybrid's first ranking, fused again."""
    from functools import cache, lru_cache, partial
    from itertools import product

    from rageval.score_matrices import neighbour_smoothed, top_rows, unit_rows
    from ragkit.retrieval import hybrid_scores, minmax
    docs = dense["docs"]

    @cache
    def smoothed(g):
        return neighbour_smoothed(docs, g, NEIGHBOURS) if g else docs

    @cache
    def first(query, g, w0):
        return hybrid_scores(minmax(bm25()[0]), minmax(dense[query] @ smoothed(g).T), w0)

    # The settings are scored in the order listed, so only the last two of these recur.
    @lru_cache(maxsize=2)
    def fed_keyword(query, g, w0, m, fb):
        return minmax(bm25_feedback(inputs, bm25()[1], first(query, g, w0), fb, m))

    @lru_cache(maxsize=2)
    def fed_dense(query, g, w0, m, fb_dense):
        feedback = top_rows(first(query, g, w0), m) @ smoothed(g)
        return minmax(unit_rows(dense[query] + fb_dense * feedback) @ smoothed(g).T)

    def fused(query, g, w0, m, fb, fb_dense, w):
        return hybrid_scores(fed_keyword(query, g, w0, m, fb),
                             fed_dense(query, g, w0, m, fb_dense), w)

    fused_settings = product(["whole", "sentences"], [0, 0.5], [0.3, 0.5], FEEDBACK_MS,
                             [0, 1, 2], [0, 0.25], [0.3, 0.4, 0.5, 0.6])
    return [("fused feedback", f"q={query} g={g} w0={w0} m={m} fb={fb}/{fb_dense} w={w}",
             partial(fused, query, g, w0, m, fb, fb_dense, w))
            for query, g, w0, m, fb, fb_dense, w in fused_settings]


def fixed_methods(inputs: dict):
    """Yield (name, scores) of the methods with no tuned setting (defaults, fixed fusions)."""
    import rag_from_scratch as rag
    from ragkit.retrieval import bm25_matrix, bm25_scores, hybrid_scores, reciprocal_rank_fusion
    q, index = inputs["tfidf"]
    tfidf = (q @ index.T).toarray()
    yield "tfidf", tfidf
    sublinear = rag.Embedder("tfidf")
    sublinear.model.set_params(sublinear_tf=True)    # 1 + log(tf) instead of tf
    index2 = rag.build_index([{"text": t} for t in inputs["texts"]], sublinear)
    yield "tfidf (sublinear tf)", (sublinear.encode(inputs["questions"], sparse=True)
                                   @ index2.T).toarray()
    yield "bm25", bm25_scores(inputs["questions"], *bm25_matrix(inputs["texts"]))
    stemmed = bm25_from_counts(inputs)[0] if "counts" in inputs else None
    if stemmed is not None:
        yield "bm25 (stemmed)", stemmed
    if "minilm" in inputs:
        dense = inputs["minilm"]["whole"] @ inputs["minilm"]["docs"].T
        yield "minilm", dense
        yield "0.5 tfidf + 0.5 minilm", hybrid_scores(tfidf, dense)
        yield "rrf(tfidf, minilm)", reciprocal_rank_fusion([tfidf, dense])
        if stemmed is not None:
            yield "rrf(bm25 stemmed, minilm)", reciprocal_rank_fusion([stemmed, dense])


def peer_methods(inputs: dict):
    """Yield (name, scores) of the same retrieval by widely used libraries, as a reference."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    vectorizer = TfidfVectorizer(stop_words="english", ngram_range=(1, 2))
    matrix = vectorizer.fit_transform(inputs["texts"])
    tfidf = (vectorizer.transform(inputs["questions"]) @ matrix.T).toarray()
    yield "peer: scikit-learn tfidf", tfidf
    try:
        from rank_bm25 import BM25Okapi
    except ImportError:
        print("[info] rank_bm25 is not installed (.venv/bin/pip install rank-bm25): its peer "
              "row is left out", file=sys.stderr)
    else:
        words = lambda text: text.lower().split()
        bm25 = BM25Okapi([words(t) for t in inputs["texts"]])
        yield "peer: rank_bm25", np.array([bm25.get_scores(words(q)) for q in inputs["questions"]])
    if "minilm" in inputs:
        dense = inputs["minilm"]["whole"] @ inputs["minilm"]["docs"].T
        yield "peer: sentence-transformers minilm", dense
        yield "peer: 0.5 tfidf + 0.5 minilm", 0.5 * tfidf + 0.5 * dense


def summary(metrics: np.ndarray, k: int, seconds: float, **extra) -> dict:
    """One row of the results: means of the per-query metrics and nDCG's 95% interval."""
    from ragkit.retrieval import bootstrap_ci
    hit1, recall, rr, ndcg = metrics.mean(axis=0)
    return {"hit@1": hit1, f"recall@{k}": recall, f"mrr@{k}": rr, f"ndcg@{k}": ndcg,
            f"ndcg@{k}_ci": bootstrap_ci(metrics[:, 3]), "seconds": round(seconds, 3),
            "per_query_ndcg": metrics[:, 3].tolist(), **extra}


def evaluate_collection(collection: dict, minilm=None, cache=None, k: int = CUTOFF,
                        folds: int = FOLDS, seed: int = CV_SEED) -> dict:
    """hit@1, recall@k, MRR@k, nDCG@k (with a 95% interval) and seconds of each method: the
    fixed ones, the peers, the "cv: ..." rows and the in-sample best (a curiosity, not a result)."""
    from itertools import chain
    start = time.perf_counter()
    print(f"counting the words of {len(collection['docs']):,} documents (TF-IDF, stemmed BM25)"
          f"{' and encoding them with MiniLM' if minilm else ''} ...", file=sys.stderr, flush=True)
    inputs = score_inputs(collection, minilm, cache)
    print(f"[info] encoded and counted in {time.perf_counter() - start:.1f} s; every row "
          f"shares that, its seconds are the scoring alone", file=sys.stderr)
    score = lambda s: query_metrics(s, inputs["doc_ids"], inputs["relevant"], k)
    results = {}
    print("scoring the fixed methods and the peer libraries ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    for name, s in chain(fixed_methods(inputs), peer_methods(inputs)):
        results[name] = summary(score(s), k, time.perf_counter() - start,
                                kind="peer" if name.startswith("peer") else "fixed")
        start = time.perf_counter()
    per_method, seconds = {}, {}
    grid = settings(inputs)
    for method, setting, scores in support.progress(grid, len(grid),   # on stderr, not the table
                                                    "scoring every setting for cross-validation",
                                                    " settings"):
        start = time.perf_counter()
        per_method.setdefault(method, {})[setting] = score(scores())
        seconds[method] = seconds.get(method, 0.0) + time.perf_counter() - start
    everything = {f"{method}: {setting}": m for method, grid in per_method.items()
                  for setting, m in grid.items()}
    if len(per_method) > 1:                      # the method itself, chosen like a setting
        per_method["best method, chosen in each fold"] = everything
        seconds["best method, chosen in each fold"] = sum(seconds.values())
    for method, grid in per_method.items():
        held_out, chosen = cross_validate(grid, folds, seed)
        results[f"cv: {method}"] = summary(held_out, k, seconds[method], kind="cv",
                                           chosen=chosen, settings=len(grid), folds=folds,
                                           seed=seed)
    best = max(everything, key=lambda label: everything[label][:, 3].mean())
    results["in-sample best (curiosity)"] = summary(everything[best], k, 0.0,
                                                    kind="in-sample", chosen=[best])
    return results


def best_ratio(results: dict, k: int = CUTOFF) -> tuple[str, str, float]:
    """(best cross-validated row, best peer row, their nDCG ratio)."""
    pick = lambda kind: max((name for name, r in results.items() if r["kind"] == kind),
                            key=lambda name: results[name][f"ndcg@{k}"])
    cv, peer = pick("cv"), pick("peer")
    return cv, peer, results[cv][f"ndcg@{k}"] / results[peer][f"ndcg@{k}"]


def print_header(collection: dict) -> None:
    """The collection's counts, its grade reading and its notes, before the table."""
    c = collection["counts"]
    print(f"{c['docs']:,} documents, {c['judged_queries']} judged queries of "
          f"{c['queries']}, {c['pairs']:,} relevance judgements")
    print(f"grades: {collection['grades']} ({GRADE_READINGS[collection['grades']]})")
    for note in collection["notes"]:
        print(f"note: {note}")
    sys.stdout.flush()


def print_collection(results: dict, k: int = CUTOFF) -> None:
    """One aligned line per method, the settings each fold chose, and the best against the peers."""
    from ragkit.retrieval import paired_bootstrap
    width = max(map(len, results)) + 2
    print(f"{'method':<{width}}hit@1  recall@{k}  mrr@{k}  ndcg@{k}  [95% interval]  seconds")
    for name, r in results.items():
        lo, hi = r[f"ndcg@{k}_ci"]
        print(f"{name:<{width}}{r['hit@1']:.3f}  {r[f'recall@{k}']:.3f}      {r[f'mrr@{k}']:.3f}   "
              f"{r[f'ndcg@{k}']:.3f}    [{lo:.3f}, {hi:.3f}]  {r['seconds']:7.2f}")
    cv_rows = {name: r for name, r in results.items() if r["kind"] == "cv"}
    some = next(iter(cv_rows.values()))
    print(f"\ncv rows: {some['folds']}-fold cross-validation over queries "
          f"(seed {some['seed']}); settings chosen by nDCG@{k} on the other folds:")
    for name, r in cv_rows.items():
        print(f"  {name[4:]} ({r['settings']} settings): {' | '.join(r['chosen'])}")
    print(f"in-sample best: {results['in-sample best (curiosity)']['chosen'][0]}: chosen on "
          f"the very queries it is scored on, so not a result")
    cv, peer, x = best_ratio(results, k)
    print(f"best cross-validated ({cv}) / best peer ({peer}): {x:.2f}x")
    d, lo, hi = paired_bootstrap(results[peer]["per_query_ndcg"], results[cv]["per_query_ndcg"])
    verdict = "could be chance" if lo <= 0 <= hi else "holds across resamples"
    print(f"  ndcg@{k}, {cv} minus {peer}: {d:+.3f} [{lo:+.3f}, {hi:+.3f}]  ({verdict})")


def run_collection(path: str, as_json: bool = False, cache_folder=None,
                   minilm=None, grades: str = "auto") -> dict:
    """Load a test collection, score every method, and print a table (or one JSON object)."""
    cache = EmbeddingCache(cache_folder or CACHE_DIR)   # a folder not ours, or unwritable: now
    collection = load_collection(path, grades)
    fold_of_each_query(collection["counts"]["judged_queries"])   # enough queries? say so now
    if not as_json:                                # the header now, the table after the work
        print_header(collection)
    if minilm is None:
        try:                                       # once the flags and files are checked
            minilm = minilm_embedder()
        except RuntimeError as exc:
            print(f"[info] MiniLM could not be loaded ({exc}): keyword methods only",
                  file=sys.stderr)
    results = evaluate_collection(collection, minilm, cache)
    if as_json:
        rounded = lambda v: round(v, 4) if isinstance(v, float) else (
            [rounded(x) for x in v] if isinstance(v, (list, tuple)) else v)
        print(json.dumps({name: {key: rounded(value) for key, value in r.items()
                                 if key != "per_query_ndcg"} for name, r in results.items()}))
    else:
        print_collection(results)
    return results


# ---------------------------------------------------------------------------
# 2. Command line
# ---------------------------------------------------------------------------
def describe(col: dict) -> None:
    """Print the counts, the files read, the fix-ups applied and one example."""
    c = col["counts"]
    print(f"documents       {c['docs']:>6,}   ({col['files']['documents']})")
    print(f"queries         {c['queries']:>6,}   ({col['files']['queries']})")
    print(f"judged queries  {c['judged_queries']:>6,}   ({col['files']['relevance']})")
    print(f"judgement pairs {c['pairs']:>6,}")
    print(f"grades          {col['grades']}: {GRADE_READINGS[col['grades']]}")
    for note in col["notes"]:
        print(f"note: {note}")
    if col["qrels"]:
        qid, grades = next(iter(col["qrels"].items()))
        query = next(q for q in col["queries"] if q["qid"] == qid)
        print(f"\nquery {qid}: {query['text'][:90]}")
        print(f"relevant: {', '.join(list(grades)[:10])}{' ...' if len(grades) > 10 else ''}")


def parse_args(argv=None):
    """Command-line flags: a collection folder, --embed and its --cache folder."""
    p = support.OneLineParser(description="Load a classic IR test collection (SMART format).")
    p.add_argument("path", nargs="?", default=str(DEFAULT_COLLECTION),
                   help="folder with the documents, queries and relevance files "
                        "(default: %(default)s)")
    p.add_argument("--embed", action="store_true",
                   help="encode every document with MiniLM, cached in --cache")
    add_cache(p, "with --embed: folder for the vectors")
    return p.parse_args(argv)


def run(args) -> None:
    """Describe the collection; with --embed, encode its documents through the cache."""
    if args.cache is not None and not args.embed:
        raise ValueError("--cache goes with --embed")
    if args.embed:
        support.refuse_empty({"--cache": args.cache}, "a folder")
        cache = EmbeddingCache(args.cache or CACHE_DIR)     # a folder not ours: refused now
    col = load_collection(args.path)
    describe(col)
    if args.embed:
        embedder = minilm_embedder()
        start = time.perf_counter()
        vectors = cache.encode(embedder, [d["text"] for d in col["docs"]], "documents")
        repeats = f", {cache.repeats} repeats share a vector" if cache.repeats else ""
        print(f"\nMiniLM vectors {vectors.shape} in {time.perf_counter() - start:.2f} s: "
              f"{cache.misses:,} encoded{repeats}, {cache.hits:,} read from "
              f"{cache.path_for(embedder)}")


main = support.main_for(run, parse_args)     # describe a collection; errors are one line


if __name__ == "__main__":
    support.leave(main())
