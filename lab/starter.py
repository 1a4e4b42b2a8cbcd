"""
starter.py: your own RAG retriever. Fill in the five TODOs, then grade yourself:

    python lab/check.py            # one line per function: PASS, or FAIL with a hint
    python -m pytest lab           # the same checks, as pytest tests

Work in order (1 to 5): search needs your cosine idea, evaluate_retrieval calls your search.
Names and signatures match rag_from_scratch.py, so anything written for the lesson
runs against this file too. The corpus, the question set, the Embedder and build_index are
given (imported from the lesson); the grader needs only NumPy and scikit-learn.
"""

import sys
from pathlib import Path

import numpy as np  # noqa: F401  (you will want it)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # find rag_from_scratch.py

# Given: data, defaults and the parts of the pipeline you do not write today.
from rag_from_scratch import (  # noqa: E402,F401
    CORPUS, EVAL_SET, SYSTEM_PROMPT, Embedder, build_chunks, build_index, top_k,
)


# ---------- TODO 1: chunking -----------------------------------------------
def chunk_text(text: str, chunk_size: int = 50, overlap: int = 10) -> list[str]:
    """Split text into windows of `chunk_size` words; neighbours share `overlap` words.

    chunk_text("a b c d e f g", chunk_size=4, overlap=1) -> ["a b c d", "d e f g"]
    Words are separated by any whitespace and re-joined with single spaces. Stop after the
    first window that reaches the last word. Empty text gives []. Raise ValueError if
    chunk_size < 1, or if overlap is negative or not smaller than chunk_size.
    """
    raise NotImplementedError("TODO 1: write chunk_text")


# ---------- TODO 2: cosine similarity --------------------------------------
def cosine_similarity(a, b) -> float:
    """cos(theta) = (a . b) / (||a|| * ||b||), returned as a Python float.

    cosine_similarity([1, 2, 2], [2, 1, 2]) -> 0.888... (= 8/9). Plain lists must work too.
    """
    raise NotImplementedError("TODO 2: write cosine_similarity")


# ---------- TODO 3: search -------------------------------------------------
def search(query: str, index, chunks: list[dict], embedder: "Embedder",
           k: int = 3) -> list[dict]:
    """Return the k chunks most similar to the query, best first, each with its score.

    index row i is the unit-length vector of chunks[i] (a NumPy array, or a SciPy sparse
    matrix for TF-IDF: both support `index @ vector`). embedder.encode(list_of_texts)
    returns one unit-length row per text. Each result is a new dict: the chunk's fields
    plus "score" (a float); do not modify the dicts in `chunks`.
    Raise ValueError for an empty query, or k outside 1..len(chunks).
    """
    raise NotImplementedError("TODO 3: write search")


# ---------- TODO 4: prompt assembly ----------------------------------------
def build_prompt(question: str, retrieved: list[dict]) -> str:
    """Put the retrieved chunks, each labelled with its source id, and the question in one message.

    With two retrieved chunks the result reads, line by line:
        Context:
        [HR-01] Annual leave policy
        <text of the first chunk>
        (empty line)
        [FIN-02] Business travel policy
        <text of the second chunk>
        (empty line)
        Question: <question>
        Answer:
    """
    raise NotImplementedError("TODO 4: write build_prompt")


# ---------- TODO 5: retrieval evaluation -----------------------------------
def evaluate_retrieval(eval_set: list[dict], index, chunks: list[dict], embedder: "Embedder",
                       k: int = 3, verbose: bool = False) -> dict:
    """Hit rate@k, recall@k and MRR averaged over the question set.

    Each item of eval_set is {"question": str, "relevant": set of doc_ids}. For one question,
    using the doc_id of each chunk your search returns (top k, best first):
      hit:    1 if any relevant doc is among them, else 0
      recall: the share of the relevant docs found among them
      rr:     1 / rank of the first relevant result, 0 if none (its average is the MRR)
    Return {"k": k, "hit_rate": ..., "recall": ..., "mrr": ...} with float averages.
    verbose=True prints one line per question, starting with HIT or MISS:
      "  MISS want=['HR-04'] got=[IT-02]  How much time off do new fathers get?"
    """
    raise NotImplementedError("TODO 5: write evaluate_retrieval")
