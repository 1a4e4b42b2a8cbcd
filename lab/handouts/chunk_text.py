"""Handout for TODO 1: a finished chunk_text, for a learner who is short of time.

Replace the whole `def chunk_text` in lab/starter.py with the function below, then run
`python lab/check.py`: chunk_text passes. Read it once before moving on: search and the
evaluation depend on these chunks.
"""


def chunk_text(text: str, chunk_size: int = 50, overlap: int = 10) -> list[str]:
    """Split text into windows of `chunk_size` words; neighbours share `overlap` words.

    chunk_text("a b c d e f g", chunk_size=4, overlap=1) -> ["a b c d", "d e f g"]
    """
    if not isinstance(text, str):
        raise ValueError(f"chunk_text expects a string of text, got {type(text).__name__}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1 word, got {chunk_size}")
    if overlap < 0 or overlap >= chunk_size:
        raise ValueError(f"overlap must be between 0 and chunk_size - 1 ({chunk_size - 1}), "
                         f"got {overlap}")
    words = text.split()                 # any run of whitespace separates two words
    step = chunk_size - overlap          # 50 - 10 = 40: windows start at 0, 40, 80, ...
    chunks = []
    for start in range(0, len(words), step):
        chunks.append(" ".join(words[start:start + chunk_size]))
        if start + chunk_size >= len(words):   # this window holds the last word: stop here,
            break                              # or the next one would only repeat its tail
    return chunks
