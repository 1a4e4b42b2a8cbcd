"""
ragkit/pdf.py: a PDF's pages as the sections the Markdown reader yields (ragkit/readers.py
reads the other formats, and says which extra each needs).

    read_pdf(Path("manual.pdf"))   -> (40, [(12, [("Install > Linux", [("text", "Run the ...")])]), ...])

PDFium (pypdfium2) reads the text of each page; headings come from the outline (bookmarks);
running headers, footers and page numbers are dropped; words hyphenated across lines are
joined. A PDF without a text layer (a scan) needs OCR first. A file that cannot be read raises
readers.Unreadable; its message is the reason, printed in one line.
"""

import math
import os
import re
import sys
from collections import Counter

from ragkit.children import forked, limit_child, soft_limit
from ragkit.progress import progress
from ragkit.readers import Unreadable, heading_key
from ragkit.text import one_line

MAX_PAGES = 1000         # pages read of one PDF (--max-pages): 500 pages take a few seconds
PROGRESS_PAGES = 100     # a PDF this long shows a progress line while it is read
# PDFium runs in a child process (a fork): a page can make it abort (a Flate bomb whose page
# inflates to 60 MB of text objects wants 6.6 GB, then PDFium aborts the whole process) or
# spin, and neither can be caught in the process it runs in. The child gets at most
# PDF_MEMORY more memory than it started with and PDF_SECONDS of CPU time, plus PAGE_SECONDS
# for each page it has read; past either it dies, and the file is one [skip] line. PDFium's
# and pypdfium2's own messages go nowhere. Without fork (Windows) PDFium runs here, unguarded.
PDF_MEMORY = 384 << 20   # bytes of address space; the papers in the tests take under 40 MB
PDF_SECONDS = 5          # of CPU: to open the file and read its first page; a page takes about 7 ms
PAGE_SECONDS = 0.05      # of CPU, added for each page read
PDF_SILENCE_S = 60       # wall-clock seconds the child may send nothing (a file on a stalled disk)
MAX_PAGE_CHARS = 50_000  # of one page's text; a dense page holds 5,000; the rest is cut, saying so.
                         # It bounds what Python does with a page, not what PDFium spends building
                         # the page's text first: PDF_MEMORY and PAGE_SECONDS bound that
MAX_BOOKMARKS = 10_000   # of the outline, in reading order (20,000 take PDFium 3 s); pypdfium2
                         # reads 15 levels deep, and a deeper bookmark is left out without a word
LIGATURES = str.maketrans({"\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi",
                           "\ufb04": "ffl", "\ufb05": "st", "\ufb06": "st"})
EDGE = 3                 # lines at the top and the bottom of a page where headers and footers sit


def open_pdf(path):
    """The PDF opened by PDFium; Unreadable if it needs a password or is damaged."""
    import pypdfium2 as pdfium
    try:
        return pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as exc:
        if exc.err_code == pdfium.raw.FPDF_ERR_PASSWORD:
            raise Unreadable("encrypted: it needs a password (save a copy without one)") from None
        if exc.err_code == pdfium.raw.FPDF_ERR_SECURITY:
            raise Unreadable("encrypted with a scheme PDFium cannot open") from None
        raise Unreadable(f"damaged or not a PDF ({one_line(exc)})") from None


def page_lines(pdf, n: int) -> list[str]:
    """The non-empty lines of page n, ligatures written out (the 'ﬁ' glyph becomes 'fi'); a
    page of more than MAX_PAGE_CHARS characters is cut there, and its last line says so."""
    page = pdf[n]
    textpage = page.get_textpage()
    try:
        count = textpage.count_chars()
        text = textpage.get_text_range(0, min(count, MAX_PAGE_CHARS))
    finally:
        textpage.close()
        page.close()
    text = text.translate(LIGATURES).replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    cut = [f"[... {count - MAX_PAGE_CHARS:,} more characters on this page]"] if count > MAX_PAGE_CHARS else []
    return [line.strip() for line in text.split("\n") if line.strip()] + cut


def outline(pdf, pages: int) -> dict:
    """page index -> [(level, title), ...] of the bookmarks that point into the pages read (the
    first MAX_BOOKMARKS of the outline, 15 levels deep at most)."""
    from itertools import islice
    marks = {}
    for mark in islice(pdf.get_toc(), MAX_BOOKMARKS):
        dest = mark.get_dest()
        index = dest.get_index() if dest is not None else None
        title = " ".join(mark.get_title().split())
        if index is not None and 0 <= index < pages and title:
            marks.setdefault(index, []).append((mark.level, title))
    return marks


def pdfium_reads(path, max_pages: int):
    """What PDFium reads of a PDF, one item at a time: its page count, the lines of each page
    up to max_pages, then its bookmarks (outline())."""
    pdf = open_pdf(path)
    try:
        count = min(len(pdf), max_pages)
        yield len(pdf)
        for n in range(count):
            yield page_lines(pdf, n)
        yield outline(pdf, count)
    finally:
        pdf.close()


