"""ragkit/documents.py: your own files (--docs FOLDER) read as documents: .md and .txt here, PDF,
HTML, .docx and notebooks through ragkit/readers.py.

    docs = load_documents("my_notes/", exclude=["CHANGELOG.md"])

Every file under the folder that a reader takes becomes a document (a PDF one per page, "a.pdf
p. 3"); what was read is said by type, and every file left out is named with its reason. One
bad file never stops the run. The chunks are ragkit/chunking.py's, the index ragkit/folder_index.py's.
"""

import fnmatch
import os
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ragkit import readers
from ragkit.readers import Unreadable
from ragkit.support import (one_line, plural, printable, Progress, read_jsonl, refuse_empty,
                            regular_file_size, usable_folder)

MAX_FILE_BYTES = 2_000_000   # bigger files are logs and dumps, not notes: skipped with one line
MAX_FOLDER_MB = 200          # bytes of files read from one folder (--max-folder-mb): a docs
                             # folder fits with room; the files past it are skipped and counted
MAX_DEPTH = 32               # folders nested deeper than this are named and skipped
SUFFIXES = (".md", ".txt")
K = 8                        # passages a --docs answer is written from (rageval/tuning.py chose it)
MAX_FRONT_MATTER = 65_536    # characters of front matter read for tags: more is no note's header
MAX_NESTING = 16             # YAML nested deeper is no list of tags (50,000 deep ends PyYAML)
SKIPS_NAMED = 10             # skipped files named one by one; the rest are counted by reason
NOT_UTF8 = re.compile("[\udc80-\udcff]")   # how Python holds the bytes of a name that is not UTF-8


# == Loading a folder =====================================================================
FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.S)


def nesting(text: str) -> int:
    """How deep brackets nest in a text: nesting("a: [1, [2]]") -> 2."""
    depth = deepest = 0
    for char in text:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def split_front_matter(text: str) -> tuple[list[str], str]:
    """(tags, text without front matter), read by PyYAML; a block that is not YAML, is longer
    than MAX_FRONT_MATTER or nests deeper than MAX_NESTING has no tags."""
    import yaml
    match = FRONT_MATTER.match(text)
    if not match:
        return [], text
    block, meta = match.group(1), None
    if len(block) <= MAX_FRONT_MATTER and nesting(block) <= MAX_NESTING:
        try:
            meta = yaml.safe_load(block)
        except (yaml.YAMLError, RecursionError):
            meta = None
    tags = meta.get("tags", []) if isinstance(meta, dict) else []
    tags = [str(t).strip() for t in (tags if isinstance(tags, list) else [tags])
            if isinstance(t, (str, int, float)) and str(t).strip()]
    return tags, text[match.end():]


def skip(rel: str, why: str) -> None:
    """Name a skipped file on stderr: one bad file never stops the run."""
    print(f"[skip] {printable(rel, lines=False)}: {why}", file=sys.stderr)


def checked_bytes(path: Path, root: Path, limit: int, read: bool = True) -> bytes | None:
    """A regular file's bytes, read once (read=False: only checked); Unreadable (with the
    reason) for a link out of the folder, a FIFO or device, a file over `limit` bytes, or one
    the system cannot read."""
    try:
        if root not in path.resolve().parents:
            raise Unreadable("it points outside the folder (a link); not read")
        regular_file_size(path, limit, "not a regular file (a FIFO, a socket or a device); not read",
                          lambda size: f"{size / 1e6:.1f} MB is over the {limit / 1e6:.0f} MB limit for "
                                       f"one file (split it)", error=Unreadable)
        return path.read_bytes() if read else None
    except (OSError, RuntimeError) as exc:                # RuntimeError: a loop of links
        raise Unreadable(f"cannot be read ({getattr(exc, 'strerror', None) or exc})") from None


