"""
ragkit/saved_index.py: the index of your own files, saved (--index DIR) and reused.

    chunks, index, embedder, context = index_folder(args)     # --docs FOLDER [--index DIR]

A saved index is rebuilt, with the reason said, when its inputs change: the backend, the model
(its name and weights), the chunk size or the reader; when only files changed, MiniLM
re-embeds just the chunks of those files. Every file is written whole under the folder's lock
(ragkit/storage.py), meta.json last, and read back only after its checksum matches; nothing is
ever unpickled.
"""

import io
import json
import sys
from pathlib import Path

import numpy as np

import rag_from_scratch as rag
from ragkit import documents
from ragkit.embeddings import model_identity, use_threads
from ragkit.plumbing import parse_json
from ragkit.storage import INDEX_FORMAT, claim_folder, folder_lock, sha256_bytes, write_atomic

CHUNKS, META = "chunks.json", "meta.json"
VECTOR_FILES = ("vectors.npy", "vectors.npz")
CONTEXT = "vectors_context.npy"      # MiniLM vectors of "title\ntext" (--context), if asked for
MAX_INDEX_BYTES = 4 << 30            # a saved file larger than this is not read (1M x 384 floats: 1.5 GB)
READER = "markdown-structure-1"   # how files become chunks; a saved index made otherwise is rebuilt
SETTINGS = [("backend", "the backend changed"), ("model", "the model changed"),
            ("chunk_size", "the chunk size changed"), ("reader", "the way files are read changed")]


def fingerprint(docs: list[dict]) -> str:
    """A short hash of every document's id and text: it changes when any file changes."""
    return sha256_bytes("".join(f"{d['doc_id']}\0{d['text']}\0" for d in docs).encode("utf-8"))[:16]


def file_hashes(docs: list[dict]) -> dict:
    """doc_id -> hash of its text, so an update can tell which files changed."""
    return {d["doc_id"]: sha256_bytes(d["text"].encode("utf-8"))[:16] for d in docs}


def vectors_bytes(index) -> tuple[str, bytes]:
    """(file name, bytes) for the vectors: .npz for sparse TF-IDF, .npy for dense; no pickle."""
    buffer = io.BytesIO()
    if not isinstance(index, np.ndarray):             # TF-IDF's sparse matrix
        from scipy import sparse
        sparse.save_npz(buffer, index)
        return "vectors.npz", buffer.getvalue()
    np.save(buffer, np.ascontiguousarray(index), allow_pickle=False)
    return "vectors.npy", buffer.getvalue()


def save_index(folder, index, chunks: list[dict], meta: dict, context=None) -> None:
    """Save vectors, chunks, --context vectors, then meta.json with their hashes: last, so an
    interrupted save is detected on load and rebuilt."""
    folder = claim_folder(folder, "--index")
    name, data = vectors_bytes(index)
    with folder_lock(folder):
        checksums = {name: write_atomic(folder / name, data),
                     CHUNKS: write_atomic(folder / CHUNKS, json.dumps(chunks).encode("utf-8"))}
        if context is not None:
            checksums[CONTEXT] = write_atomic(folder / CONTEXT, vectors_bytes(context)[1])
        full = {"format": INDEX_FORMAT, **meta, "n_chunks": len(chunks), "checksums": checksums}
        write_atomic(folder / META, json.dumps(full, indent=2).encode("utf-8"))


def read_meta(folder: Path):
    """The saved meta.json as a dict with the fields we need, or None if it is not usable."""
    try:
        meta = parse_json((folder / META).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):          # RecursionError: nested too deep
        return None
    ok = (isinstance(meta, dict) and meta.get("format") == INDEX_FORMAT
          and isinstance(meta.get("checksums"), dict) and isinstance(meta.get("n_chunks"), int)
          and set(meta["checksums"]) - {CONTEXT} in ({CHUNKS, v} for v in VECTOR_FILES)
          and all(isinstance(d, str) for d in meta["checksums"].values()))
    return meta if ok else None


def read_checked(path: Path, digest: str) -> bytes | None:
    """The bytes of a plain file of sane size whose SHA-256 is `digest`, else None (a link or a
    FIFO is never opened); read once, so the bytes hashed are the bytes parsed."""
    if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_INDEX_BYTES:
        return None
    data = path.read_bytes()
    return data if sha256_bytes(data) == digest else None


def parse_vectors(name: str, data: bytes):
    """Vectors from saved bytes: sparse (.npz) or dense (.npy); nothing is ever unpickled."""
    if name.endswith(".npz"):
        from scipy import sparse
        return sparse.load_npz(io.BytesIO(data)).tocsr()
    return np.asfortranarray(np.load(io.BytesIO(data), allow_pickle=False))


