"""
ir_test_collections.py: load a classic IR test collection and score retrieval methods on it.

    python ir_test_collections.py data/cisi            # counts, files, grades, what was fixed up
    python ir_test_collections.py data/cisi --embed    # MiniLM vectors of every document,
                                                       # cached in .rag_cache/ (run it twice)
    python ir_test_collections.py data/cisi --embed --cache /tmp/vectors   # another cache folder
    python rag_experiments.py --collection data/cisi   # every method scored, cross-validated

    from ir_test_collections import load_collection, evaluate_collection, EmbeddingCache
    col = load_collection("data/cisi")
    col["counts"]   # {'docs': 1460, 'queries': 112, 'judged_queries': 76, 'pairs': 3114}

Everything here runs offline. The classic collections (CISI, CRAN, MED, CACM, ADI) each come as
a folder of plain-text files: the documents, the queries, and the relevance
judgements (which documents a person marked as answering which query). Most use the SMART
layout, where a line `.I 12` starts record 12 and lines `.T`, `.A`, `.W`, `.X` start its
title, authors, abstract and cross-references:

    .I 12
    .T
    Use Made of Technical Libraries
    .W
    This report is an analysis of 6300 acts of use ...

A document's text is its title plus its abstract (.T + .W); the other fields are dropped. A
query's text is its .W, as in the usual CISI baselines (some CISI queries also have a .T, kept
apart as "title").
The files have traps, handled below and reported in the returned "notes":
  - field markers with trailing spaces (".T "), fields that span many lines, .X blocks of numbers;
  - ids written "001" in one file and "1" in another;
  - a relevance file that numbers queries 1, 2, 3 ... by position while the query file uses
    other ids (Cranfield's cranqrel against cran.qry);
  - relevance lines of 2, 3 or 4 columns: "q d", "q d grade", "q d 0 0.000000" (CISI, CACM),
    "q 0 d grade" (MED, TREC style), with whole-number or decimal grades;
  - grade scales that run either way (see GRADE_READINGS): Cranfield's cranqrel uses
    Cleverdon's codes, where 1 is the most relevant, while TREC-style files count up.
Limit: only the SMART layout is read (TIME, NPL and LISA use others; none ships with the kit).
"""

from __future__ import annotations

import sys

if __name__ == "__main__":      # Ctrl-C while the imports below load: one line, exit 130
    import rag_cli
    rag_cli.quiet_interrupts()

import fnmatch
import hashlib
import json
import math
import re
import time
from pathlib import Path

import numpy as np

from rag_retrieval import BM25_B, BM25_K1     # light: NumPy only at import
import rag_cli

# ---------------------------------------------------------------------------
# Defaults
# ---------------------------------------------------------------------------
DEFAULT_COLLECTION = Path(__file__).resolve().parent / "data" / "cisi"
CACHE_DIR = Path(__file__).resolve().parent / ".rag_cache"   # EmbeddingCache's files (git-ignored)

# The file names the classic collections use, as case-insensitive patterns.
FILE_PATTERNS = {
    "documents": ["*.all", "cran.all.*"],
    "queries": ["*.qry", "*.que", "query.text"],
    "relevance": ["*.rel", "qrels.text", "cranqrel"],
}


# ---------------------------------------------------------------------------
# 1. Finding the three files
# ---------------------------------------------------------------------------
def find_files(folder) -> dict:
    """Return {"documents": [paths], "queries": [paths], "relevance": [paths]} found in folder."""
    if not str(folder).strip():
        raise ValueError("the collection path is an empty string: give the folder that holds "
                         "the documents, queries and relevance files")
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise ValueError(f"collection folder not found: {folder} (give the folder that holds "
                         f"the documents, queries and relevance files)")
    names = sorted(p for p in folder.iterdir() if p.is_file())
    found = {}
    for role, patterns in FILE_PATTERNS.items():
        hits = [p for p in names if any(fnmatch.fnmatch(p.name.lower(), pat) for pat in patterns)]
        if not hits:
            raise ValueError(f"no {role} file in {folder}: looked for {', '.join(patterns)} "
                             f"(any case)")
        # CISI.ALL next to MED.ALL is two collections: one per folder.
        if len({re.sub(r"\d", "", p.name.lower()) for p in hits}) > 1:
            raise ValueError(f"more than one {role} file in {folder}: "
                             f"{', '.join(p.name for p in hits)}; keep one collection per folder")
        found[role] = hits
    return found


def read_text(path: Path) -> str:
    """The file's text: UTF-8 if it decodes, else Latin-1 (older collections predate UTF-8)."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def normal_id(raw: str) -> str:
    """Ids as written in different files agree after this: normal_id("001") -> "1"."""
    return (raw.lstrip("0") or "0") if raw.isdigit() else raw


def squash(lines: list[str]) -> str:
    """Join a field's lines into one line of single-spaced words."""
    return " ".join(" ".join(lines).split())


# ---------------------------------------------------------------------------
# 2. Reading documents and queries
# ---------------------------------------------------------------------------
SMART_ID = re.compile(r"\.I(?:\s+(\S+))?\s*$")          # ".I 12" starts record 12
SMART_FIELD = re.compile(r"\.([A-Z])(?:\s+(.*))?$")     # ".T", ".W ", ".A Smith, J."


def parse_records(path: Path) -> list[dict]:
    """Read a documents or queries file into [{"id", "fields": {"T": title, "W": text, ...}}]."""
    records = parse_smart(read_text(path).splitlines(), path)
    if not records:
        raise ValueError(f"no records in {path}: looked for SMART '.I <id>' lines")
    return records


