"""
rag_collection.py: load a classic IR test collection and cache document embeddings on disk.

    python rag_collection.py data/cisi           # counts, files, and what was fixed up
    python rag_collection.py data/cisi --embed   # MiniLM vectors of every document,
                                                 # cached in .rag_cache/ (run it twice)

    from rag_collection import load_collection, EmbeddingCache
    col = load_collection("data/cisi")
    col["counts"]   # {'docs': 1460, 'queries': 112, 'judged_queries': 76, 'pairs': 3114}

Everything here runs offline. The classic collections (CISI, CRAN, MED, CACM, ADI, TIME, NPL,
LISA) each come as a folder of plain-text files: the documents, the queries, and the relevance
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
    "q 0 d grade" (MED, TREC style), with whole-number or decimal grades. Higher grades mean
    more relevant; a grade of 0 or less means judged not relevant (Cranfield's -1).
Limit: TIME, NPL and LISA use other layouts (`*TEXT 17`, `/` separators, `Document 12`); they
are read by the same functions but were checked only on small samples written by our tests.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

# ---------------------------------------------------------------------------
# Defaults
# ---------------------------------------------------------------------------
DEFAULT_COLLECTION = Path(__file__).resolve().parent / "data" / "cisi"   # shipped with the repository
CACHE_DIR = Path(__file__).resolve().parent / ".rag_cache"   # EmbeddingCache's files (git-ignored)

# The file names the classic collections use, as case-insensitive patterns.
FILE_PATTERNS = {
    "documents": ["*.all", "cran.all.*", "doc-text", "lisa?.???"],
    "queries": ["*.qry", "*.que", "query.text", "query-text"],
    "relevance": ["*.rel", "qrels.text", "cranqrel", "rlv-ass"],
}


# ---------------------------------------------------------------------------
# 1. Finding the three files
# ---------------------------------------------------------------------------
def find_files(folder) -> dict:
    """Return {"documents": [paths], "queries": [paths], "relevance": [paths]} found in folder."""
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
        # Several files are parts of one file only if their names differ just in digits
        # (LISA0.001, LISA0.501, ...); CISI.ALL next to MED.ALL is two collections.
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
TIME_HEADER = re.compile(r"\*(?:TEXT|FIND)\s+(\d+)")    # TIME: "*TEXT 017 01/04/63 PAGE 020"
LISA_HEADER = re.compile(r"Document\s+(\d+)\s*$")       # LISA: "Document  12"
BLOCK_END = re.compile(r"\s*/\s*$|.*#\s*$")             # NPL ends a record with "/", LISA with "#"


def parse_records(path: Path) -> list[dict]:
    """Read a documents or queries file into [{"id", "fields": {"T": title, "W": text, ...}}]."""
    lines = read_text(path).splitlines()
    if any(SMART_ID.match(line) for line in lines):
        records = parse_smart(lines, path)
    elif any(TIME_HEADER.match(line) for line in lines):
        records = parse_headed(lines, TIME_HEADER, title_first=False)
    elif any(LISA_HEADER.match(line) for line in lines):
        records = parse_headed(lines, LISA_HEADER, title_first=True)
    elif any(BLOCK_END.match(line) for line in lines):
        records = parse_blocks(lines, path)
    else:
        records = []
    if not records:
        raise ValueError(f"no records in {path}: looked for SMART '.I <id>' lines (or TIME "
                         f"'*TEXT <id>', LISA 'Document <id>', NPL '<id> ... /' blocks)")
    return records


def read_records(paths: list[Path]) -> list[dict]:
    """The records of one file, or of a file split in parts (LISA); ids must be unique."""
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


def parse_headed(lines: list[str], header: re.Pattern, title_first: bool) -> list[dict]:
    """TIME and LISA: a header line starts a record; LISA's first paragraph is the title."""
    records = []
    for line in lines:
        start = header.match(line.strip())
        if start:
            records.append({"id": normal_id(start[1]), "lines": []})
        elif records and not re.fullmatch(r"\*STOP\s*|\*{5,}\s*", line.strip()):
            records[-1]["lines"].append(line.strip())
    for r in records:
        body = "\n".join(r.pop("lines")).strip()
        title, _, rest = body.partition("\n\n") if title_first else ("", "", body)
        r["fields"] = {"T": squash([title]), "W": squash([rest])}
    return records


