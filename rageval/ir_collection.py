"""
rageval/ir_collection.py: load a classic IR test collection in the SMART layout (CISI, in data/cisi).

    from rageval.ir_collection import load_collection
    col = load_collection("data/cisi")
    col["counts"]   # {'docs': 1460, 'queries': 112, 'judged_queries': 76, 'pairs': 3114}

A test collection is a folder of three plain-text files: the documents (CISI.ALL), the queries
(CISI.QRY) and the relevance judgements (CISI.REL: which documents a person marked as
answering which query). In the SMART layout a line `.I 12` starts record 12 and lines `.T`,
`.A`, `.W`, `.X` start its title, authors, abstract and cross-references (CISI writes some
markers with a trailing space, ".T "):

    .I 12
    .T
    Use Made of Technical Libraries
    .W
    This report is an analysis of 6300 acts of use ...

A document's text is its title plus its abstract (.T + .W); a query's text is its .W, as in
the usual CISI baselines. A relevance line is "query doc [more columns]"; a column that varies
from line to line is a grade. Only this layout is read (Cranfield, TREC and others need
readers of their own).
"""

from __future__ import annotations

import fnmatch
import math
import re
from pathlib import Path

DEFAULT_COLLECTION = Path(__file__).resolve().parent.parent / "data" / "cisi"
FILE_PATTERNS = {"documents": "*.all", "queries": "*.qry", "relevance": "*.rel"}   # any case
SMART_ID = re.compile(r"\.I(?:\s+(\S+))?\s*$")          # ".I 12" starts record 12
SMART_FIELD = re.compile(r"\.([A-Z])(?:\s+(.*))?$")     # ".T", ".W ", ".A Smith, J."
# How a grade becomes an nDCG gain (0 = not relevant); load_collection names the one it used.
GRADE_READINGS = {
    "binary": "every listed pair is relevant, gain 1",
    "higher": "higher grades are more relevant, gain = grade (0 or less: not relevant)",
}


def find_files(folder) -> dict:
    """{"documents": path, "queries": path, "relevance": path}: one file of each in folder."""
    if not str(folder).strip():
        raise ValueError("the collection path is an empty string: give the folder that holds "
                         "the documents, queries and relevance files")
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise ValueError(f"collection folder not found: {folder} (give the folder that holds "
                         f"the documents, queries and relevance files)")
    found = {}
    for role, pattern in FILE_PATTERNS.items():
        hits = sorted(p for p in folder.iterdir()
                      if p.is_file() and fnmatch.fnmatch(p.name.lower(), pattern))
        if not hits:
            raise ValueError(f"no {role} file in {folder}: looked for {pattern} (any case)")
        if len(hits) > 1:                  # CISI.ALL next to MED.ALL is two collections
            raise ValueError(f"more than one {role} file in {folder}: "
                             f"{', '.join(p.name for p in hits)}; keep one collection per folder")
        found[role] = hits[0]
    return found


def parse_records(path: Path) -> dict[str, dict]:
    """Read a documents or queries file into {record id: {"T": title, "W": text, ...}}."""
    records, fields, field = {}, None, None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.rstrip()
        id_line = SMART_ID.match(line)
        if id_line:
            if not id_line[1]:
                raise ValueError(f"{path.name} line {number}: '.I' without a record id")
            if id_line[1] in records:
                raise ValueError(f"{path.name}: record id {id_line[1]} appears twice; are two "
                                 f"files joined together?")
            fields = records[id_line[1]] = {}
            field = None
        elif fields is not None:                      # anything before the first .I is skipped
            marker = SMART_FIELD.match(line)
            if marker:                                # a field may appear twice (.A, .A)
                field = fields.setdefault(marker[1], [])
                if marker[2]:                         # ".A Smith": content on the marker line
                    field.append(marker[2])
            elif field is not None:
                field.append(line)
    if not records:
        raise ValueError(f"no records in {path}: looked for SMART '.I <id>' lines")
    # A field's lines become one line of single-spaced words.
    return {rid: {name: " ".join(" ".join(lines).split()) for name, lines in fields.items()}
            for rid, fields in records.items()}