def read_records(paths: list[Path]) -> list[dict]:
    """The records of the file (or its parts, if split); ids must be unique."""
    records, seen = [], set()
    for path in paths:
        for r in parse_records(path):
            if r["id"] in seen:
                raise ValueError(f"{path.name}: record id {r['id']} appears twice; are two "
                                 f"files joined together?")
            seen.add(r["id"])
            records.append(r)
    return records


def parse_smart(lines: list[str], path: Path) -> list[dict]:
    """SMART layout: '.I id' starts a record, '.X' starts field X, other lines continue it."""
    records, field = [], None
    for number, line in enumerate(lines, 1):
        line = line.rstrip()
        id_line = SMART_ID.match(line)
        if id_line:
            if not id_line[1]:
                raise ValueError(f"{path.name} line {number}: '.I' without a record id")
            records.append({"id": normal_id(id_line[1]), "fields": {}})
            field = None
            continue
        if not records:
            continue                                  # anything before the first .I
        marker = SMART_FIELD.match(line)
        if marker:                                    # a field may appear twice (.A, .A)
            field = records[-1]["fields"].setdefault(marker[1], [])
            if marker[2]:                             # ".A Smith": content on the marker line
                field.append(marker[2])
        elif field is not None:
            field.append(line)
    for r in records:
        r["fields"] = {name: squash(text) for name, text in r["fields"].items()}
    return records


def title_and_text(fields: dict) -> tuple[str, str]:
    """Title and 'title + abstract' text; an abstract that already starts with the title
    (Cranfield repeats it) is not given the title twice."""
    title, body = fields.get("T", ""), fields.get("W", "")
    if title and body.lower().startswith(title.lower()):
        return title, body
    return title, "\n".join(part for part in (title, body) if part)


# ---------------------------------------------------------------------------
# 3. Reading relevance judgements
# ---------------------------------------------------------------------------
def parse_relevance(path: Path) -> list[tuple[str, str, float]]:
    """Read (query id, doc id, grade) triples from any of the classic relevance layouts."""
    rows = [line.split() for line in read_text(path).splitlines() if line.strip()]
    if not rows:
        raise ValueError(f"{path} is empty: expected lines like 'query doc [grade]'")
    widths = {len(row) for row in rows}
    if len(widths) != 1 or not widths <= {2, 3, 4}:
        raise ValueError(f"{path.name}: expected one judgement per line, all of 2, 3 or 4 "
                         f"columns ('q d', 'q d grade', 'q 0 d grade'); found {sorted(widths)}")
    return relevance_table(rows, path)


def relevance_table(rows: list[list[str]], path: Path) -> list[tuple[str, str, float]]:
    """One judgement per line: 'q d', 'q d grade', 'q d x y' (SMART) or 'q 0 d grade' (TREC)."""
    def constant(column):
        return len({row[column] for row in rows}) == 1
    width = len(rows[0])
    if width == 4 and constant(1) and not constant(2):
        doc_col, grade_cols = 2, [3]               # TREC: the second column is always 0
    else:
        doc_col, grade_cols = 1, list(range(2, width))
    # A column that is the same on every line says nothing (CISI's "0 0.000000"): the pair
    # being listed is the judgement. Otherwise the last varying column is the grade.
    varying = [c for c in grade_cols if not constant(c)]
    triples = []
    for number, row in enumerate(rows, 1):
        try:
            grade = float(row[varying[-1]]) if varying else 1.0
        except ValueError:
            raise ValueError(f"{path.name} line {number}: grade {row[varying[-1]]!r} is not "
                             f"a number") from None
        if not math.isfinite(grade):
            raise ValueError(f"{path.name} line {number}: grade {row[varying[-1]]!r} is not "
                             f"a finite number")
        triples.append((normal_id(row[0]), normal_id(row[doc_col]), grade))
    return triples


def match_query_ids(query_ids: list[str], judged: set, rel_name: str, qry_name: str):
    """Map the relevance file's query numbers onto query ids: same ids, or else positions."""
    if judged <= set(query_ids):
        return {q: q for q in judged}, None
    by_position = {str(i): q for i, q in enumerate(query_ids, 1)}
    if judged <= by_position.keys():
        return by_position, (f"{rel_name} numbers queries by position (1..{len(query_ids)}), "
                             f"not by the ids in {qry_name}: matched them by position")
    unknown = sorted(judged - set(query_ids), key=lambda q: (len(q), q))
    raise ValueError(f"{rel_name} judges queries that {qry_name} does not have, by id or by "
                     f"position (e.g. {', '.join(unknown[:5])}): are the files from the same "
                     f"collection?")


# Which end of a grade scale means "most relevant" differs by collection, so each layout
# names its reading, and the reading turns a grade into an nDCG gain (0 = not relevant).
GRADE_READINGS = {
    "binary": "every listed pair is relevant, gain 1",
    "higher": "higher grades are more relevant, gain = grade (0 or less: not relevant)",
    "cleverdon": "Cleverdon's codes, 1 = complete answer ... 4 = minimum interest, "
                 "gain = 5 - code (-1 and other codes: not relevant)",
}
CLEVERDON_FILES = ["cranqrel"]      # relevance files written in Cleverdon's codes (Cranfield)


