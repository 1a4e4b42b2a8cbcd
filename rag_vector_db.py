"""
rag_vector_db.py: the same retrieval in NumPy, FAISS and Chroma, then Chroma on disk or on a server.

    python rag_vector_db.py                                # NumPy, FAISS, Chroma in memory
    python rag_vector_db.py --backend tfidf                # keyword vectors: no model needed
    python rag_vector_db.py --persist kestrelwood_db       # Chroma on disk; a 2nd run reuses it
    chroma run --host 127.0.0.1 --port 8000 --path chroma_server_db   # in another terminal
    python rag_vector_db.py --host 127.0.0.1 --port 8000   # everyone queries one shared server

Offline and free. The chunks and vectors come from rag_from_scratch.py, so every engine
searches exactly the same numbers. FAISS and Chroma are optional (`pip install faiss-cpu
chromadb`): when one is missing the script says which package to install and runs the rest.
"""

from __future__ import annotations

import os
import sys

import numpy as np

import rag_docs
import rag_from_scratch as rag
from rag_cli import OneLineParser, run_cli

# The core's defaults, read from its function signatures (one source of truth).
CHUNK_SIZE = rag.defaults(rag.build_chunks)["chunk_size"]   # the tutorial's 50 words
OVERLAP = rag.defaults(rag.build_chunks)["overlap"]         # and 10 shared
TOP_K = rag.defaults(rag.search)["k"]
BACKEND = rag.defaults(rag.Embedder)["backend"]
MODEL_NAME = rag.defaults(rag.Embedder)["model"]

# ---------------------------------------------------------------------------
# Defaults (the CLI reads them from here)
# ---------------------------------------------------------------------------
QUESTION = "My laptop was stolen at the airport. What should I do?"
COLLECTION = "kestrelwood_policies"   # Chroma collection name
FILTER_DOCS = ["FIN-01", "FIN-02"]    # the metadata filter: search only these documents
FILTER_K = 2                          # results for the filtered query
PORT = 8000                           # `chroma run` listens here unless told otherwise
TIE = 1e-4                            # scores closer than this count as a tie


# ---------------------------------------------------------------------------
# 1. The vectors every engine shares
# ---------------------------------------------------------------------------
def dense(index) -> np.ndarray:
    """FAISS and Chroma take dense float32 rows; TF-IDF indexes arrive as sparse matrices."""
    rows = index.toarray() if hasattr(index, "toarray") else index
    return np.ascontiguousarray(rows, dtype=np.float32)


def index_fingerprint(corpus: list[dict], embedder: rag.Embedder, chunk_size: int,
                      overlap: int) -> dict:
    """What a stored index was built from; a stored copy is usable only if all of it matches."""
    return {
        "backend": embedder.backend,
        "model": embedder.model_name,
        "chunk_size": chunk_size,
        "overlap": overlap,
        "corpus": rag_docs.fingerprint(corpus),     # changes when any document's id or text does
        "space": "cosine",
    }


def same_ranking(ids: list[str], numpy_scores: np.ndarray, chunks: list[dict],
                 best: list[float]) -> bool:
    """True if, rank by rank, each returned chunk has the NumPy score of that rank.

    Comparing scores rather than ids lets two engines order tied chunks differently.
    """
    position = {c["chunk_id"]: i for i, c in enumerate(chunks)}
    return len(ids) == len(best) and all(
        abs(numpy_scores[position[cid]] - s) < TIE for cid, s in zip(ids, best))