def pdfium_child(path, max_pages: int, send) -> None:
    """The child: its limits set, stderr sent nowhere, each item of pdfium_reads sent as
    ("item", value), then ("done", None), or ("error", why) for an unreadable file."""
    import resource
    limit_child(PDF_SECONDS, PDF_MEMORY)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    sys.stderr = open(os.devnull, "w")              # noqa: SIM115 - for the child's whole life
    try:
        for n, item in enumerate(pdfium_reads(path, max_pages)):
            soft_limit(resource.RLIMIT_CPU, math.ceil(PDF_SECONDS + PAGE_SECONDS * n))
            send.send(("item", item))
        send.send(("done", None))
    except Unreadable as exc:
        send.send(("error", str(exc)))
    except MemoryError:
        send.send(("error", f"it needs more than the {PDF_MEMORY >> 20} MB a PDF may use (a PDF bomb?)"))
    except Exception as exc:                        # noqa: BLE001 - the file is at fault, said in one line
        send.send(("error", f"damaged ({type(exc).__name__}: {one_line(exc)[:200]})"))


def pdfium_guarded(path, max_pages: int):
    """pdfium_reads(path, max_pages), worked out in a child process (pdfium_child); Unreadable,
    with the reason, if the child dies, goes silent or finds the file unreadable."""
    import multiprocessing
    import signal
    receive, send = multiprocessing.Pipe(duplex=False)
    child = forked(pdfium_child, path, max_pages, send)
    if child is None:                               # no fork (Windows): PDFium runs here
        receive.close()
        send.close()
        yield from pdfium_reads(path, max_pages)
        return
    send.close()
    items = 0
    try:
        while True:
            if not receive.poll(PDF_SILENCE_S):
                raise Unreadable(f"PDFium sent nothing for {PDF_SILENCE_S} s (a stalled disk?)")
            try:
                kind, value = receive.recv()
            except EOFError:                        # the child died: PDFium aborted or was stopped
                child.join()
                where = f"on page {items}" if items else "opening it"
                if child.exitcode == -signal.SIGXCPU:
                    raise Unreadable(f"PDFium took too long {where} ({PDF_SECONDS} s for the first "
                                     f"page, {PAGE_SECONDS * 1000:.0f} ms a page after it)") from None
                raise Unreadable(f"PDFium stopped {where}: it needs more than the {PDF_MEMORY >> 20} MB "
                                 f"a PDF may use (a PDF bomb?), or is damaged (exit {child.exitcode})"
                                 ) from None
            if kind == "error":
                raise Unreadable(value)
            if kind == "done":
                return
            items += 1
            yield value
    finally:
        if child.is_alive():
            child.kill()
        child.join()
        receive.close()


def margin_key(line: str) -> str:
    """A line as headers and footers repeat it: 'Page 3 of 9' and 'Page 4 of 9' -> 'page # of #'."""
    return re.sub(r"\d+", "#", " ".join(line.lower().split()))


def without_margins(pages: list[list[str]]) -> list[list[str]]:
    """Pages without their running headers and footers: a line among the first or last EDGE
    of a page that recurs there (numbers aside) on at least half the pages, and on 2 or more
    (a two-page leaflet's header is on both)."""
    edges = (lines[:EDGE] + lines[-EDGE:] for lines in pages)
    counts = Counter(key for lines in edges for key in {margin_key(line) for line in lines})
    repeated = {key for key, n in counts.items() if n >= max(2, len(pages) / 2)}
    out = []
    for lines in pages:
        top, bottom = min(EDGE, len(lines)), max(len(lines) - EDGE, min(EDGE, len(lines)))
        kept = [line for i, line in enumerate(lines)
                if not ((i < top or i >= bottom) and margin_key(line) in repeated)]
        out.append(kept or lines)        # pages alike but for their numbers (a form) keep their text
    return out


# PDFium marks a hyphen that ended a line with U+FFFE. The words on either side of a mark are
# found by matching at the start of the piece after it and of the reversed piece before it,
# never by searching: the pattern (\w+)\ufffe\s*(\w+) backtracked through every long word (13 s
# for one word of 40,000 letters, minutes for longer ones).
MARK = re.compile("(\ufffe\\s*)")
WORD = re.compile(r"\w+")


def broken_words(text: str) -> tuple[list, list, list]:
    """(pieces, marks, pairs): the text between PDFium's line-end marks, the marks (with the
    spaces after them), and for each mark the word before it and the word after it ("" where
    there is none): "con\ufffe sists" -> (["con", "sists"], ["\ufffe "], [("con", "sists")])."""
    parts = MARK.split(text)
    pieces, marks = parts[0::2], parts[1::2]
    pairs = []
    for left, right in zip(pieces, pieces[1:]):
        before, after = WORD.match(left[::-1]), WORD.match(right)
        pairs.append((before.group(0)[::-1] if before else "", after.group(0) if after else ""))
    return pieces, marks, pairs