def parse_blocks(lines: list[str], path: Path) -> list[dict]:
    """NPL and LISA queries: an id line, text lines, then a line '/' (or text ending in '#')."""
    records, block = [], []
    for line in lines + ["/"]:                       # a last "/" closes a final open block
        if BLOCK_END.match(line):
            block.append(line.rstrip().rstrip("#").rstrip("/"))
            words = "\n".join(block).split(maxsplit=1)
            if words:
                if not words[0].isdigit():
                    raise ValueError(f"{path.name}: a record starts with {words[0][:20]!r}, "
                                     f"expected its number")
                records.append({"id": normal_id(words[0]),
                                "fields": {"W": squash(words[1:])}})
            block = []
        else:
            block.append(line)
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
    lines = read_text(path).splitlines()
    if any(re.match(r"\s*Query\s+\d+", line) for line in lines):       # LISA
        return relevance_lists(lisa_groups(lines), path)
    if any(re.fullmatch(r"\s*/\s*", line) for line in lines):           # NPL
        text = "\n".join(lines)
        return relevance_lists([block.split() for block in re.split(r"(?m)^\s*/\s*$", text)],
                               path)
    rows = [line.split() for line in lines if line.strip()]
    if not rows:
        raise ValueError(f"{path} is empty: expected lines like 'query doc [grade]'")
    widths = {len(row) for row in rows}
    if len(widths) == 1 and widths <= {2, 3, 4}:
        return relevance_table(rows, path)
    # One record per query: "q d d d ...", a paragraph each (TIME)
    paragraphs = re.split(r"\n\s*\n", "\n".join(lines).strip())
    groups = paragraphs if len(paragraphs) > 1 else [" ".join(row) for row in rows]
    return relevance_lists([g.split() for g in groups], path)


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
        triples.append((normal_id(row[0]), normal_id(row[doc_col]), grade))
    return triples


def lisa_groups(lines: list[str]) -> list[list[str]]:
    """LISA.REL: 'Query 1', 'Relevant Refs:', then doc numbers ending with -1."""
    groups = []
    for line in lines:
        start = re.match(r"\s*Query\s+(\d+)", line)
        if start:
            groups.append([start[1]])
        elif groups and not re.search(r"[A-Za-z]", line):
            groups[-1].extend(n for n in line.split() if n != "-1")
    return groups


def relevance_lists(groups: list[list[str]], path: Path) -> list[tuple[str, str, float]]:
    """Turn 'query doc doc doc' groups into triples, each pair with grade 1."""
    triples = []
    for group in groups:
        if not group:
            continue
        if not all(token.lstrip("-").isdigit() for token in group):
            bad = next(t for t in group if not t.lstrip("-").isdigit())
            raise ValueError(f"{path.name}: unexpected {bad[:20]!r} in the relevance file "
                             f"(expected numbers: a query, then its relevant documents)")
        triples += [(normal_id(group[0]), normal_id(doc), 1.0) for doc in group[1:]]
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