def load_index(folder, meta: dict):
    """(index, chunks, saved meta, why): why, the reason to rebuild, is None if `meta` matches;
    when only the documents changed, the saved parts come back for reuse."""
    folder = claim_folder(folder, "--index")
    saved = read_meta(folder)
    if saved is None:
        missing = not (folder / META).exists()
        return None, None, None, "no saved index yet" if missing else "meta.json is damaged"
    try:
        with folder_lock(folder):                  # not while another run saves
            raw = {name: read_checked(folder / name, digest) for name, digest in saved["checksums"].items()}
        damaged = next((name for name, data in raw.items() if data is None), None)
        if damaged:
            return None, None, None, f"{damaged} is damaged (an interrupted save?)"
        vectors = next(name for name in raw if name in VECTOR_FILES)
        index = parse_vectors(vectors, raw[vectors])
        chunks = parse_json(raw[CHUNKS].decode("utf-8"))
        saved["context_vectors"] = parse_vectors(CONTEXT, raw[CONTEXT]) if CONTEXT in raw else None
    except (OSError, ValueError, RecursionError):
        return None, None, None, "the saved index could not be read"
    if not (isinstance(chunks, list) and index.shape[0] == len(chunks) == saved["n_chunks"]
            and all(isinstance(c, dict) and isinstance(c.get("text"), str) for c in chunks)
            and (saved["context_vectors"] is None or saved["context_vectors"].shape == index.shape)):
        return None, None, None, "the saved vectors and chunks do not match"
    for key, what in SETTINGS:
        if saved.get(key) != meta.get(key):
            return None, None, None, f"{what} ({saved.get(key)} -> {meta.get(key)})"
    changed = saved.get("fingerprint") != meta["fingerprint"]
    return index, chunks, saved, "the documents changed" if changed else None


def embed_reusing(texts: list[str], embedder, old_texts: list[str], old_vectors):
    """(vectors, embedded, reused): MiniLM vectors of `texts`, reusing the rows of `old_vectors`
    whose text is unchanged (a MiniLM vector depends on its own text: equal to a fresh build)."""
    row_of = {t: i for i, t in enumerate(old_texts)}
    rows = [row_of.get(t) for t in texts]
    keep = [i for i, r in enumerate(rows) if r is not None]
    todo = [i for i, r in enumerate(rows) if r is None]
    vectors = np.empty((len(texts), old_vectors.shape[1]), dtype=np.float32, order="F")
    vectors[keep] = old_vectors[[rows[i] for i in keep]]
    if todo:
        vectors[todo] = embedder.encode([texts[i] for i in todo])
    return vectors, len(todo), len(keep)


def update_index(saved_index, saved_chunks, saved, chunks, embedder, meta):
    """MiniLM vectors of `chunks`, embedding only the chunks of changed or new files."""
    index, embedded, reused = embed_reusing([c["text"] for c in chunks], embedder,
                                            [c["text"] for c in saved_chunks], saved_index)
    old_files, new_files = saved.get("files") or {}, meta["files"]
    changed = sum(old_files.get(f) != h for f, h in new_files.items()) + len(set(old_files) - set(new_files))
    print(f"updated the index: {changed} file(s) changed or removed, {embedded} chunks embedded, "
          f"{reused} reused")
    return index


def context_vectors(chunks, embedder, saved_chunks=None, saved=None):
    """MiniLM vectors of each chunk with its title in front (--context), reusing saved ones."""
    old = (saved or {}).get("context_vectors")
    if old is None or not saved_chunks:
        return rag.build_index([{"text": t} for t in documents.with_context(chunks)], embedder)
    return embed_reusing(documents.with_context(chunks), embedder, documents.with_context(saved_chunks), old)[0]


def index_folder(args):
    """(chunks, index, embedder, --context vectors or None) for a folder, reusing a saved index."""
    docs = documents.load_documents(args.docs, args.exclude)
    embedder = rag.Embedder(args.backend, args.model)
    chunks = documents.document_chunks(docs, args.chunk_size, documents.model_fits(embedder))
    print(f"{len(docs)} files -> {len(chunks)} chunks (about {args.chunk_size} words of prose each, "
          f"at sentence boundaries; code and tables whole while the model reads them whole)")
    documents.print_biggest_file(chunks)
    meta = {"backend": embedder.backend, "model": model_identity(embedder),
            "chunk_size": args.chunk_size, "reader": READER,
            "fingerprint": fingerprint(docs), "files": file_hashes(docs)}
    saved_index, saved_chunks, saved, why = (load_index(args.index, meta) if args.index
                                             else (None, None, None, "no --index"))
    minilm, context = embedder.backend == "minilm", None
    if why is None:
        index, chunks, context = saved_index, saved_chunks, saved["context_vectors"]
        embedder.fit([c["text"] for c in chunks])        # TF-IDF relearns its vocabulary
        print(f"loaded the saved index from {args.index} ({len(chunks)} chunks, not re-embedded)")
    elif saved_index is not None and minilm:   # TF-IDF's words depend on every file: it refits
        index = update_index(saved_index, saved_chunks, saved, chunks, embedder, meta)
    else:
        if args.index:
            print(f"building the index: {why}")
        index = rag.build_index(chunks, embedder)
    if (args.context or args.compare) and minilm and context is None:
        context = context_vectors(chunks, embedder, saved_chunks, saved)
        why = why or "the --context vectors were added"
    if args.index and why is not None:
        save_index(args.index, index, chunks, meta, context)
        print(f"saved the index to {args.index}" + (" (with the --context vectors)" if context is not None else ""))
    print(f"backend={embedder.backend}  index shape={index.shape}")
    if minilm:
        model = embedder.model
        report = documents.truncation([c["text"] for c in chunks], model.tokenizer, model.max_seq_length)
        print(documents.truncation_line(report), file=sys.stderr)
        use_threads(1)              # questions from here: on a busy laptop a second thread waits
    return chunks, index, embedder, context
