"""
rageval/embedding_cache.py: vectors kept on disk for the evaluation and the benchmarks, so a
rerun encodes only the texts it has not seen (the kit's command line never uses it).

    cache = EmbeddingCache(".rag_cache")
    vectors = cache.encode(embedder, texts)      # run it twice: the second reads from disk

Cache files are `<folder>/<model>-<hash>.npz`, holding `keys` (the SHA-256 of each text, so
equal texts share one vector) and `vectors` (float32 rows); the hash is of the model's identity
(ragkit/folder_index.py's model_identity: replaced weights show). The folder carries the kit's
mark (ragkit/support.py): a folder holding anything else is refused, never written to. Files
are written whole or not at all, under the folder's lock; a damaged file (cut short, a flipped
byte) is ignored with one line and rebuilt. Pickle is never used.
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

import numpy as np

from ragkit.folder_index import CACHE_DIR, ENCODE_PIECE, encode_in_pieces, model_identity
from ragkit.support import claim_folder, folder_lock, one_line, usable_folder, write_atomic


# == Vectors kept on disk ===================================================================
def text_key(text: str) -> str:
    """The cache key of one text: its SHA-256, so equal texts share one vector."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EmbeddingCache:
    """Vectors on disk keyed by model and text; hits, misses and repeats count the work done."""

    def __init__(self, folder=None):
        self.folder = usable_folder(folder or CACHE_DIR, "--cache")   # now, before any slow work
        self.hits = 0        # texts read from disk
        self.misses = 0      # distinct texts that had to go through the model
        self.repeats = 0     # new texts equal to another new text: encoded once for both

    def path_for(self, embedder) -> Path:
        """The cache file of this embedder's model."""
        readable = re.sub(r"[^A-Za-z0-9]+", "-", embedder.model_name).strip("-")[-60:]
        identity = text_key(model_identity(embedder.backend, embedder.model_name))
        return self.folder / f"{readable}-{identity[:8]}.npz"

    def encode(self, embedder, texts: list[str], what: str = "texts") -> np.ndarray:
        """Vectors of `texts` in order, encoding with `embedder` only those not on disk."""
        if embedder.backend == "tfidf":
            raise ValueError("TF-IDF vectors depend on the corpus the vectorizer was fitted on, "
                             "so they are not cached: build them with build_index instead")
        path = self.path_for(embedder)
        keys, vectors = self._load(path)
        stored, wanted = set(keys), [text_key(t) for t in texts]
        new = {key: text for key, text in zip(wanted, texts) if key not in stored}
        needed = sum(key in new for key in wanted)
        self.misses += len(new)
        self.repeats += needed - len(new)
        self.hits += len(texts) - needed
        if new:
            fresh = self._encode_new(embedder, list(new.values()), what, len(texts) - needed)
            if vectors is not None and vectors.shape[1] != fresh.shape[1]:
                keys, vectors = keys[:0], None         # the model changed size: start over
            keys = np.concatenate([keys, np.array(list(new), dtype="<U64")])
            vectors = fresh if vectors is None else np.concatenate([vectors, fresh])
            self._save(path, keys, vectors)
        if vectors is None:                            # no texts, and no file yet
            return np.zeros((0, 0), dtype=np.float32)
        row = {key: i for i, key in enumerate(keys)}
        return vectors[[row[key] for key in wanted]]

    @staticmethod
    def _encode_new(embedder, texts: list[str], what: str, cached: int) -> np.ndarray:
        """Encode in pieces of ENCODE_PIECE, saying first how many; a bar shows if it is slow."""
        if len(texts) > ENCODE_PIECE:
            print(f"encoding {len(texts):,} {what} with {embedder.model_name.split('/')[-1]} "
                  f"({cached:,} read from the cache) ...", file=sys.stderr, flush=True)
        return encode_in_pieces(embedder, texts, what)

    def _load(self, path: Path):
        """(keys, vectors) from disk, or empty if there is no readable cache file yet."""
        empty = np.zeros(0, dtype="<U64"), None
        if not path.is_file():
            return empty
        try:
            with np.load(path, allow_pickle=False) as saved:
                keys, vectors = saved["keys"], saved["vectors"]
            if (keys.ndim != 1 or keys.dtype.kind != "U" or vectors.ndim != 2
                    or vectors.dtype.kind != "f" or len(keys) != len(vectors)):
                raise ValueError("its keys and vectors do not fit together")
            return keys, vectors
        except Exception as exc:   # cut short, a flipped byte, not a zip: whatever it is, rebuild
            print(f"[info] ignoring unreadable cache {path} ({one_line(exc)}); rebuilding it",
                  file=sys.stderr)
            return empty

    def _save(self, path: Path, keys: np.ndarray, vectors: np.ndarray) -> None:
        """Claim the folder (mark first), then write the file whole under the folder's lock."""
        import io
        buffer = io.BytesIO()
        np.savez(buffer, keys=keys, vectors=vectors, allow_pickle=False)
        with folder_lock(claim_folder(self.folder, "--cache")):
            write_atomic(path, buffer.getvalue())