def grade_reading(rel_name: str, grades: list[float], reading: str = "auto") -> str:
    """The reading of a relevance file: Cleverdon for cranqrel, "higher" if grades vary, else binary."""
    if reading != "auto":
        if reading not in GRADE_READINGS:
            raise ValueError(f"unknown grade reading {reading!r}: choose auto, "
                             f"{', '.join(GRADE_READINGS)}")
        return reading
    if any(fnmatch.fnmatch(rel_name.lower(), pattern) for pattern in CLEVERDON_FILES):
        return "cleverdon"
    return "higher" if len(set(grades)) > 1 else "binary"


def gain(grade: float, reading: str) -> float:
    """nDCG gain of one grade: gain(1, "cleverdon") -> 4, gain(4, "cleverdon") -> 1, gain(-1, ...) -> 0."""
    if reading == "cleverdon":
        return 5 - grade if grade in (1, 2, 3, 4) else 0
    if reading == "binary":
        return 1 if grade > 0 else 0
    return grade if grade > 0 else 0


# ---------------------------------------------------------------------------
# 4. The collection
# ---------------------------------------------------------------------------
def load_collection(path, grades: str = "auto") -> dict:
    """Load a test collection folder into docs, queries and qrels (plus counts, files, notes).

    docs:    [{"doc_id", "title", "text"}]      text = title + abstract
    queries: [{"qid", "text", "title"}]         every query, judged or not; text = .W
    qrels:   {qid: {doc_id: gain}}              judged queries only, gains > 0
    grades:  the reading of the grades ("auto", or a key of GRADE_READINGS); the one used
             is returned as "grades"
    """
    files = find_files(path)
    query_path, rel_path = files["queries"][0], files["relevance"][0]
    notes = []
    docs = []
    for r in read_records(files["documents"]):
        title, text = title_and_text(r["fields"])
        docs.append({"doc_id": r["id"], "title": title, "text": text})
    empty = sum(not d["text"] for d in docs)
    if empty:
        notes.append(f"{empty} documents have neither a title nor an abstract")
    notes += repeated_texts(docs)
    queries = []
    for r in read_records(files["queries"]):     # the question is .W; .T only if there is no .W
        title = r["fields"].get("T", "")
        queries.append({"qid": r["id"], "text": r["fields"].get("W") or title, "title": title})

    triples = [t for p in files["relevance"] for t in parse_relevance(p)]
    reading = grade_reading(rel_path.name, [t[2] for t in triples], grades)
    relevant = [(q, d, gain(g, reading)) for q, d, g in triples if gain(g, reading) > 0]
    if len(relevant) < len(triples):
        notes.append(f"dropped {len(triples) - len(relevant)} judgements that the {reading} "
                     f"reading counts as not relevant")
    to_qid, note = match_query_ids([q["qid"] for q in queries], {t[0] for t in relevant},
                                   rel_path.name, query_path.name)
    if note:
        notes.append(note)
    doc_ids = {d["doc_id"] for d in docs}
    known = [t for t in relevant if t[1] in doc_ids]
    if relevant and not known:
        raise ValueError(f"{rel_path.name} names no document of {files['documents'][0].name}: "
                         f"are the files from the same collection?")
    if len(known) < len(relevant):
        notes.append(f"dropped {len(relevant) - len(known)} judgements of documents that are "
                     f"not in {files['documents'][0].name}")
    qrels = {}
    for qid, doc_id, grade in known:
        gains = qrels.setdefault(to_qid[qid], {})
        grade = int(grade) if float(grade).is_integer() else grade
        gains[doc_id] = max(grade, gains.get(doc_id, grade))      # a repeated pair: keep the best
    order = {q["qid"]: i for i, q in enumerate(queries)}
    qrels = dict(sorted(qrels.items(), key=lambda item: order[item[0]]))
    counts = {"docs": len(docs), "queries": len(queries), "judged_queries": len(qrels),
              "pairs": sum(len(g) for g in qrels.values())}
    names = {role: [p.name for p in paths] for role, paths in files.items()}
    return {"docs": docs, "queries": queries, "qrels": qrels, "counts": counts,
            "files": names, "notes": notes, "grades": reading}


def repeated_texts(docs: list[dict]) -> list[str]:
    """A note naming documents whose text repeats an earlier document's word for word."""
    first, repeats = {}, []
    for d in docs:
        if d["text"] in first:
            repeats.append(f"{d['doc_id']} = {first[d['text']]}")
        elif d["text"]:
            first[d["text"]] = d["doc_id"]
    if not repeats:
        return []
    shown = ", ".join(repeats[:5]) + (", ..." if len(repeats) > 5 else "")
    return [f"{len(repeats)} documents repeat an earlier document's text word for word "
            f"({shown}): {len(first):,} distinct texts, so a repeat gets the same vector and score"]


