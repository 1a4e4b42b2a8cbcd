"""
ragkit/saved_index.py: an index saved to disk (--index DIR) and read back, trusting nothing.

    save_index("my_index", index, chunks, meta)
    index, chunks, saved, why = load_index("my_index", meta)   # why: None, or why to rebuild

Three files: the vectors (vectors.npy, or vectors.npz for TF-IDF's sparse rows), chunks.json
and meta.json (the settings the index was made with and a hash of every file). load_index says
why an index must be rebuilt: a setting changed (the backend, the model, the chunk size,
--context, the reader), or a file is missing or damaged. ragkit/folder_index.py decides what
to build from that.

Every file is written whole under the folder's lock (ragkit/storage.py), meta.json last, and
read back only when it is a plain file of sane size whose checksum matches, with the shapes,
types and values an index has; nothing is ever unpickled. Anything else means: rebuild.
"""

import io
import json
import math
import zipfile
from pathlib import Path

import numpy as np

from ragkit.json_lines import parse_json
from ragkit.storage import (INDEX_FORMAT, claim_folder, folder_lock, read_plain_file, sha256_bytes,
                            write_atomic)
from ragkit.text import printable

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
        values = vectors.data
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
    folder = claim_folder(folder, "--index")
    saved = read_meta(folder)
    if saved is None:
        missing = not (folder / META).exists()
        return None, None, None, "no saved index yet" if missing else "meta.json is damaged"
    with folder_lock(folder):                      # not while another run saves
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