def read_note(path: Path, root: Path) -> str:
    """The text of one .md or .txt file; Unreadable if it cannot be used."""
    raw = checked_bytes(path, root, MAX_FILE_BYTES)
    if b"\0" in raw:
        raise Unreadable("binary file, not text")
    try:
        return printable(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise Unreadable("not UTF-8 text (re-save it as UTF-8)") from None


def folder_files(root: Path) -> list[Path]:
    """Every file under root, sorted; links to folders are not followed (no loops)."""
    found, todo = [], [root]
    while todo:                                  # a list, not recursion: any depth is safe
        folder = todo.pop()
        rel = folder.relative_to(root).as_posix() + "/"
        if len(folder.relative_to(root).parts) > MAX_DEPTH:
            skip(rel, f"nested more than {MAX_DEPTH} folders deep")
            continue
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            skip(rel, "folder cannot be read")
            continue
        todo += [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
        found += [Path(e.path) for e in entries if not e.is_dir(follow_symlinks=False)]
    return sorted(found)


def read_file(path: Path, rel: str, root: Path, max_pages: int, outputs: bool) -> list[dict]:
    """One file as documents: a note as one, a PDF as one per page that holds text ("a.pdf p. 3",
    so a citation and an --eval label can name the page), any other kind as one. Each names
    the file it comes from ("file"); a PDF's page also its number ("page")."""
    name = printable(rel, lines=False)                # a file name cannot forge a printed line
    suffix = path.suffix.lower()
    if suffix in SUFFIXES:
        tags, body = split_front_matter(read_note(path, root))
        note = {"doc_id": name, "file": name, "title": name, "text": body, "tags": tags}
        return [note] if body.strip() else []
    data = checked_bytes(path, root, readers.MAX_BYTES[suffix], read=suffix not in (".pdf", ".docx"))
    if suffix == ".pdf":                          # PDFium and mammoth read the file themselves
        total, pages = readers.read_pdf(path, max_pages, name)
        if total > max_pages:
            readers.say(f"{name}: read the first {max_pages} of its {total} pages (--max-pages N reads more)")
        if len(pages) < min(total, max_pages):
            readers.say(f"{name}: {min(total, max_pages) - len(pages)} of its pages have no text "
                        f"(scanned pages need OCR)")
        return [reader_document(f"{name} p. {n}", sections, name) | {"page": n} for n, sections in pages]
    if suffix == ".docx":
        sections = readers.docx_sections(path)
    elif suffix == ".ipynb":
        sections = readers.notebook_sections(data, outputs)
    else:
        sections = readers.html_sections(data)
    return [reader_document(name, sections, name)] if any(blocks for _, blocks in sections) else []


def reader_document(doc_id: str, sections: list, file: str) -> dict:
    """A document made by a reader: its sections made safe to print, and its text (what the
    saved index hashes) all of theirs."""
    sections = [(printable(heading, lines=False), [(kind, printable(text)) for kind, text in blocks])
                for heading, blocks in sections]
    text = "\n".join(line for heading, blocks in sections for line in [heading, *(t for _, t in blocks)])
    return {"doc_id": doc_id, "file": file, "title": doc_id, "text": text, "tags": [], "sections": sections}


def bytes_to_read(path: Path) -> int:
    """What a reader would read of `path`: its size, or 0 for a file no reader (or no installed
    extra) takes, or one over its own limit (skipped for that, unread)."""
    suffix = path.suffix.lower()
    limit = MAX_FILE_BYTES if suffix in SUFFIXES else readers.MAX_BYTES.get(suffix)
    if limit is None or (suffix in readers.EXTRAS and readers.missing(suffix)):
        return 0
    try:
        size = os.stat(path).st_size
    except OSError:                               # reading it will say why
        return 0
    return size if size <= limit else 0


def load_documents(folder, exclude=(), max_pages: int = readers.MAX_PAGES,
                   outputs: bool = False, max_bytes: int = MAX_FOLDER_MB * 1_000_000) -> list[dict]:
    """Every file under `folder` that a reader takes, as {doc_id, title, text, tags} (and the
    sections a reader made); doc_id is the path inside the folder, which `exclude`'s glob
    patterns match ("reference/*"). Files are read in path order until `max_bytes` are read;
    a file that would take the total past it is skipped. What was read and what was skipped
    is said on stderr."""
    if not str(folder).strip():
        raise ValueError("--docs needs a folder path, got an empty string")
    root = Path(folder).expanduser().resolve()
    if root.is_file():
        raise ValueError(f"--docs {folder} is a file: pass the folder that holds your notes")
    if not root.is_dir():
        raise FileNotFoundError(f"document folder not found: {folder}")
    paths = [path for path in folder_files(root)
             if not any(fnmatch.fnmatch(path.relative_to(root).as_posix(), pattern)
                        for pattern in exclude or ())]
    docs, read, skipped, needed, over, used = [], Counter(), [], {}, [], 0
    with Progress("reading files", len(paths), " files") as bar:   # shows if it takes a while
        for path in paths:
            rel = path.relative_to(root).as_posix()
            bar.update(0, now=rel)                # a slow file (a long PDF) is named while it reads
            size = bytes_to_read(path)
            if used + size > max_bytes:           # past the folder's budget: counted, not read
                over.append(rel)
                found = []
            else:
                used += size
                found = read_one(path, rel, root, max_pages, outputs, skipped, needed)
            bar.update(1)
            if found:
                docs += found
                read[path.suffix.lower()] += 1
    if not docs:                          # one line: each skipped file was named as it was met
        installs = "".join(f"; {plural(len(names), 'file')} need{'s' if len(names) == 1 else ''} "
                           f"{packages} (.venv/bin/pip install {packages})"
                           for packages, names in needed.items())
        if over:
            installs += f"; {past_budget(len(over), max_bytes)}"
        raise ValueError(f"no readable .md or .txt files (nor {', '.join(sorted(readers.EXTRAS))}) "
                         f"in {folder}{installs}")
    print_read_and_skipped(read, docs, skipped, needed)
    if over:
        print(f"skipped {past_budget(len(over), max_bytes)}", file=sys.stderr)
    return docs


def past_budget(files: int, max_bytes: int) -> str:
    """past_budget(12, 200_000_000) -> "12 files past the 200 MB folder budget (--max-folder-mb
    raises it)"."""
    return (f"{plural(files, 'file')} past the {max_bytes / 1e6:g} MB folder budget "
            f"(--max-folder-mb raises it)")


def read_one(path: Path, rel: str, root: Path, max_pages: int, outputs: bool,
             skipped: list, needed: dict) -> list[dict]:
    """One file's documents, or [] with the reason added to `skipped` (or its missing extra's
    install to `needed`); the reason of a bad file is also said at once on stderr."""
    suffix = path.suffix.lower()
    if NOT_UTF8.search(rel):                  # it cannot be cited, saved or hashed as text
        skip(rel, "its name is not UTF-8 text (rename it)")
        skipped.append((rel, "its name is not UTF-8 text"))
    elif suffix not in SUFFIXES and suffix not in readers.EXTRAS:
        skipped.append((rel, "no reader"))
    elif suffix in readers.EXTRAS and readers.missing(suffix):
        needed.setdefault(readers.EXTRAS[suffix][2], []).append(rel)
    else:
        try:
            found = read_file(path, rel, root, max_pages, outputs)
        except Exception as exc:    # a damaged file can fail anywhere inside a parsing library
            why = str(exc) if isinstance(exc, Unreadable) else \
                f"could not be read ({type(exc).__name__}: {one_line(exc)[:200]})"
            skip(rel, why)
            skipped.append((rel, why))
            return []
        if not found:                 # an empty note, a page with no main text
            skipped.append((rel, "no text"))
        return found
    return []


def print_read_and_skipped(read: Counter, docs: list, skipped: list, needed: dict) -> None:
    """What a folder gave, by type, and every file left out with its reason, on stderr:
    "read 3 files: 2 .md, 1 .pdf (9 pages)" and "skipped 2: a.pptx (no reader), ...". A
    missing extra gets one line naming its files and the install that reads them."""
    pages = sum(1 for d in docs if "page" in d)
    kinds = ", ".join(f"{n} {suffix}" + (f" ({pages} pages)" if suffix == ".pdf" else "")
                      for suffix, n in sorted(read.items()))
    print(f"read {sum(read.values())} files" + (f": {kinds}" if kinds else ""), file=sys.stderr)
    for packages, names in needed.items():
        print(f"[skip] {plural(len(names), 'file')} need{'s' if len(names) == 1 else ''} {packages}: "
              f"{', '.join(printable(n, lines=False) for n in names[:SKIPS_NAMED])}"
              f"{' ...' if len(names) > SKIPS_NAMED else ''} (.venv/bin/pip install {packages})",
              file=sys.stderr)
        skipped = skipped + [(name, f"needs {packages}") for name in names]
    if skipped:
        named = ", ".join(f"{printable(name, lines=False)} ({why})" for name, why in skipped[:SKIPS_NAMED])
        more = Counter(why for _, why in skipped[SKIPS_NAMED:])
        counted = ", ".join(f"{why}: {n}" for why, n in more.most_common())
        rest = f" and {sum(more.values())} more ({counted})"
        print(f"skipped {len(skipped)}: {named}" + (rest if more else ""), file=sys.stderr)


def print_biggest_file(chunks: list[dict], files: dict) -> None:
    """Name the file with the most chunks: a changelog can crowd every answer (--exclude GLOB).
    files: doc_id -> the file it comes from (a PDF's pages: one file)."""
    counts = Counter(files.get(c["doc_id"], c["doc_id"]) for c in chunks)
    if len(counts) > 1:
        name, n = counts.most_common(1)[0]
        print(f"most chunks: {printable(name, lines=False)} ({n} of {len(chunks)}, {n / len(chunks):.0%}; "
              f"--exclude GLOB leaves a file out)")


# == For the command line (ragkit/cli.py) =================================================
@dataclass(frozen=True)
class Reading:
    """How a folder is read: --exclude, --max-pages, --notebook-outputs, --max-folder-mb."""
    exclude: tuple = ()
    max_pages: int = readers.MAX_PAGES
    notebook_outputs: bool = False
    max_folder_mb: int = MAX_FOLDER_MB


def load_folder(folder, reading: Reading = Reading()) -> list[dict]:
    """load_documents(folder, ...) read as `reading` says."""
    return load_documents(folder, list(reading.exclude), reading.max_pages, reading.notebook_outputs,
                          reading.max_folder_mb * 1_000_000)


def check_paths(docs: str | None, index: str | None, eval_file: str | None, exclude: tuple) -> None:
    """--docs, --index, --eval and --exclude: what can be checked before any slow work."""
    refuse_empty({"--docs": docs, "--index": index, "--eval": eval_file}, "a path")
    if not all(pattern.strip() for pattern in exclude):
        raise ValueError("--exclude needs a pattern, got an empty string")
    if index:
        usable_folder(index, "--index", read_only_ok=True)     # a saved index is read from it


# == --eval: your labelled questions ===============================================================
# your own labelled questions (--eval FILE with --docs), read and checked.
#
#     eval_set = load_eval_file("qa.jsonl", {d["doc_id"]: d["file"] for d in docs})
#
# One question a line: {"question": "...", "relevant": ["file", ...]}, and if you like the facts a
# right answer states, "answer": ["regex", ...]. Retrieval is scored on the files; "answer in
# context" on the facts: can the passages a prompt gets answer the question at all?


def eval_item(item) -> dict | None:
    """One --eval record: {"question": "...", "relevant": ["file", ...]} (one file: a string),
    with "answer": ["regex", ...], the facts a right answer states, if it has them; None for
    {"question": "...", "answerable": false}, which retrieval cannot be scored on."""
    if isinstance(item, dict) and item.get("answerable") is False:
        return None
    relevant = item.get("relevant") if isinstance(item, dict) else None
    relevant = [relevant] if isinstance(relevant, str) else relevant
    facts = item.get("answer", []) if isinstance(item, dict) else []
    if not (isinstance(item, dict) and isinstance(item.get("question"), str)
            and item["question"].strip() and isinstance(relevant, list) and relevant
            and all(isinstance(r, str) and r for r in relevant)
            and isinstance(facts, list) and all(isinstance(f, str) and f for f in facts)):
        raise ValueError('expected {"question": "...", "relevant": ["file", ...]} (and, if you '
                         'like, "answer": ["regex", ...])')
    try:
        patterns = [re.compile(f, flags=re.I) for f in facts]
    except re.error as exc:
        raise ValueError(f'"answer" holds a bad regular expression: {exc}') from None
    return {"question": item["question"], "relevant": set(relevant), "answer": patterns}


def fact_text(text: str) -> str:
    """Text as a fact's pattern is matched against it: a code span's backticks dropped, so
    "a tool like `build`" states "tool like build"."""
    return text.replace("`", "")


def holds_every_fact(passages: list[dict], item: dict) -> bool:
    """Answer in context: every fact of the question is stated somewhere in these passages."""
    text = fact_text("\n".join(f"{p['title']}\n{p['text']}" for p in passages))
    return all(pattern.search(text) for pattern in item["answer"])


def print_answer_in_context(eval_set, found: list[list[dict]], k: int) -> None:
    """The share of questions with facts whose k passages (found[i]: question i's, as the
    retriever found them) hold every one: what any generator, however good, can answer from."""
    held = [holds_every_fact(passages, item) for item, passages in zip(eval_set, found) if item["answer"]]
    if not held:
        return
    print(f"answer in context: {sum(held) / len(held):.2f} (every fact of the answer in the k={k} "
          f"passages, for {sum(held)} of {len(held)} questions)")


def load_eval_file(path, files: dict | None = None) -> list[dict]:
    """Labelled questions; with files (doc_id -> its file), ids naming no indexed file (and
    questions left empty) go."""
    eval_set = [item for item in read_jsonl(path, eval_item, "evaluation file") if item]
    if not eval_set:
        raise ValueError(f"{path}: every question is marked unanswerable: retrieval needs some "
                         f"with the files that answer them")
    return eval_set if files is None else indexed_only(eval_set, files, path)


def indexed_only(eval_set: list[dict], files: dict, path) -> list[dict]:
    """The questions of a loaded eval file, each with only the relevant ids that name an
    indexed document (files: its doc_id -> its file; a PDF's name stands for its pages); a
    question left with none goes, named on stderr."""
    doc_ids, pages = set(files), {}              # a PDF's name stands for every page of it
    for doc_id, file in files.items():
        pages.setdefault(file, set()).add(doc_id)
    eval_set = [{**item, "relevant": {p for r in item["relevant"] for p in pages.get(r, {r})}}
                for item in eval_set]
    unknown = sorted({r for item in eval_set for r in item["relevant"]} - doc_ids)
    kept = [{**item, "relevant": item["relevant"] & doc_ids} for item in eval_set
            if item["relevant"] & doc_ids]
    if not kept:
        raise ValueError(f"{path}: no question names a file that was indexed (e.g. "
                         f"{', '.join(unknown[:3])}); relevant ids are paths inside --docs, "
                         f"like {min(doc_ids)!r}")
    if unknown:
        names = ", ".join(printable(u, lines=False) for u in unknown[:5])
        print(f"[warn] {printable(str(path), lines=False)}: {plural(len(unknown), 'relevant id')} "
              f"{'names' if len(unknown) == 1 else 'name'} no indexed file and "
              f"{'is' if len(unknown) == 1 else 'are'} left out ({names}"
              f"{' ...' if len(unknown) > 5 else ''}); {len(eval_set) - len(kept)} of "
              f"{len(eval_set)} questions dropped", file=sys.stderr)
    return kept