# ---------------------------------------------------------------------------
# 5. Document vectors cached on disk
# ---------------------------------------------------------------------------
def text_key(text: str) -> str:
    """The cache key of one text: its SHA-256, so equal texts share one vector."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


ENCODE_PIECE = 16        # texts per call to the model: the bar moves every second or two, and
                         # short pieces pad less (256 CISI abstracts: 20.6 s in 16s, 23.7 s in 64s)


class EmbeddingCache:
    """Document vectors on disk, keyed by model name and text: a second run reads, not encodes.

    One file per model, `<folder>/<model>-<hash>.npz`, holding `keys` (one SHA-256 per text)
    and `vectors` (float32 rows). The folder carries the kit's mark (rag_storage): a folder
    holding anything else is refused, never written to. Files are written whole or not at
    all, under the folder's lock; a damaged file (cut short, a flipped byte) is ignored with
    one line and rebuilt. Pickle is never used.
    """

    def __init__(self, folder=CACHE_DIR):
        from rag_storage import refuse_foreign_folder
        self.folder = refuse_foreign_folder(folder, "--cache")    # now, before any slow work
        self.hits = 0        # texts read from disk
        self.misses = 0      # distinct texts that had to go through the model
        self.repeats = 0     # new texts equal to another new text: encoded once for both

    def path_for(self, embedder) -> Path:
        """The cache file of this embedder's model."""
        name = embedder.model_name
        readable = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")[-60:]
        return self.folder / f"{readable}-{text_key(name)[:8]}.npz"

    def encode(self, embedder, texts: list[str], what: str = "texts") -> np.ndarray:
        """Vectors of `texts` in order, encoding with `embedder` only those not on disk."""
        if embedder.backend == "tfidf":
            raise ValueError("TF-IDF vectors depend on the corpus the vectorizer was fitted on, "
                             "so they are not cached: build them with build_index instead")
        path = self.path_for(embedder)
        keys, vectors = self._load(path)
        row = {key: i for i, key in enumerate(keys)}
        wanted = [text_key(t) for t in texts]
        new = {}
        for key, text in zip(wanted, texts):
            if key not in row:
                new.setdefault(key, text)
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
            row = {key: i for i, key in enumerate(keys)}
        if not texts:
            return np.zeros((0, 0 if vectors is None else vectors.shape[1]), dtype=np.float32)
        return vectors[[row[key] for key in wanted]]

    @staticmethod
    def _encode_new(embedder, texts: list[str], what: str, cached: int) -> np.ndarray:
        """Encode in pieces of ENCODE_PIECE; more than one piece shows a progress bar on stderr."""
        if len(texts) <= ENCODE_PIECE:
            return np.asarray(embedder.encode(texts), dtype=np.float32)
        from rag_cli import progress
        print(f"encoding {len(texts):,} {what} with {embedder.model_name.split('/')[-1]} "
              f"({cached:,} read from the cache) ...", file=sys.stderr, flush=True)
        starts = range(0, len(texts), ENCODE_PIECE)
        pieces = [np.asarray(embedder.encode(texts[i:i + ENCODE_PIECE]), dtype=np.float32)
                  for i in progress(starts, len(starts), f"encoding {what}", f" pieces of {ENCODE_PIECE}")]
        return np.concatenate(pieces)

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
            from rag_cli import one_line
            print(f"[info] ignoring unreadable cache {path} ({one_line(exc)}); rebuilding it",
                  file=sys.stderr)
            return empty

    def _save(self, path: Path, keys: np.ndarray, vectors: np.ndarray) -> None:
        """Claim the folder (mark first), then write the file whole under the folder's lock."""
        import io
        from rag_storage import claim_folder, folder_lock, write_atomic
        buffer = io.BytesIO()
        np.savez(buffer, keys=keys, vectors=vectors, allow_pickle=False)
        with folder_lock(claim_folder(self.folder, "--cache")):
            write_atomic(path, buffer.getvalue())


# ---------------------------------------------------------------------------
# 6. Scoring retrieval methods, with every tuned setting cross-validated
# ---------------------------------------------------------------------------
CUTOFF = 10              # recall, MRR and nDCG count the top 10 documents
FOLDS = 5                # cross-validation folds over the judged queries
CV_SEED = 0              # which query goes to which fold
# The settings cross-validation chooses from. Rocchio's a stays 1: the query is renormalised,
# so only b / a moves the ranking, and b = 0 (no feedback) is always on the list.
K1S, BS = [0.9, 1.2, 1.5, 2.0], [0.3, 0.5, 0.75, 0.9]           # BM25
WEIGHTS = [round(0.1 * i, 1) for i in range(11)]                # keyword share of a hybrid
RRF_KS = [5, 10, 20, 40, 60, 100]
FEEDBACK_BS, FEEDBACK_MS = [0, 0.25, 0.5, 1, 2], [3, 5, 10]     # Rocchio b and m
NEIGHBOURS = 10          # neighbours of a document for neighbour_smoothed


def query_metrics(scores: np.ndarray, doc_ids: list[str], relevant: list[dict],
                  k: int = CUTOFF) -> np.ndarray:
    """(queries x 4) array of hit@1, recall@k, reciprocal rank and nDCG@k, by the core's metrics."""
    from rag_retrieval import evaluate_scores
    m = evaluate_scores(scores, [{"doc_id": d} for d in doc_ids],
                        [{"relevant": gains} for gains in relevant], k)
    return np.array([(q["hit1"], q["recall"], q["rr"], q["ndcg"]) for q in m["per_question"]])


def fold_of_each_query(n: int, folds: int = FOLDS, seed: int = CV_SEED) -> np.ndarray:
    """Fold number of each query: a seeded shuffle dealt out in turn, so fold sizes differ by <= 1."""
    if not 2 <= folds <= n:
        raise ValueError(f"cross-validation needs at least 2 judged queries, the collection "
                         f"has {n}" if n < 2 else
                         f"cross-validation needs 2 to {n} folds for {n} judged queries, "
                         f"got {folds}")
    return np.random.default_rng(seed).permutation(n) % folds


def cross_validate(grid: dict[str, np.ndarray], folds: int = FOLDS,
                   seed: int = CV_SEED) -> tuple[np.ndarray, list[str]]:
    """For each fold, pick the setting with the best mean nDCG on the other folds and score
    the held-out queries with it. grid: {setting: query_metrics}; returns (held-out metrics,
    the setting chosen for each fold). Ties go to the first setting in the grid."""
    labels = list(grid)
    ndcg = np.array([grid[label][:, 3] for label in labels])
    fold = fold_of_each_query(ndcg.shape[1], folds, seed)
    held_out, chosen = np.empty_like(grid[labels[0]]), []
    for f in range(folds):
        test = fold == f
        best = labels[int(np.argmax(ndcg[:, ~test].mean(axis=1)))]
        held_out[test] = grid[best][test]
        chosen.append(best)
    return held_out, chosen


