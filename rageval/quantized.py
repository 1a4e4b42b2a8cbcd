"""
rageval/quantized.py: search that fits in memory: int8 and binary vectors, rescored exactly.

    python -m rageval.quantized               # CISI: recall@10 and nDCG@10 of each variant
    python -m ragbench.search --sizes 100000 # their speed against the float32 read bound

A million MiniLM vectors are 1,536 MB as float32, and exact search reads all of it per query.
int8 keeps one byte per dimension (384 MB), binary one bit (48 MB): search reads only those
codes, then scores the rescore * k best candidates exactly on the float32 vectors, which at
scale stay on disk: np.save("vectors.npy", vectors) once, then
np.load("vectors.npy", mmap_mode="r") reads just the candidate rows. Offline; the CISI table
reads MiniLM vectors from .rag_cache (encoded once if they are missing).
"""

from __future__ import annotations

from ragkit import support
from rageval.arguments import add_collection


def add_rescore(p, default: list,
                help: str = "quantized rows: rescore the best R x 10, one row per R") -> None:
    """--rescore R [R ...]: how deep the quantized search rescores, each from 1 to 10,000."""
    p.add_argument("--rescore", type=support.bounded(int, 1, 10_000), nargs="+", default=default,
                   help=f"{help} (default: %(default)s)")


# == 1. Indexes and search ==================================================================
def int8_index(vectors):
    """(int8 codes, per-dimension scale): vectors ~ codes * scale. [[.5, -1]] -> [[127, -127]]"""
    import numpy as np
    largest = np.maximum(vectors.max(axis=0), -vectors.min(axis=0))   # calibrated on the corpus
    scale = (np.maximum(largest, 1e-12) / 127).astype(np.float32)     # a dimension always 0: no /0
    return np.rint(vectors / scale).astype(np.int8), scale


def binary_index(vectors):
    """Sign bits, packed 64 to a word (np.packbits, then 8 bytes a uint64) and stored column by
    column, so that Hamming reads each word column in one pass: 384 dimensions -> 6 words.
    [[0.3, -0.2, 0.1, 0.5]] -> bits 1011 -> bytes [0b10110000, 0, 0, 0, 0, 0, 0, 0]."""
    import numpy as np
    signs = np.packbits(np.atleast_2d(vectors) > 0, axis=1)
    signs = np.pad(signs, ((0, 0), (0, -signs.shape[1] % 8)))     # whole words: zero bits added
    return np.asfortranarray(signs.view(np.uint64))


def hamming(words, q_words):
    """Bits that differ from the query in each row, popcount(row XOR query): 0b1100, 0b1010 -> 2."""
    import numpy as np
    distance = np.zeros(len(words), dtype=np.uint16)        # up to 65,535 dimensions
    for column in range(words.shape[1]):        # a word column at a time: no n x words temporary
        distance += np.bitwise_count(words[:, column] ^ q_words[column])   # one CPU instruction
    return distance


def rescored(q, candidates, vectors=None, k=10):
    """The k candidates with the best exact scores q @ vectors[i]; without vectors the first k.
    vectors may be np.load("vectors.npy", mmap_mode="r"): only the candidates' rows are read."""
    import numpy as np

    from rag_from_scratch import top_k
    if vectors is None:
        return candidates[:k]
    in_file_order = np.sort(candidates)         # reads that move forward through the file
    return in_file_order[top_k(np.asarray(vectors[in_file_order], dtype=np.float32) @ q, k)]


def int8_search(q, codes, scale, k=10, rescore=4, vectors=None):
    """Top-k ids by codes @ (q * scale), the dot product with the decoded vectors."""
    import numpy as np

    from rag_from_scratch import top_k
    q_scaled, scores = (q * scale).astype(np.float32), np.empty(len(codes), dtype=np.float32)
    for start in range(0, len(codes), 1024):    # NumPy has no int8 matmul: widen a cached block
        scores[start:start + 1024] = codes[start:start + 1024].astype(np.float32) @ q_scaled
    return rescored(q, top_k(scores, k if vectors is None else rescore * k), vectors, k)