def parse_relevance(path: Path) -> list[tuple[str, str, float]]:
    """(query id, doc id, grade) of each line 'q d [columns]': the grade is the last column
    that varies, or 1 if none does (CISI's "0 0.000000" is the same on every line)."""
    rows = [line.split() for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]
    if not rows:
        raise ValueError(f"{path} is empty: expected lines like 'query doc [grade]'")
    widths = {len(row) for row in rows}
    if len(widths) != 1 or min(widths) < 2:
        raise ValueError(f"{path.name}: expected one judgement per line, all with the same "
                         f"columns ('q d' or 'q d grade'); found {sorted(widths)}")
    varying = [c for c in range(2, len(rows[0])) if len({row[c] for row in rows}) > 1]
    triples = []
    for number, row in enumerate(rows, 1):
        raw = row[varying[-1]] if varying else "1"
        try:
            grade = float(raw)
        except ValueError:
            raise ValueError(f"{path.name} line {number}: grade {raw!r} is not a number") from None
        if not math.isfinite(grade):
            raise ValueError(f"{path.name} line {number}: grade {raw!r} is not a finite number")
        triples.append((row[0], row[1], grade))
    return triples


def grade_reading(grades: list[float], reading: str = "auto") -> str:
    """The reading of a relevance file's grades: "higher" if they vary, else "binary"."""
    if reading == "auto":
        return "higher" if len(set(grades)) > 1 else "binary"
    if reading not in GRADE_READINGS:
        raise ValueError(f"unknown grade reading {reading!r}: choose auto, "
                         f"{', '.join(GRADE_READINGS)}")
    return reading


def gain(grade: float, reading: str) -> float:
    """nDCG gain of a grade: gain(2, "higher") -> 2, gain(2, "binary") -> 1, gain(-1, ...) -> 0."""
    if grade <= 0:
        return 0
    return 1 if reading == "binary" else grade


def load_collection(path, grades: str = "auto") -> dict:
    """Load a test collection folder into docs, queries and qrels (plus counts, files, notes).

    docs: [{"doc_id", "title", "text"}]; queries: [{"qid", "text", "title"}], judged or not;
    qrels: {qid: {doc_id: gain > 0}}; grades: "auto" or a key of GRADE_READINGS (the one used
    is returned as "grades").
    """
    files = find_files(path)
    docs_name, rel_name = files["documents"].name, files["relevance"].name
    docs = []
    for doc_id, fields in parse_records(files["documents"]).items():
        title, abstract = fields.get("T", ""), fields.get("W", "")
        repeats_title = abstract.lower().startswith(title.lower())  # 12 CISI abstracts; no title
        text = abstract if repeats_title else "\n".join(filter(None, (title, abstract)))
        docs.append({"doc_id": doc_id, "title": title, "text": text})
    queries = [{"qid": qid, "text": fields.get("W") or fields.get("T", ""),   # .T if no .W
                "title": fields.get("T", "")}
               for qid, fields in parse_records(files["queries"]).items()]

    notes = repeated_texts(docs)
    triples = parse_relevance(files["relevance"])
    reading = grade_reading([g for _, _, g in triples], grades)
    relevant = [(q, d, gain(g, reading)) for q, d, g in triples if gain(g, reading) > 0]
    if len(relevant) < len(triples):
        notes.append(f"dropped {len(triples) - len(relevant)} judgements that the {reading} "
                     f"reading counts as not relevant")
    unknown = {q for q, _, _ in relevant} - {q["qid"] for q in queries}
    if unknown:
        raise ValueError(f"{rel_name} judges queries that {files['queries'].name} does not "
                         f"have (e.g. {', '.join(sorted(unknown)[:5])}): are the files from "
                         f"the same collection?")
    doc_ids = {d["doc_id"] for d in docs}
    known = [t for t in relevant if t[1] in doc_ids]
    if relevant and not known:
        raise ValueError(f"{rel_name} names no document of {docs_name}: are the files from "
                         f"the same collection?")
    if len(known) < len(relevant):
        notes.append(f"dropped {len(relevant) - len(known)} judgements of documents that are "
                     f"not in {docs_name}")
    qrels = {}
    for qid, doc_id, g in known:
        gains = qrels.setdefault(qid, {})
        gains[doc_id] = max(g, gains.get(doc_id, 0))          # a repeated pair: keep the best
    counts = {"docs": len(docs), "queries": len(queries), "judged_queries": len(qrels),
              "pairs": sum(len(g) for g in qrels.values())}
    return {"docs": docs, "queries": queries, "qrels": qrels, "counts": counts,
            "files": {role: p.name for role, p in files.items()}, "notes": notes,
            "grades": reading}


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