def score_inputs(collection: dict, minilm=None, cache=None) -> dict:
    """Everything the methods need, computed once: texts, word counts, TF-IDF and MiniLM vectors."""
    import rag_from_scratch as rag
    from rag_retrieval import split_sentences, unit_rows, word_analyzer
    from sklearn.feature_extraction.text import CountVectorizer
    judged = [q for q in collection["queries"] if q["qid"] in collection["qrels"]]
    if not judged:
        raise ValueError("the collection has no query with relevance judgements to score")
    docs = collection["docs"]
    inputs = {"questions": [q["text"] for q in judged], "texts": [d["text"] for d in docs],
              "doc_ids": [d["doc_id"] for d in docs],
              "relevant": [collection["qrels"][q["qid"]] for q in judged]}
    tfidf = rag.Embedder("tfidf")
    index = rag.build_index(docs, tfidf)              # fits the vocabulary first
    inputs["tfidf"] = (tfidf.encode(inputs["questions"], sparse=True), index)
    try:                                              # stemmed word counts, for every BM25
        counter = CountVectorizer(analyzer=word_analyzer(stem=True))
        inputs["counts"] = (counter.fit_transform(inputs["texts"]),
                            counter.transform(inputs["questions"]))
    except RuntimeError as exc:                       # snowballstemmer is not installed
        print(f"[info] {exc}: the stemmed BM25 rows are left out", file=sys.stderr)
    if minilm:
        encode = (lambda texts, what: cache.encode(minilm, texts, what)) if cache else \
            (lambda texts, what: minilm.encode(texts))
        vectors, whole = encode(inputs["texts"], "documents"), encode(inputs["questions"], "queries")
        # A long question read whole and sentence by sentence: the mean of the two unit vectors.
        sentences = [split_sentences(q) or [q] for q in inputs["questions"]]
        encoded = iter(encode([s for group in sentences for s in group], "query sentences"))
        by_sentence = unit_rows(np.array([np.mean([next(encoded) for _ in group], axis=0)
                                          for group in sentences]))
        inputs["minilm"] = {"docs": np.asarray(vectors, dtype=np.float64), "whole": whole,
                            "sentences": unit_rows(whole + by_sentence)}
    return inputs


def bm25_from_counts(inputs: dict, k1: float = BM25_K1, b: float = BM25_B):
    """(stemmed BM25 scores, BM25 weights W) from the counted words: no recounting."""
    from rag_retrieval import bm25_weights
    doc_counts, query_counts = inputs["counts"]
    weights = bm25_weights(doc_counts, k1, b)
    return (query_counts @ weights.T).toarray(), weights


def bm25_feedback(inputs: dict, weights, first: np.ndarray, b: float, m: int) -> np.ndarray:
    """BM25 scores of Rocchio-moved queries in BM25's term space: unit query counts plus
    b * the mean unit row of W over the m documents `first` ranks highest."""
    from rag_retrieval import rocchio, unit_rows
    if b == 0:
        return (inputs["counts"][1] @ weights.T).toarray()
    moved = rocchio(unit_rows(inputs["counts"][1].astype(np.float64)), unit_rows(weights),
                    first, 1.0, b, m)
    return (moved @ weights.T).toarray()


def grids(inputs: dict):
    """Yield (method, setting, scores) for every setting cross-validation may choose from."""
    from rag_retrieval import (hybrid_scores, minmax, neighbour_smoothed, reciprocal_rank_fusion,
                               rocchio, top_rows, unit_rows)
    q, index = inputs["tfidf"]
    plain = (q @ index.T).toarray()
    for b in FEEDBACK_BS:
        for m in FEEDBACK_MS[:1] if b == 0 else FEEDBACK_MS:
            yield "tfidf + rocchio", f"a=1 b={b} m={m}", \
                (rocchio(q, index, plain, 1.0, b, m) @ index.T).toarray()
    dense = inputs.get("minilm")
    if dense:
        docs, whole = dense["docs"], dense["whole"]
        for b in FEEDBACK_BS:
            for m in FEEDBACK_MS[:1] if b == 0 else FEEDBACK_MS:
                yield "minilm + rocchio", f"a=1 b={b} m={m}", \
                    rocchio(whole, docs, whole @ docs.T, 1.0, b, m) @ docs.T
    if "counts" not in inputs:
        return
    for k1 in K1S:
        for b in BS:
            keyword, weights = bm25_from_counts(inputs, k1, b)
            yield "bm25 stemmed", f"k1={k1} b={b}", keyword
            for fb in FEEDBACK_BS[1:]:
                for m in FEEDBACK_MS:
                    yield "bm25 stemmed + rocchio", f"k1={k1} b={b} fb={fb} m={m}", \
                        bm25_feedback(inputs, weights, keyword, fb, m)
            if dense:
                for w in WEIGHTS:
                    yield "w bm25 stemmed + (1-w) minilm", f"k1={k1} b={b} w={w}", \
                        hybrid_scores(minmax(keyword), minmax(whole @ docs.T), w)
    if not dense:
        return
    keyword, weights = bm25_from_counts(inputs)
    for k in RRF_KS:
        yield "rrf(bm25 stemmed, minilm)", f"k={k}", \
            reciprocal_rank_fusion([keyword, whole @ docs.T], k)
    # Feedback on both sides from the hybrid's first ranking, then fused again.
    for query in ["whole", "sentences"]:
        for g in [0, 0.5]:
            smoothed = neighbour_smoothed(docs, g, NEIGHBOURS) if g else docs
            first_dense = dense[query] @ smoothed.T
            for w0 in [0.3, 0.5]:
                first = hybrid_scores(minmax(keyword), minmax(first_dense), w0)
                for m in FEEDBACK_MS:
                    feedback = top_rows(first, m) @ smoothed
                    for fb in [0, 1, 2]:
                        fed_keyword = minmax(bm25_feedback(inputs, weights, first, fb, m))
                        for fb_dense in [0, 0.25]:
                            fed_dense = minmax(unit_rows(dense[query] + fb_dense * feedback)
                                               @ smoothed.T)
                            for w in [0.3, 0.4, 0.5, 0.6]:
                                yield "fused feedback", \
                                    (f"q={query} g={g} w0={w0} m={m} fb={fb}/{fb_dense} "
                                     f"w={w}"), hybrid_scores(fed_keyword, fed_dense, w)