# ---------------------------------------------------------------------------
# 2. FAISS: an exact inner-product index
# ---------------------------------------------------------------------------
def faiss_search(vectors: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k (scores, row numbers) from faiss.IndexFlatIP; inner product == cosine on unit rows."""
    try:
        import faiss
    except ImportError:
        raise RuntimeError("faiss is not installed: pip install faiss-cpu") from None
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    scores, rows = index.search(q.reshape(1, -1), k)
    return scores[0], rows[0]


# ---------------------------------------------------------------------------
# 3. Chroma: in memory, on disk, or on a server
# ---------------------------------------------------------------------------
def chroma_client(persist: str | None = None, host: str | None = None, port: int = PORT):
    """An in-memory, on-disk (`persist`) or server (`host`, `port`) Chroma client."""
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")   # no usage reports leave the machine
    try:
        import chromadb
        from chromadb.config import Settings
    except ImportError:
        raise RuntimeError("chromadb is not installed: pip install chromadb") from None
    settings = Settings(anonymized_telemetry=False)
    if host:
        try:                    # the client asks the server for its tenant at once
            return chromadb.HttpClient(host=host, port=port, settings=settings)
        except Exception as exc:
            raise RuntimeError(f"no Chroma server answers at {host}:{port} "
                               f"({type(exc).__name__}): start one with `chroma run --host "
                               f"{host} --port {port} --path chroma_server_db`") from None
    if persist:
        try:
            return chromadb.PersistentClient(path=persist, settings=settings)
        except Exception as exc:          # a file in the way, no permission, a missing parent
            raise RuntimeError(f"cannot keep a Chroma database in {persist} ({exc}): give "
                               f"--persist a folder you can write to") from None
    return chromadb.EphemeralClient(settings=settings)


def mismatch(stored: dict | None, wanted: dict, count: int, expected: int) -> list[str]:
    """Reasons a stored collection cannot answer for this run (empty list: it can)."""
    stored = stored or {}
    reasons = [f"{key} {stored.get(key, 'unknown')}, now {value}"
               for key, value in wanted.items() if stored.get(key) != value]
    if not reasons and count != expected:
        reasons.append(f"{count} chunks stored, now {expected}")
    return reasons


def open_collection(client, name: str, chunks: list[dict], vectors: np.ndarray,
                    fp: dict, fresh: bool = False):
    """Return (collection, notes): reuse a stored collection whose fingerprint matches, else build it.

    fresh=True always starts empty (the in-memory client lives only as long as this process).
    """
    from chromadb.errors import NotFoundError
    notes = []
    try:
        # embedding_function=None: we pass our own vectors, so Chroma must never embed (or download)
        collection = client.get_collection(name, embedding_function=None)
    except NotFoundError:
        pass
    else:
        stored = dict(collection.metadata or {})
        space = (collection.configuration_json.get("hnsw") or {}).get("space")
        if space:                            # trust the index's real metric over a label
            stored["space"] = space
        reasons = [] if fresh else mismatch(stored, fp, collection.count(), len(chunks))
        if not fresh and not reasons:
            return collection, [f"reused {collection.count()} chunks already in collection {name}"]
        client.delete_collection(name)
        if reasons:        # never answer from an index built another way: rebuild it
            notes.append(f"rebuilding collection {name}: it was built with a different "
                         + "; ".join(reasons))
    collection = client.create_collection(
        name, configuration={"hnsw": {"space": "cosine"}},   # Chroma's default is squared L2
        metadata=fp, embedding_function=None)
    collection.add(
        ids=[c["chunk_id"] for c in chunks],
        embeddings=vectors,
        documents=[c["text"] for c in chunks],
        metadatas=[{"doc_id": c["doc_id"], "title": c["title"]} for c in chunks],
    )
    notes.append(f"added {len(chunks)} chunks to collection {name}")
    return collection, notes


def chroma_search(collection, q: np.ndarray, k: int, where: dict | None = None):
    """Top-k (ids, cosine distances) from Chroma; distance = 1 - cosine similarity."""
    res = collection.query(query_embeddings=q.reshape(1, -1), n_results=k, where=where)
    return res["ids"][0], res["distances"][0]


# ---------------------------------------------------------------------------
# 4. Command line
# ---------------------------------------------------------------------------
def where_label(args) -> str:
    """How the Chroma section names the client it used."""
    if args.host:
        return f"server at {args.host}:{args.port}"
    if args.persist:
        return f"persistent client at {args.persist}"
    return "in-memory client"


def run(args) -> None:
    """Search the same vectors with NumPy, FAISS and Chroma, and say whether they agree."""
    chunks = rag.build_chunks(rag.CORPUS, args.chunk_size, args.overlap)
    if not 1 <= args.k <= len(chunks):
        raise ValueError(f"--k must be between 1 and the number of chunks ({len(chunks)}), "
                         f"got {args.k}")
    unknown = sorted(set(args.only) - {d["doc_id"] for d in rag.CORPUS})
    if not args.only or unknown:
        raise ValueError(f"--only needs known document ids, got {unknown}: choose from "
                         f"{', '.join(d['doc_id'] for d in rag.CORPUS)}")
    skipped = {}                             # engine -> why it did not run
    try:                                     # connect first: a missing server fails fast
        client = chroma_client(args.persist, args.host, args.port)
    except RuntimeError as exc:
        if "not installed" not in str(exc):
            raise
        client, skipped["Chroma"] = None, str(exc)

    embedder = rag.Embedder(args.backend, args.model)
    index = rag.build_index(chunks, embedder)
    vectors = dense(index)
    q = embedder.encode([args.question])[0]
    if not np.any(q):
        raise ValueError("no word of the question is in the corpus vocabulary (TF-IDF): "
                         "rephrase it, or use --backend minilm")
    numpy_scores = np.asarray(index @ q).ravel()     # every chunk's cosine, to check the others
    print(f"Q: {args.question}")
    print(f"backend={embedder.backend}  {len(chunks)} chunks  vectors {vectors.shape}")

    print("== NumPy (from scratch) ==")
    results = rag.search(args.question, index, chunks, embedder, k=args.k)
    best = [r["score"] for r in results]
    for r in results:
        print(f"  {r['score']:.3f}  {r['chunk_id']}")
    rankings = {"NumPy": [r["chunk_id"] for r in results]}

    print("== FAISS IndexFlatIP (exact inner product, which is the cosine for unit vectors) ==")
    try:
        scores, rows = faiss_search(vectors, q, args.k)
    except RuntimeError as exc:
        print(f"  skipped: {exc}")
        skipped["FAISS"] = str(exc)
    else:
        for s, i in zip(scores, rows):
            print(f"  {s:.3f}  {chunks[i]['chunk_id']}")
        rankings["FAISS"] = [chunks[i]["chunk_id"] for i in rows]

    print(f"== Chroma ({where_label(args)}, cosine space, our own embeddings) ==")
    if client is None:
        print(f"  skipped: {skipped['Chroma']}")
    else:
        from chromadb.errors import ChromaError
        try:
            fp = index_fingerprint(rag.CORPUS, embedder, args.chunk_size, args.overlap)
            collection, notes = open_collection(client, args.collection, chunks, vectors, fp,
                                                fresh=not (args.persist or args.host))
            for note in notes:
                print(f"  ({note})")
            ids, distances = chroma_search(collection, q, args.k)
            for cid, dist in zip(ids, distances):
                print(f"  distance={dist:.3f}  similarity={1 - dist:.3f}  {cid}")
            rankings["Chroma"] = ids

            print(f"== Chroma with a metadata filter (only {', '.join(args.only)}) ==")
            allowed = sum(c["doc_id"] in args.only for c in chunks)
            ids, _ = chroma_search(collection, q, min(FILTER_K, allowed),
                                   where={"doc_id": {"$in": list(args.only)}})
            print(f"   {ids}")
        except ChromaError as exc:
            raise RuntimeError(f"Chroma failed: {exc}") from None

    differ = [e for e, ids in rankings.items() if not same_ranking(ids, numpy_scores, chunks, best)]
    if differ:
        verdict = f"NO, {' and '.join(differ)} ranked differently"
    elif all(ids == rankings["NumPy"] for ids in rankings.values()):
        verdict = "yes"
    else:
        verdict = "yes (chunks with tied scores may be listed in another order)"
    line = f"Same ranking from {', '.join(rankings)}: {verdict}"
    if skipped:
        line += f"  [{' and '.join(skipped)} skipped]"
    print(line)


def parse_args(argv=None):
    """Command-line flags; the defaults are the block at the top of this file and the core's."""
    p = OneLineParser(description="The same retrieval with NumPy, FAISS and Chroma "
                                      "(in memory, on disk or on a server).")
    p.add_argument("--backend", default=BACKEND, choices=["auto", "minilm", "tfidf"],
                   help="embedding backend (default: %(default)s)")
    p.add_argument("--model", default=MODEL_NAME, help="sentence-transformers model or folder")
    p.add_argument("--question", default=QUESTION, help="the question to search for")
    p.add_argument("--k", type=int, default=TOP_K, help="results per engine")
    p.add_argument("--chunk-size", type=int, default=CHUNK_SIZE, help="words per chunk")
    p.add_argument("--overlap", type=int, default=OVERLAP, help="words shared by neighbours")
    p.add_argument("--only", type=lambda s: [d.strip() for d in s.split(",") if d.strip()],
                   default=FILTER_DOCS, help="doc ids for the filtered query, comma separated "
                                             "(default: %(default)s)")
    p.add_argument("--collection", default=COLLECTION, help="Chroma collection name")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--persist", metavar="DIR", help="keep the Chroma collection in this folder")
    where.add_argument("--host", help="query a Chroma server (`chroma run`) on this host")
    p.add_argument("--port", type=int, default=PORT, help="Chroma server port (with --host)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    """Run the comparison; bad input or a missing server becomes one line on stderr, exit 1."""
    return run_cli(check_and_run, parse_args(argv))


def check_and_run(args) -> None:
    """Reject bad flag values before any slow work, then run the comparison."""
    if not args.question.strip():
        raise ValueError("the question is empty: pass some words to --question")
    rag.chunk_text("", args.chunk_size, args.overlap)           # validates size and overlap
    run(args)


if __name__ == "__main__":
    sys.exit(main())