# ---------------------------------------------------------------------------
# 4. The collection
# ---------------------------------------------------------------------------
def load_collection(path) -> dict:
    """Load a test collection folder into docs, queries and qrels (plus counts, files, notes).

    docs:    [{"doc_id", "title", "text"}]      text = title + abstract
    queries: [{"qid", "text", "title"}]         every query, judged or not; text = .W
    qrels:   {qid: {doc_id: grade}}             judged queries only, grades > 0
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
    queries = []
    for r in read_records(files["queries"]):     # the question is .W; .T only if there is no .W
        title = r["fields"].get("T", "")
        queries.append({"qid": r["id"], "text": r["fields"].get("W") or title, "title": title})

    triples = [t for p in files["relevance"] for t in parse_relevance(p)]
    relevant = [t for t in triples if t[2] > 0]
    if len(relevant) < len(triples):
        notes.append(f"dropped {len(triples) - len(relevant)} judgements with grade <= 0 "
                     f"(judged not relevant)")
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
        grades = qrels.setdefault(to_qid[qid], {})
        grade = int(grade) if grade.is_integer() else grade
        grades[doc_id] = max(grade, grades.get(doc_id, grade))    # a repeated pair: keep the best
    order = {q["qid"]: i for i, q in enumerate(queries)}
    qrels = dict(sorted(qrels.items(), key=lambda item: order[item[0]]))
    counts = {"docs": len(docs), "queries": len(queries), "judged_queries": len(qrels),
              "pairs": sum(len(g) for g in qrels.values())}
    names = {role: [p.name for p in paths] for role, paths in files.items()}
    return {"docs": docs, "queries": queries, "qrels": qrels, "counts": counts,
            "files": names, "notes": notes}


# ---------------------------------------------------------------------------
# 5. Document vectors cached on disk
# ---------------------------------------------------------------------------
def text_key(text: str) -> str:
    """The cache key of one text: its SHA-256, so equal texts share one vector."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EmbeddingCache:
    """Document vectors on disk, keyed by model name and text: a second run reads, not encodes.

    One file per model, `<folder>/<model>-<hash>.npz`, holding `keys` (one SHA-256 per text)
    and `vectors` (float32 rows). It is written to a temporary file and renamed into place,
    so a run that is interrupted never leaves a half-written cache. Pickle is never used.
    """

    def __init__(self, folder=CACHE_DIR):
        self.folder = Path(folder)
        self.hits = 0        # texts read from disk
        self.misses = 0      # texts that had to go through the model

    def path_for(self, embedder) -> Path:
        """The cache file of this embedder's model."""
        name = embedder.model_name
        readable = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")[-60:]
        return self.folder / f"{readable}-{text_key(name)[:8]}.npz"

    def encode(self, embedder, texts: list[str]) -> np.ndarray:
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
        self.misses += len(new)
        self.hits += len(texts) - sum(key in new for key in wanted)
        if new:
            fresh = np.asarray(embedder.encode(list(new.values())), dtype=np.float32)
            if vectors is not None and vectors.shape[1] != fresh.shape[1]:
                keys, vectors = keys[:0], None         # the model changed size: start over
            keys = np.concatenate([keys, np.array(list(new), dtype="<U64")])
            vectors = fresh if vectors is None else np.concatenate([vectors, fresh])
            self._save(path, keys, vectors)
            row = {key: i for i, key in enumerate(keys)}
        if not texts:
            return np.zeros((0, 0 if vectors is None else vectors.shape[1]), dtype=np.float32)
        return vectors[[row[key] for key in wanted]]

    def _load(self, path: Path):
        """(keys, vectors) from disk, or empty if there is no readable cache file yet."""
        empty = np.zeros(0, dtype="<U64"), None
        if not path.is_file():
            return empty
        try:
            with np.load(path, allow_pickle=False) as saved:
                keys, vectors = saved["keys"], saved["vectors"]
            if vectors.ndim != 2 or len(keys) != len(vectors):
                raise ValueError("keys and vectors disagree")
            return keys, vectors
        except (OSError, ValueError, KeyError) as exc:
            print(f"[info] ignoring unreadable cache {path} ({exc}); rebuilding it.",
                  file=sys.stderr)
            return empty

    def _save(self, path: Path, keys: np.ndarray, vectors: np.ndarray) -> None:
        """Write to a temporary file in the same folder, then rename it over the old one."""
        self.folder.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            with open(temporary, "wb") as f:
                np.savez(f, keys=keys, vectors=vectors, allow_pickle=False)
            os.replace(temporary, path)               # atomic: readers see old or new, never half
        finally:
            temporary.unlink(missing_ok=True)


# ---------------------------------------------------------------------------
# 6. Command line
# ---------------------------------------------------------------------------
def describe(col: dict) -> None:
    """Print the counts, the files read, the fix-ups applied and one example."""
    c = col["counts"]
    print(f"documents       {c['docs']:>6,}   ({', '.join(col['files']['documents'])})")
    print(f"queries         {c['queries']:>6,}   ({', '.join(col['files']['queries'])})")
    print(f"judged queries  {c['judged_queries']:>6,}   ({', '.join(col['files']['relevance'])})")
    print(f"judgement pairs {c['pairs']:>6,}")
    for note in col["notes"]:
        print(f"note: {note}")
    if col["qrels"]:
        qid, grades = next(iter(col["qrels"].items()))
        query = next(q for q in col["queries"] if q["qid"] == qid)
        print(f"\nquery {qid}: {query['text'][:90]}")
        print(f"relevant: {', '.join(list(grades)[:10])}{' ...' if len(grades) > 10 else ''}")


def main(argv=None) -> int:
    """Describe a collection (and cache its MiniLM vectors with --embed); errors are one line."""
    p = argparse.ArgumentParser(description="Load a classic IR test collection (SMART format).")
    p.add_argument("path", nargs="?", default=str(DEFAULT_COLLECTION),
                   help="folder with the documents, queries and relevance files "
                        "(default: %(default)s)")
    p.add_argument("--embed", action="store_true",
                   help=f"encode every document with MiniLM, cached in {CACHE_DIR}")
    args = p.parse_args(argv)
    try:
        col = load_collection(args.path)
        describe(col)
        if args.embed:
            import rag_from_scratch as rag
            cache = EmbeddingCache()
            embedder = rag.Embedder("minilm")
            start = time.perf_counter()
            vectors = cache.encode(embedder, [d["text"] for d in col["docs"]])
            print(f"\nMiniLM vectors {vectors.shape} in {time.perf_counter() - start:.2f} s: "
                  f"{cache.misses} encoded, {cache.hits} read from {cache.path_for(embedder)}")
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