def grid_size(inputs: dict) -> int:
    """How many settings grids(inputs) yields (for the progress bar; a test checks it)."""
    feedback = 1 + (len(FEEDBACK_BS) - 1) * len(FEEDBACK_MS)        # b = 0 has one m
    dense, counts = "minilm" in inputs, "counts" in inputs
    n = feedback * (2 if dense else 1)
    if counts:
        n += len(K1S) * len(BS) * (1 + feedback - 1 + (len(WEIGHTS) if dense else 0))
    if counts and dense:
        n += len(RRF_KS) + 2 * 2 * 2 * len(FEEDBACK_MS) * 3 * 2 * 4   # fused feedback's loops
    return n


def fixed_methods(inputs: dict):
    """Yield (name, scores) of the methods with no tuned setting (defaults, fixed fusions)."""
    import rag_from_scratch as rag
    from rag_retrieval import bm25_scores, bm25_matrix, hybrid_scores, reciprocal_rank_fusion
    q, index = inputs["tfidf"]
    tfidf = (q @ index.T).toarray()
    yield "tfidf", tfidf
    sublinear = rag.Embedder("tfidf")
    sublinear.model.set_params(sublinear_tf=True)    # 1 + log(tf) instead of tf
    index2 = rag.build_index([{"text": t} for t in inputs["texts"]], sublinear)
    yield "tfidf (sublinear tf)", (sublinear.encode(inputs["questions"], sparse=True)
                                   @ index2.T).toarray()
    yield "bm25", bm25_scores(inputs["questions"], *bm25_matrix(inputs["texts"]))
    stemmed = bm25_from_counts(inputs)[0] if "counts" in inputs else None
    if stemmed is not None:
        yield "bm25 (stemmed)", stemmed
    if "minilm" in inputs:
        dense = inputs["minilm"]["whole"] @ inputs["minilm"]["docs"].T
        yield "minilm", dense
        yield "0.5 tfidf + 0.5 minilm", hybrid_scores(tfidf, dense)
        yield "rrf(tfidf, minilm)", reciprocal_rank_fusion([tfidf, dense])
        if stemmed is not None:
            yield "rrf(bm25 stemmed, minilm)", reciprocal_rank_fusion([stemmed, dense])


def peer_methods(inputs: dict):
    """Yield (name, scores) of the same retrieval by widely used libraries, as a reference:
    scikit-learn's TfidfVectorizer, rank_bm25's BM25Okapi on lower-cased words split at
    spaces, sentence-transformers' all-MiniLM-L6-v2 (our Embedder runs it: same vectors), and
    0.5 * TF-IDF cosine + 0.5 * MiniLM cosine."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    vectorizer = TfidfVectorizer(stop_words="english", ngram_range=(1, 2))
    matrix = vectorizer.fit_transform(inputs["texts"])
    tfidf = (vectorizer.transform(inputs["questions"]) @ matrix.T).toarray()
    yield "peer: scikit-learn tfidf", tfidf
    try:
        from rank_bm25 import BM25Okapi
    except ImportError:
        print("[info] rank_bm25 is not installed (pip install rank-bm25): its peer row is "
              "left out", file=sys.stderr)
    else:
        words = lambda text: text.lower().split()
        bm25 = BM25Okapi([words(t) for t in inputs["texts"]])
        yield "peer: rank_bm25", np.array([bm25.get_scores(words(q)) for q in inputs["questions"]])
    if "minilm" in inputs:
        dense = inputs["minilm"]["whole"] @ inputs["minilm"]["docs"].T
        yield "peer: sentence-transformers minilm", dense
        yield "peer: 0.5 tfidf + 0.5 minilm", 0.5 * tfidf + 0.5 * dense


def summary(metrics: np.ndarray, k: int, seconds: float, **extra) -> dict:
    """One row of the results: means of the per-query metrics and nDCG's 95% interval."""
    from rag_retrieval import bootstrap_ci
    hit1, recall, rr, ndcg = metrics.mean(axis=0)
    return {"hit@1": hit1, f"recall@{k}": recall, f"mrr@{k}": rr, f"ndcg@{k}": ndcg,
            f"ndcg@{k}_ci": bootstrap_ci(metrics[:, 3]), "seconds": round(seconds, 3),
            "per_query_ndcg": metrics[:, 3].tolist(), **extra}


