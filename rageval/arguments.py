"""
rageval/arguments.py: the flags several scripts share, declared once.

    p = OneLineParser(description="...")
    add_backend(p, default="minilm", auto=False)   # --backend: the lesson's Embedder.BACKENDS
    add_k(p, default=10, help="results per query")   # a whole number from 1 to 100
    add_collection(p, default=None, help="...")     # a SMART test collection folder
    add_cache(p, help="where encoded vectors are kept")
"""

import rag_from_scratch as rag
from ragkit.folder_index import CACHE_DIR
from ragkit.support import bounded

BACKENDS = rag.Embedder.BACKENDS          # "auto", "minilm", "tfidf": the lesson's names


def add_backend(p, default: str, auto: bool = True, help: str = "embedding backend") -> None:
    """--backend, with the lesson's backend names (auto: MiniLM if it loads, else TF-IDF)."""
    choices = BACKENDS if auto else tuple(b for b in BACKENDS if b != "auto")
    p.add_argument("--backend", default=default, choices=choices, help=f"{help} (default: %(default)s)")


def add_k(p, default: int, help: str = "results per query", most: int = 100) -> None:
    """--k, a whole number of results from 1 to `most`."""
    p.add_argument("--k", type=bounded(int, 1, most), default=default, help=f"{help} (default: %(default)s)")


def add_collection(p, default=None, help: str = "a SMART test collection folder") -> None:
    """--collection: a folder of an IR test collection (CISI ships in data/cisi)."""
    p.add_argument("--collection", metavar="PATH", default=default, help=help)


def add_cache(p, help: str = "where encoded vectors are kept") -> None:
    """--cache: the folder of cached document vectors (rageval/embedding_cache.py)."""
    p.add_argument("--cache", metavar="DIR", help=f"{help} (default: {CACHE_DIR})")
