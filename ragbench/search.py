"""
ragbench/search.py: how fast is exact search, and how close is it to what memory allows?

    python -m ragbench.search                         # N = 10k, 100k, 1M (needs about 4 GB free)
    python -m ragbench.search --sizes 10000 100000    # choose the sizes
    python -m ragbench.search --json                  # the same figures as one JSON object

Exact search reads the whole index for every query, so none beats
bound = index bytes / memory read bandwidth, measured here next to each method. On the same
random unit vectors and queries it times matvec (index @ q alone), core (what search runs:
index @ q on build_index's column-major matrix, then top_k), rowmajor (the same on a row-major
matrix), argsort (the tutorial's first version) and FAISS IndexFlatIP, in ms and as multiples
of the bound. Then rageval/quantized.py's int8 and binary search, with and without exact rescoring,
and FAISS's IndexScalarQuantizer (8 bit) and IndexBinaryFlat: multiples of the same bound,
recall@10 against exact search, memory per million vectors; each rescored at every --rescore
depth. The same rows again on MiniLM vectors of real text at each N (CISI's texts plus noisy
copies, as ragbench/ann.py builds them; its 112 queries). Then, on real text: a sparse
TF-IDF index of 10,000 chunks against the tutorial's dense .toarray() (computed, not
allocated), and MiniLM's chunks per second.
Offline, on the CPU; timings move with other work on the machine: compare ratios in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from pathlib import Path

import numpy as np

import rag_from_scratch as rag
from rageval.ir_collection import DEFAULT_COLLECTION, load_collection
from ragkit import support
from rageval.quantized import add_rescore
from rageval.arguments import add_collection, add_k

# The lesson's defaults, read from its function signatures (one source of truth).
CHUNK_SIZE, OVERLAP = rag.defaults(rag.build_chunks).values()   # the tutorial's 50 words, 10 shared
TOP_K = rag.defaults(rag.search)["k"]
SIZES = [10_000, 100_000, 1_000_000]   # index rows to benchmark
DIM = 384              # all-MiniLM-L6-v2 vector length
REPEATS = 9            # timed queries per method (plus one untimed warm-up); median reported
BANDWIDTH_MB = 512     # buffer for the read-bandwidth test: far bigger than any CPU cache
TFIDF_CHUNKS = 10_000  # chunks in the TF-IDF memory test
MINILM_CHUNKS = 256    # chunks in the MiniLM throughput test (0 skips it)
SEED = 0               # random vectors and queries are the same on every run
MB = 1e6               # decimal megabytes, as disk and memory makers count
RECALL_K = 10          # quantized rows: recall@10 against exact search, as bench_ann measures
RESCORES = [4, 40, 400, 1000, 4000]   # ... rescoring reads the best R x RECALL_K candidates' floats


# == 1. Data and timing =====================================================================
def random_unit_vectors(n: int, dim: int = DIM, seed: int = SEED) -> np.ndarray:
    """n random float32 rows of length 1: Gaussian directions are uniform on the sphere."""
    vectors = np.random.default_rng(seed).standard_normal((n, dim), dtype=np.float32)
    for start in range(0, n, 100_000):           # in blocks: no second full-size temporary
        block = vectors[start:start + 100_000]
        block /= np.linalg.norm(block, axis=1, keepdims=True)
    return vectors


def query_vectors(repeats: int, dim: int = DIM, seed: int = SEED) -> np.ndarray:
    """The warm-up query plus `repeats` timed ones, the same for every method and size."""
    return random_unit_vectors(repeats + 1, dim, seed + 1)


def read_bandwidth(buffer: np.ndarray, repeats: int = REPEATS) -> dict:
    """Memory read speed in GB/s: the best of two kernels that read the buffer once."""
    kernels = {"np.dot(buffer, buffer)": lambda _: np.dot(buffer, buffer),
               "buffer.sum()": lambda _: buffer.sum()}
    best = {name: buffer.nbytes / np.median(timed(kernel, range(repeats + 1))[0]) / 1e9
            for name, kernel in kernels.items()}
    kernel = max(best, key=best.get)
    return {"gb_per_s": best[kernel], "kernel": kernel}


def thread_counts() -> dict:
    """CPUs, how busy they already are, and how many threads BLAS and FAISS may use."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None    # not on Windows
    from threadpoolctl import threadpool_info  # installed with scikit-learn
    counts = {"cpus": os.cpu_count(), "load_before": load, "blas": max(
        (p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"), default=None)}
    try:
        import faiss
        counts["faiss"] = faiss.omp_get_max_threads()
    except ImportError:
        counts["faiss"] = None
    return counts


def timed(function, inputs) -> tuple[list[float], list]:
    """Seconds of each call function(x) after the first (a warm-up: wakes threads, fills
    caches), and what the calls returned."""
    function(inputs[0])
    seconds, outputs = [], []
    for x in inputs[1:]:
        start = time.perf_counter()
        outputs.append(function(x))
        seconds.append(time.perf_counter() - start)
    return seconds, outputs


# == 2. Exact search at N = 10k, 100k, 1M ===================================================
def search_methods(index: np.ndarray, k: int) -> tuple[dict, str | None]:
    """name -> function(q) returning the k best ids (matvec: the scores); and why no FAISS."""
    # Same numbers, stored column by column as build_index does: `@` then runs BLAS's
    # faster kernel for a tall, thin matrix.
    by_column = np.asfortranarray(index)
    methods = {
        "matvec": lambda q: by_column @ q,
        "core": lambda q: rag.top_k(by_column @ q, k),
        "rowmajor": lambda q: rag.top_k(index @ q, k),
        "argsort": lambda q: np.argsort(-(index @ q))[:k],
    }
    try:
        import faiss
    except ImportError:
        return methods, "faiss-cpu is not installed (.venv/bin/pip install faiss-cpu)"
    flat = faiss.IndexFlatIP(index.shape[1])     # exact inner product == cosine on unit rows
    flat.add(index)
    methods["faiss"] = lambda q: flat.search(q[None, :], k)[1][0]
    return methods, None


def bench_size(index: np.ndarray, queries: np.ndarray, k: int, buffer: np.ndarray) -> dict:
    """Time every method on one index of random unit vectors, with the same queries."""
    (n, dim), repeats = index.shape, len(queries) - 1          # the first query is a warm-up
    methods, no_faiss = search_methods(index, k)
    seconds, ids, bandwidths = {}, {}, []
    # One method at a time: FAISS's OpenMP threads and NumPy's BLAS threads each spin for
    # a while after a call, so alternating them per query would time their fight for cores.
    for name, method in methods.items():
        # The bandwidth is measured next to every method: on a shared machine it changes.
        bandwidths.append(read_bandwidth(buffer, repeats))
        seconds[name], found = timed(method, queries)
        if name != "matvec":
            ids[name] = [np.asarray(out).tolist() for out in found]
    measured = [b["gb_per_s"] for b in bandwidths]
    read_gb_per_s = float(np.median(measured))
    bound_ms = index.nbytes / (read_gb_per_s * 1e9) * 1e3
    result = {"n": n, "dim": dim, "k": k, "index_mb": index.nbytes / MB,
              "read_gb_per_s": read_gb_per_s, "read_gb_per_s_each": measured,
              "read_kernel": max(bandwidths, key=lambda b: b["gb_per_s"])["kernel"],
              "bound_ms": bound_ms}
    for name, times in seconds.items():
        result[f"{name}_ms"] = float(np.median(times)) * 1e3
        result[f"{name}_x_bound"] = result[f"{name}_ms"] / bound_ms
        result[f"{name}_min_ms"] = min(times) * 1e3      # far below the median: a busy machine
    result["same_ids_argsort"] = ids["core"] == ids["argsort"]
    result["same_ids_faiss"] = ids["core"] == ids["faiss"] if "faiss" in ids else None
    result["same_ids_rowmajor"] = ids["core"] == ids["rowmajor"]
    result["ids_last_query"] = {name: found[-1] for name, found in ids.items()}
    if no_faiss:
        result["faiss_skipped"] = no_faiss
    return result


def quantized_methods(index: np.ndarray, k: int = RECALL_K, rescores=RESCORES) -> dict:
    """name -> (search(q) giving k ids, bytes per vector == MB per million): rageval/quantized.py's
    variants, then FAISS's scalar-quantizer and binary flat indexes, rescored the same way."""
    from rageval import quantized as rq
    dim = index.shape[1]
    size = {"float32": 4 * dim, "int8": dim, "binary": -(-dim // 8)}
    methods = {name: (search, size[name.split()[0]])
               for name, search in rq.variants(index, k, rescores).items()}
    try:
        import faiss
    except ImportError:
        return methods
    sq8 = faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
    sq8.train(index)                    # per-dimension ranges, like int8_index's scale
    sq8.add(index)
    bits = faiss.IndexBinaryFlat(dim)
    bits.add(np.packbits(index > 0, axis=1))            # FAISS takes the sign bits as bytes
    for name, peer, encode in [("faiss SQ8", sq8, lambda x: x),
                               ("faiss binary", bits, lambda x: np.packbits(x > 0, axis=1))]:
        def ids(q, n, peer=peer, encode=encode):
            return peer.search(encode(q[None, :]), min(n, len(index)))[1][0]
        methods[name] = (lambda q, ids=ids: ids(q, k), peer.code_size)
        for r in rescores:
            methods[f"{name} + rescore x{r}"] = (
                lambda q, ids=ids, r=r: rq.rescored(q, ids(q, r * k), index, k), peer.code_size)
    return methods


def minilm_vectors(collection) -> tuple[np.ndarray, np.ndarray]:
    """MiniLM vectors of CISI's distinct texts and of its queries, as ragbench/ann.py reads
    them (encoded once, then read from .rag_cache)."""
    from ragbench.ann import real_texts
    from rageval.embedding_cache import EmbeddingCache
    from rageval.score_matrices import unit_rows
    col = load_collection(collection)
    cache, embedder = EmbeddingCache(), rag.Embedder("minilm")
    queries = [q["text"] for q in col["queries"]]
    return (unit_rows(cache.encode(embedder, real_texts(col["docs"]))),
            unit_rows(cache.encode(embedder, queries)))


def bench_quantized(index: np.ndarray, queries: np.ndarray, bound_ms: float,
                    k: int = RECALL_K, rescores=RESCORES) -> dict:
    """name -> ms, multiple of the float32 read bound, recall@k against exact, MB per million."""
    rows, exact = {}, None
    for name, (search, size) in quantized_methods(index, k, rescores).items():
        seconds, found = timed(search, queries)
        exact = exact or found                          # float32 comes first
        ms = float(np.median(seconds)) * 1e3
        rows[name] = {"ms": ms, "x_bound": ms / bound_ms, "mb_per_million": size,
                      "recall": float(np.mean([len(set(f) & set(e)) / k
                                               for f, e in zip(found, exact)]))}
    return rows


# == 3. TF-IDF at scale and MiniLM throughput, on real text =================================
def synthetic_texts(n: int, words: int = CHUNK_SIZE, vocabulary: int = 30_000,
                    seed: int = SEED) -> list[str]:
    """n made-up texts whose word frequencies fall off like real text's (Zipf's law)."""
    rng = np.random.default_rng(seed)
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "te", "vo", "zi", "pa", "do", "fe"]
    lexicon = ["".join(rng.choice(syllables, size=rng.integers(2, 5))) for _ in range(vocabulary)]
    weights = 1.0 / np.arange(1, vocabulary + 1) ** 1.1      # the r-th word is ~1/r as common
    picks = rng.choice(vocabulary, size=(n, words), p=weights / weights.sum())
    return [" ".join(lexicon[i] for i in row) for row in picks]


def text_chunks(n: int, collection=None) -> tuple[list[dict], str, list[str]]:
    """n chunks of CHUNK_SIZE words spread over a collection (more overlap if it is too
    small), its queries, and where they came from; made-up text if there is no collection."""
    if collection is None:
        texts = synthetic_texts(n)
        chunks = [{"chunk_id": f"S{i}", "doc_id": f"S{i}", "title": "", "text": t}
                  for i, t in enumerate(texts)]
        return chunks, "synthetic Zipf text (no collection found)", texts[:REPEATS]
    col = load_collection(collection)
    for overlap in range(OVERLAP, CHUNK_SIZE, 10):   # 10, 20, 30, 40 words of overlap
        chunks = rag.build_chunks(col["docs"], CHUNK_SIZE, overlap)
        if len(chunks) >= n:
            break
    source = (f"{Path(collection).name} documents, {CHUNK_SIZE}-word chunks, "
              f"overlap {overlap}")
    keep = np.linspace(0, len(chunks) - 1, min(n, len(chunks))).round().astype(int)
    return [chunks[i] for i in keep], source, [q["text"] for q in col["queries"]]


def bench_tfidf(chunks: list[dict], questions: list[str], k: int = TOP_K,
                repeats: int = REPEATS) -> dict:
    """Memory of the sparse TF-IDF index next to its dense size, and its search latency."""
    embedder = rag.Embedder("tfidf")
    start = time.perf_counter()
    index = rag.build_index(chunks, embedder)              # SciPy CSR: only the non-zeros
    build_s = time.perf_counter() - start
    rows, terms = index.shape
    seconds, _ = timed(lambda q: rag.search(q, index, chunks, embedder, k=k),
                       (questions * (repeats + 1))[:repeats + 1])
    return {
        "chunks": rows, "terms": terms, "nonzeros": int(index.nnz),
        "sparse_mb": (index.data.nbytes + index.indices.nbytes + index.indptr.nbytes) / MB,
        "dense_float32_mb": rows * terms * 4 / MB,         # Embedder.encode(sparse=False)
        "dense_float64_mb": rows * terms * 8 / MB,         # the tutorial's .toarray()
        "build_s": build_s, "search_ms": float(np.median(seconds)) * 1e3,
    }


def bench_minilm(texts: list[str], embedder=None) -> dict:
    """Chunks per second MiniLM encodes (texts it has not seen, so none come from its cache):
    the kit's CachedEmbedder, which counts what it really encodes."""
    from ragkit.folder_index import CachedEmbedder
    load_s = 0.0
    if embedder is None:
        start = time.perf_counter()
        embedder = CachedEmbedder("minilm")
        load_s = time.perf_counter() - start
    import torch
    before = embedder.texts_encoded
    start = time.perf_counter()
    embedder.encode(texts)
    seconds = time.perf_counter() - start
    return {"chunks": embedder.texts_encoded - before, "seconds": seconds,
            "chunks_per_s": (embedder.texts_encoded - before) / seconds,
            "model_load_s": load_s, "torch_threads": torch.get_num_threads()}


# == 4. Report =============================================================================
def print_report(report: dict) -> None:
    """Aligned tables: milliseconds and multiples of the memory bound."""
    threads, runs = report["threads"], report["search"]
    if runs:
        first = runs[0]
        print(f"== Exact search: N random unit vectors, {first['dim']} dims float32, "
              f"k={first['k']}, median of {report['repeats']} queries ==")
        print(f"bound = index bytes / read bandwidth (GB/s: {first['read_kernel']} over "
              f"{report['buffer_mb']} MB, next to each method)")
        load = threads["load_before"]
        print(f"threads: BLAS {threads['blas']}, FAISS {threads['faiss']}; {threads['cpus']} CPUs"
              + (f", load average {load:.2f} before the run" if load is not None else ""))
        names = [m for m in ("matvec", "core", "rowmajor", "argsort", "faiss") if f"{m}_ms" in first]
        print(f"{'N':>10} {'index MB':>9} {'GB/s':>6} {'bound ms':>9}"
              + "".join(f"{name + ' ms':>12} {'x bound':>8}" for name in names) + "   same ids")
        for r in runs:
            cells = "".join(f"{r[f'{m}_ms']:>12.2f} {r[f'{m}_x_bound']:>7.2f}x" for m in names)
            same = r["same_ids_argsort"] and False not in (r["same_ids_faiss"],
                                                           r["same_ids_rowmajor"])
            print(f"{r['n']:>10,} {r['index_mb']:>9.1f} {r['read_gb_per_s']:>6.1f} "
                  f"{r['bound_ms']:>9.2f}{cells}   {'yes' if same else 'NO'}")
            if "faiss_skipped" in r:
                print(f"  (FAISS skipped: {r['faiss_skipped']})")
        # A BLAS thread that waits for a busy CPU can double a matvec without touching the
        # single-threaded bandwidth test, so the load before the run is checked too.
        if any(r[f"{m}_ms"] > 1.5 * r[f"{m}_min_ms"] for r in runs for m in names) or any(
                max(r["read_gb_per_s_each"]) > 1.25 * min(r["read_gb_per_s_each"]) for r in runs
                ) or (load or 0) > threads["cpus"] / 2:
            print("note: timings or bandwidth moved a lot during the run, so other programs were "
                  "competing for the CPU or memory; rerun on an idle machine for steadier figures")
        for r in runs:
            for key, what in (("quantized", "random unit vectors"),
                              ("quantized_minilm", "MiniLM vectors (CISI + noisy copies)")):
                if key not in r:
                    continue
                print(f"\n== Quantized search, N={r['n']:,} {what}: recall@{RECALL_K} against "
                      f"exact float32; rescore xR: the best R x {RECALL_K} re-read as float32 ==")
                print(f"{'method':<28}{'ms':>9} {'x bound':>8} {'recall':>7}   "
                      f"MB per million vectors")
                for name, q in r[key].items():
                    disk = f" (+ {4 * r['dim']:,} on disk)" if "rescore" in name else ""
                    print(f"{name:<28}{q['ms']:>9.2f} {q['x_bound']:>7.2f}x {q['recall']:>7.2f}   "
                          f"{q['mb_per_million']:,}{disk}")
    t = report.get("tfidf")
    if t:
        print(f"\n== TF-IDF at scale: {t['chunks']:,} chunks ({report['text_source']}) ==")
        print(f"{t['terms']:,} terms (words and word pairs), {t['nonzeros']:,} non-zero weights")
        print(f"  sparse CSR index  {t['sparse_mb']:>10,.1f} MB   what build_index keeps")
        print(f"  dense float32     {t['dense_float32_mb']:>10,.1f} MB   encode(sparse=False)")
        print(f"  dense float64     {t['dense_float64_mb']:>10,.1f} MB   the tutorial's .toarray()")
        print(f"  build {t['build_s']:.2f} s; search {t['search_ms']:.2f} ms per question")
    m = report.get("minilm")
    if m:
        print(f"\n== MiniLM encoding: {m['chunks']:,} chunks of up to {CHUNK_SIZE} words ==")
        print(f"  {m['chunks_per_s']:.1f} chunks/s ({m['seconds']:.2f} s; model load "
              f"{m['model_load_s']:.2f} s; torch threads {m['torch_threads']})")
    elif report.get("minilm_skipped"):
        print(f"\n(MiniLM skipped: {report['minilm_skipped']})")


# == 5. Command line ========================================================================
def parse_args(argv=None):
    """Command-line flags; defaults come from the block at the top of this file."""
    p = support.OneLineParser(description="Exact-search latency against the memory bound, "
                                          "TF-IDF memory at scale, MiniLM throughput.")
    whole = lambda low, high: support.bounded(int, low, high)       # every one has a range
    p.add_argument("--sizes", type=whole(1, 100_000_000), nargs="*", default=SIZES,
                   help="index sizes N (default: %(default)s); none skips the search test")
    add_k(p, TOP_K)
    p.add_argument("--repeats", type=whole(1, 1000), default=REPEATS, help="timed queries per method")
    p.add_argument("--bandwidth-mb", type=whole(1, 65_536), default=BANDWIDTH_MB,
                   help="buffer size for the memory-bandwidth test")
    p.add_argument("--tfidf-chunks", type=whole(0, 10_000_000), default=TFIDF_CHUNKS,
                   help="0 skips the TF-IDF test")
    p.add_argument("--minilm-chunks", type=whole(0, 1_000_000), default=MINILM_CHUNKS, help="0 skips MiniLM")
    add_collection(p, help=f"text for the TF-IDF, MiniLM and real-vector tests (default: "
                           f"{DEFAULT_COLLECTION} if present, else made-up text)")
    add_rescore(p, RESCORES)
    p.add_argument("--real-vectors", action=argparse.BooleanOptionalAction, default=True,
                   help="quantized rows on MiniLM vectors of CISI too (default: on; the first "
                        "run encodes 9,847 texts)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    return p.parse_args(argv)


def available_memory() -> int | None:
    """Bytes of memory the system can still give us (Linux), or None where we cannot tell."""
    try:
        found = re.search(r"MemAvailable:\s+(\d+)", Path("/proc/meminfo").read_text())
    except OSError:
        return None
    return int(found.group(1)) * 1024 if found else None


def check_args(args) -> None:
    """Reject bad values before minutes of work start."""
    for n in args.sizes:
        if n <= args.k:
            raise ValueError(f"--sizes: N={n} must be larger than k={args.k}")
    free = available_memory()
    copies = 3                                 # row-major index, column-major copy, FAISS's copy
    need = max(args.sizes, default=0) * DIM * 4 * copies + args.bandwidth_mb * MB
    if free and need > free:
        raise ValueError(f"N={max(args.sizes):,} needs about {need / 1e9:.1f} GB of memory and "
                         f"{free / 1e9:.1f} GB is free: pass smaller --sizes")


def measure(args) -> dict:
    """Run the chosen benchmarks and return every figure in one dict."""
    report = {"repeats": args.repeats, "buffer_mb": args.bandwidth_mb,
              "threads": thread_counts(), "search": []}
    if args.sizes:       # far bigger than the CPU caches, every page already touched
        buffer = np.ones(int(args.bandwidth_mb * MB) // 4, dtype=np.float32)
        for n in args.sizes:
            index, queries = random_unit_vectors(n), query_vectors(args.repeats)
            run = bench_size(index, queries, args.k, buffer)
            run["quantized"] = bench_quantized(index, queries, run["bound_ms"],
                                               rescores=args.rescore)
            report["search"].append(run)
        del buffer, index
        if args.real_vectors:
            from ragbench.ann import NOISE, grow
            from ragbench.ann import SEED as ANN_SEED
            real, queries = minilm_vectors(args.collection or DEFAULT_COLLECTION)
            for run in report["search"]:
                vectors = grow(real, run["n"], NOISE, np.random.default_rng(ANN_SEED))
                run["quantized_minilm"] = bench_quantized(vectors, queries, run["bound_ms"],
                                                          rescores=args.rescore)
    wanted = max(args.tfidf_chunks, args.minilm_chunks)
    if wanted:
        collection = args.collection or (DEFAULT_COLLECTION if DEFAULT_COLLECTION.is_dir() else None)
        chunks, report["text_source"], questions = text_chunks(wanted, collection)
        if args.tfidf_chunks:
            report["tfidf"] = bench_tfidf(chunks[:args.tfidf_chunks], questions, args.k,
                                          args.repeats)
        if args.minilm_chunks:
            try:
                report["minilm"] = bench_minilm([c["text"] for c in chunks[:args.minilm_chunks]])
            except RuntimeError as exc:
                report["minilm_skipped"] = str(exc)
    return report


def run(args) -> None:
    """Check the flags, measure, print tables or JSON."""
    check_args(args)
    try:
        report = measure(args)
    except MemoryError:
        raise RuntimeError("out of memory: try smaller --sizes") from None
    print(json.dumps(report, indent=1)) if args.json else print_report(report)


main = support.main_for(run, parse_args)     # bad input: one line on stderr, exit status 1


if __name__ == "__main__":
    support.leave(main())