def evaluate_collection(collection: dict, minilm=None, cache=None, k: int = CUTOFF,
                        folds: int = FOLDS, seed: int = CV_SEED) -> dict:
    """hit@1, recall@k, MRR@k, nDCG@k (with a 95% interval) and seconds of each method.

    Fixed methods and the peer libraries are scored once. Methods with settings ("cv: ...")
    choose them by `folds`-fold cross-validation over queries (seed `seed`): each fold is
    scored with the setting that did best on the other folds. The best single setting on all
    queries is reported too, labelled as the in-sample curiosity it is.
    """
    from rag_cli import progress                 # on stderr, never in the table
    start = time.perf_counter()
    print(f"counting the words of {len(collection['docs']):,} documents (TF-IDF, stemmed BM25)"
          f"{' and encoding them with MiniLM' if minilm else ''} ...", file=sys.stderr, flush=True)
    inputs = score_inputs(collection, minilm, cache)
    print(f"[info] encoded and counted in {time.perf_counter() - start:.1f} s; every row "
          f"shares that, its seconds are the scoring alone", file=sys.stderr)
    score = lambda s: query_metrics(s, inputs["doc_ids"], inputs["relevant"], k)
    results = {}
    print("scoring the fixed methods and the peer libraries ...", file=sys.stderr, flush=True)
    for group in (fixed_methods, peer_methods):
        start = time.perf_counter()
        for name, s in group(inputs):
            results[name] = summary(score(s), k, time.perf_counter() - start,
                                    kind="peer" if name.startswith("peer") else "fixed")
            start = time.perf_counter()
    per_method, seconds = {}, {}
    start = time.perf_counter()
    for method, setting, s in progress(grids(inputs), grid_size(inputs),
                                       "scoring every setting for cross-validation", " settings"):
        per_method.setdefault(method, {})[setting] = score(s)
        seconds[method] = seconds.get(method, 0.0) + time.perf_counter() - start
        start = time.perf_counter()
    for method, grid in per_method.items():
        held_out, chosen = cross_validate(grid, folds, seed)
        results[f"cv: {method}"] = summary(held_out, k, seconds[method], kind="cv",
                                           chosen=chosen, settings=len(grid), folds=folds,
                                           seed=seed)
    everything = {f"{method}: {setting}": m for method, grid in per_method.items()
                  for setting, m in grid.items()}
    if len(per_method) > 1:
        held_out, chosen = cross_validate(everything, folds, seed)
        results["cv: best method, chosen in each fold"] = summary(
            held_out, k, sum(seconds.values()), kind="cv", chosen=chosen,
            settings=len(everything), folds=folds, seed=seed)
    if everything:
        best = max(everything, key=lambda label: everything[label][:, 3].mean())
        results["in-sample best (curiosity)"] = summary(everything[best], k, 0.0,
                                                        kind="in-sample", chosen=[best])
    return results


def best_ratio(results: dict, k: int = CUTOFF) -> tuple[str, str, float] | None:
    """(best cross-validated row, best peer row, their nDCG ratio), or None if either is missing."""
    pick = lambda kind: max((name for name, r in results.items() if r["kind"] == kind),
                            key=lambda name: results[name][f"ndcg@{k}"], default=None)
    cv, peer = pick("cv"), pick("peer")
    if cv is None or peer is None:
        return None
    return cv, peer, results[cv][f"ndcg@{k}"] / results[peer][f"ndcg@{k}"]


def print_header(collection: dict) -> None:
    """The collection's counts, its grade reading and its notes, before the table."""
    c = collection["counts"]
    print(f"{c['docs']:,} documents, {c['judged_queries']} judged queries of "
          f"{c['queries']}, {c['pairs']:,} relevance judgements")
    print(f"grades: {collection['grades']} ({GRADE_READINGS[collection['grades']]})")
    for note in collection["notes"]:
        print(f"note: {note}")
    sys.stdout.flush()


def print_collection(results: dict, collection: dict | None = None, k: int = CUTOFF) -> None:
    """One aligned line per method, the settings each fold chose, and the best against the peers."""
    from rag_retrieval import paired_bootstrap
    if collection:
        print_header(collection)
    width = max(map(len, results)) + 2
    print(f"{'method':<{width}}hit@1  recall@{k}  mrr@{k}  ndcg@{k}  [95% interval]  seconds")
    for name, r in results.items():
        lo, hi = r[f"ndcg@{k}_ci"]
        print(f"{name:<{width}}{r['hit@1']:.3f}  {r[f'recall@{k}']:.3f}      {r[f'mrr@{k}']:.3f}   "
              f"{r[f'ndcg@{k}']:.3f}    [{lo:.3f}, {hi:.3f}]  {r['seconds']:7.2f}")
    cv_rows = {name: r for name, r in results.items() if r["kind"] == "cv"}
    if cv_rows:
        some = next(iter(cv_rows.values()))
        print(f"\ncv rows: {some['folds']}-fold cross-validation over queries (seed {some['seed']}); "
              f"settings chosen by nDCG@{k} on the other folds:")
        for name, r in cv_rows.items():
            print(f"  {name[4:]} ({r['settings']} settings): {' | '.join(r['chosen'])}")
    if "in-sample best (curiosity)" in results:
        print(f"in-sample best: {results['in-sample best (curiosity)']['chosen'][0]}: chosen on "
              f"the very queries it is scored on, so not a result")
    ratio = best_ratio(results, k)
    if ratio:
        cv, peer, x = ratio
        print(f"best cross-validated ({cv}) / best peer ({peer}): {x:.2f}x")
        diff = paired_bootstrap(results[peer]["per_query_ndcg"], results[cv]["per_query_ndcg"])
        d, lo, hi = diff
        verdict = "could be chance" if lo <= 0 <= hi else "holds across resamples"
        print(f"  ndcg@{k}, {cv} minus {peer}: {d:+.3f} [{lo:+.3f}, {hi:+.3f}]  ({verdict})")