def words_of(text: str) -> set:
    """The words of a text in lower case, but for the halves of a word broken at a line end."""
    if "\ufffe" not in text:
        return set(WORD.findall(text.lower()))
    pieces, _, pairs = broken_words(text)
    found = set()
    for i, piece in enumerate(pieces):
        start = len(pairs[i - 1][1]) if i and all(pairs[i - 1]) else 0
        end = len(piece) - (len(pairs[i][0]) if i < len(pairs) and all(pairs[i]) else 0)
        found |= set(WORD.findall(piece[start:max(start, end)].lower()))
    return found


def dehyphenate(text: str, words: set) -> str:
    """Join a word PDFium found hyphenated at a line end ("con-" "sists" -> "consists"), but keep
    the hyphen of a compound ("pulse-" "width") when the joined word never occurs in the document
    and both halves do. A mark with no word on one side is a plain hyphen."""
    if "\ufffe" not in text:
        return text
    pieces, marks, pairs = broken_words(text)
    out = [pieces[0]]
    for (a, b), mark, piece in zip(pairs, marks, pieces[1:]):
        if a and b:
            out.append("" if (a + b).lower() in words or not {a.lower(), b.lower()} <= words else "-")
        else:
            out.append("-" + mark[1:])
        out.append(piece)
    return "".join(out)


def title_keys(line: str, longest: int) -> list[str]:
    """The bookmark titles a line could be, as heading_key()s: the line itself, and the line
    without a number in front ('2 Related Work', 'A.1 Prompts', '3.1.2 Set-up'). A line much
    longer than the longest title is none."""
    key = heading_key(line)
    if len(key) > longest + 40:
        return []
    words, keys = key.split(" "), [key]
    if re.fullmatch(r"\d+|[a-z]", words[0]):
        keys.append(" ".join(words[1:]))
        for n in range(1, min(len(words) - 1, 8)):      # a section number of up to 8 parts
            if not words[n].isdigit():
                break
            keys.append(" ".join(words[n + 1:]))
    return keys


def bookmark_at(line: str, titles: dict, start: int, longest: int):
    """The position of the first bookmark from `start` on whose title the line is, or None;
    titles: heading_key(title) -> the positions of the bookmarks that bear it, in order."""
    import bisect
    found = None
    for key in title_keys(line, longest) if titles else []:
        positions = titles.get(key, [])
        k = bisect.bisect_left(positions, start)
        if k < len(positions) and (found is None or positions[k] < found):
            found = positions[k]
    return found


def page_sections(lines: list[str], marks: list, path: list) -> tuple[list, list]:
    """(sections, heading path at the page's end): the page's lines cut where a bookmarked
    heading of this page stands. A bookmark whose title is not found on its own line (a long
    title broken over two) takes effect at the next one that is, or at the page's end. Each
    line is looked up once (20,000 bookmarks each tried on every line of their page hung)."""
    titles = {}
    for j, (_, title) in enumerate(marks):
        if heading_key(title):
            titles.setdefault(heading_key(title), []).append(j)
    longest = max(map(len, titles), default=0)
    sections, current, start = [], [], 0       # marks[start:] are still to be found
    for line in lines:
        found = bookmark_at(line, titles, start, longest)
        if found is None:
            current.append(line)
            continue
        sections.append((path, current))
        for level, title in marks[start:found + 1]:
            path = path[:level] + [title]
        current, start = [], found + 1
    sections.append((path, current))
    for level, title in marks[start:]:
        path = path[:level] + [title]
    return [(" > ".join(p), lines) for p, lines in sections if lines], path


def read_pdf(path, max_pages: int = MAX_PAGES, name: str = "") -> tuple[int, list]:
    """(pages in the file, [(page number, sections), ...]) for the pages that hold text, up to
    max_pages; Unreadable if none does (a scan: it needs OCR), or if PDFium fails on it."""
    items = pdfium_guarded(path, max_pages)
    try:
        total = next(items)
        count = min(total, max_pages)
        numbers = range(count)
        if count >= PROGRESS_PAGES:
            numbers = progress(numbers, count, f"reading {name or path}", " pages")
        pages = without_margins([next(items) for _ in numbers])
        marks = next(items)
    finally:
        items.close()                   # the child is ended, whatever happened
    if not any(pages):
        raise Unreadable("no text layer: needs OCR")
    words = set().union(*(words_of("\n".join(lines)) for lines in pages))
    out, path_now = [], []
    for n, lines in enumerate(pages):
        sections, path_now = page_sections(lines, marks.get(n, []), path_now)
        out.append((n + 1, [(heading, [("text", dehyphenate(" ".join(text), words))])
                            for heading, text in sections]))
    return total, [(n, sections) for n, sections in out if sections]