def binary_search(q, words, k=10, rescore=4, vectors=None):
    """Top-k ids by the fewest sign bits that differ from the query's (Hamming distance)."""
    import numpy as np

    from rag_from_scratch import top_k
    distance = hamming(words, binary_index(q)[0]).astype(np.int32)     # signed: -distance
    return rescored(q, top_k(-distance, k if vectors is None else rescore * k), vectors, k)


def variants(vectors, k=10, rescores=(4,)) -> dict:
    """name -> search(q) returning k ids: exact float32, then each quantized index of vectors,
    alone and rescoring the best R x k candidates for each R in rescores."""
    from rag_from_scratch import top_k
    codes, scale = int8_index(vectors)
    words = binary_index(vectors)
    found = {"float32": lambda q: top_k(vectors @ q, k),
             "int8": lambda q: int8_search(q, codes, scale, k)}
    for r in rescores:
        found[f"int8 + rescore x{r}"] = lambda q, r=r: int8_search(q, codes, scale, k, r, vectors)
    found["binary"] = lambda q: binary_search(q, words, k)
    for r in rescores:
        found[f"binary + rescore x{r}"] = lambda q, r=r: binary_search(q, words, k, r, vectors)
    return found


# == 2. What it costs on real judgements: CISI ==============================================
def cisi_quality(collection=None, embedder=None, k=10, rescores=(4,)) -> dict:
    """variant -> recall@k and nDCG@k on CISI's judged queries (MiniLM, whole documents),
    and the share of float32's top k it returns ("exact")."""
    import numpy as np

    import rag_from_scratch as rag
    from rageval.ir_collection import DEFAULT_COLLECTION, load_collection
    from rageval.ir_scores import query_metrics
    from rageval.embedding_cache import EmbeddingCache
    col = load_collection(collection or DEFAULT_COLLECTION)
    judged = [q for q in col["queries"] if q["qid"] in col["qrels"]]
    cache, embedder = EmbeddingCache(), embedder or rag.Embedder("minilm")
    docs = cache.encode(embedder, [d["text"] for d in col["docs"]], "documents")
    queries = cache.encode(embedder, [q["text"] for q in judged], "queries")
    table, exact = {}, None
    for name, search in variants(docs, k, rescores).items():
        found = [search(q) for q in queries]
        exact = exact or found                          # float32 comes first
        scores = np.zeros((len(queries), len(docs)))
        for row, ids in enumerate(found):
            scores[row, ids] = np.arange(k, 0, -1)      # its ranking, as scores
        m = query_metrics(scores, [d["doc_id"] for d in col["docs"]],
                          [col["qrels"][q["qid"]] for q in judged], k).mean(axis=0)
        table[name] = {"recall": float(m[1]), "ndcg": float(m[3]), "exact": float(np.mean(
            [len(set(a) & set(b)) / k for a, b in zip(found, exact)]))}
    return table


def parse_args(argv=None):
    """The collection and the rescoring depth."""
    p = support.OneLineParser(description="Recall@10 and nDCG@10 on CISI: float32, int8, binary.")
    add_collection(p, help="a test collection folder (default: data/cisi)")
    add_rescore(p, [4], "rescore the best R x 10, one row per R")
    return p.parse_args(argv)


def run(args) -> None:
    """Print one line per variant, with what it keeps in memory per million vectors."""
    table = cisi_quality(args.collection, rescores=args.rescore)
    print(f"{'variant':<22} {'recall@10':>9} {'nDCG@10':>8} {'exact@10':>9}   "
          f"MB per million vectors")
    for name, m in table.items():
        mb = {"float32": 1536, "int8": 384, "binary": 48}[name.split()[0]]   # 384 dims
        disk = " (+ 1,536 on disk)" if "rescore" in name else ""
        print(f"{name:<22} {m['recall']:>9.3f} {m['ndcg']:>8.3f} {m['exact']:>9.2f}   {mb:,}{disk}")
    print("exact@10: the share of float32's top 10 returned; rescore xR: the best R x 10 "
          "read again as float32")


main = support.main_for(run, parse_args)     # bad input: one line on stderr, exit status 1


if __name__ == "__main__":
    support.leave(main())