def run_collection(path: str, as_json: bool = False, cache_folder=CACHE_DIR,
                   minilm=None, grades: str = "auto", before_model=None) -> dict:
    """Load a test collection, score every method, and print a table (or one JSON object).

    before_model: called once the flags and files are checked, before MiniLM loads (the CLI
    imports the model's libraries there)."""
    import rag_from_scratch as rag
    from rag_storage import check_writable
    cache = EmbeddingCache(cache_folder)           # a folder that is not ours: refused now
    check_writable(cache.folder, "--cache")
    collection = load_collection(path, grades)
    fold_of_each_query(collection["counts"]["judged_queries"])   # enough queries? say so now
    if not as_json:                                # the header now, the table after the work
        print_header(collection)
    if minilm is None:
        if before_model:
            before_model()
        try:
            minilm = rag.Embedder("minilm")
        except RuntimeError as exc:
            print(f"[info] MiniLM could not be loaded ({exc}): keyword methods only",
                  file=sys.stderr)
    results = evaluate_collection(collection, minilm, cache)
    if as_json:
        rounded = lambda v: round(v, 4) if isinstance(v, float) else (
            [rounded(x) for x in v] if isinstance(v, (list, tuple)) else v)
        print(json.dumps({name: {key: rounded(value) for key, value in r.items()
                                 if key != "per_query_ndcg"} for name, r in results.items()}))
    else:
        print_collection(results)
    return results


# ---------------------------------------------------------------------------
# 7. Command line
# ---------------------------------------------------------------------------
def describe(col: dict) -> None:
    """Print the counts, the files read, the fix-ups applied and one example."""
    c = col["counts"]
    print(f"documents       {c['docs']:>6,}   ({', '.join(col['files']['documents'])})")
    print(f"queries         {c['queries']:>6,}   ({', '.join(col['files']['queries'])})")
    print(f"judged queries  {c['judged_queries']:>6,}   ({', '.join(col['files']['relevance'])})")
    print(f"judgement pairs {c['pairs']:>6,}")
    print(f"grades          {col['grades']}: {GRADE_READINGS[col['grades']]}")
    for note in col["notes"]:
        print(f"note: {note}")
    if col["qrels"]:
        qid, grades = next(iter(col["qrels"].items()))
        query = next(q for q in col["queries"] if q["qid"] == qid)
        print(f"\nquery {qid}: {query['text'][:90]}")
        print(f"relevant: {', '.join(list(grades)[:10])}{' ...' if len(grades) > 10 else ''}")


def import_model_libraries() -> None:
    """For command lines: import sentence-transformers and PyTorch now, saying so, with Ctrl-C
    ending the process at once. An interrupt raised inside Python's import machinery can be
    swallowed (the run would go on); a bare exit mid-import is safe, nothing is written yet."""
    import importlib.util
    import signal
    from rag_cli import interrupted
    if "sentence_transformers" in sys.modules or not importlib.util.find_spec("sentence_transformers"):
        return                                     # loaded already, or the model cannot load
    print("importing sentence-transformers and PyTorch ...", file=sys.stderr, flush=True)
    previous = signal.signal(signal.SIGINT, interrupted)
    try:
        import sentence_transformers  # noqa: F401
    finally:
        signal.signal(signal.SIGINT, previous)


def parse_args(argv=None):
    """Command-line flags: a collection folder, --embed and its --cache folder."""
    from rag_cli import OneLineParser
    p = OneLineParser(description="Load a classic IR test collection (SMART format).")
    p.add_argument("path", nargs="?", default=str(DEFAULT_COLLECTION),
                   help="folder with the documents, queries and relevance files "
                        "(default: %(default)s)")
    p.add_argument("--embed", action="store_true",
                   help="encode every document with MiniLM, cached in --cache")
    p.add_argument("--cache", help=f"with --embed: folder for the vectors (default: {CACHE_DIR})")
    return p.parse_args(argv)


def run(args) -> None:
    """Describe the collection; with --embed, encode its documents through the cache."""
    if args.cache is not None and not args.embed:
        raise ValueError("--cache goes with --embed")
    if args.embed:
        from rag_storage import check_writable
        if args.cache is not None and not args.cache.strip():
            raise ValueError("--cache needs a folder, got an empty string")
        cache = EmbeddingCache(args.cache or CACHE_DIR)     # a folder not ours: refused now
        check_writable(cache.folder, "--cache")
    col = load_collection(args.path)
    describe(col)
    if args.embed:
        import rag_from_scratch as rag
        import_model_libraries()
        embedder = rag.Embedder("minilm")
        start = time.perf_counter()
        vectors = cache.encode(embedder, [d["text"] for d in col["docs"]], "documents")
        repeats = f", {cache.repeats} repeats share a vector" if cache.repeats else ""
        print(f"\nMiniLM vectors {vectors.shape} in {time.perf_counter() - start:.2f} s: "
              f"{cache.misses:,} encoded{repeats}, {cache.hits:,} read from "
              f"{cache.path_for(embedder)}")


main = rag_cli.main_for(run, parse_args)     # describe a collection; errors are one line


if __name__ == "__main__":
    rag_cli.leave(main())
