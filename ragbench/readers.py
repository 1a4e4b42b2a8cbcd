"""
ragbench/readers.py: bad files against the --docs readers, measured. Each must cost one line
on stderr while the run goes on, in under 10 s and under 500 MB more than the same run without it.

    python -m ragbench.readers                  # one row per bad file (about a minute)

Each bad file is made here (the tests make small ones with the same functions), put in a folder
beside one Markdown note, and read by load_documents in a fresh process; the row gives the
seconds that took and its peak memory above the same process on the note alone.
"""

import subprocess
import sys
import tempfile
import zipfile
import zlib
from pathlib import Path

from ragkit import support
from ragkit.support import one_line

LIMIT_S, LIMIT_MB = 10, 500
NOTE = "# Pump notes\n\nThe P-200 pump is primed with water before its first start.\n"


# == Bad files, made to measure =============================================================
def make_pdf(path, pages: list[str], password: str = None) -> Path:
    """A PDF with one paragraph per page (fpdf2), locked with `password` if one is given."""
    import textwrap

    from fpdf import FPDF
    pdf = FPDF()
    if password:
        pdf.set_encryption(owner_password="owner", user_password=password)
    pdf.set_font("helvetica", size=11)
    for text in pages:
        pdf.add_page()
        for n, line in enumerate(textwrap.wrap(text, 90)):    # placed line by line: fpdf2's own
            pdf.text(20, 20 + 6 * n, line)                     # wrapping takes a minute for 500 pages
    pdf.output(str(path))
    return Path(path)


def make_long_pdf(path, pages: int = 500) -> Path:
    """A PDF of `pages` full pages (about 450 words each), each naming its page and valve."""
    filler = ("Each valve is opened slowly so that the pressure in the line rises evenly, and the "
              "gauge is read again after five minutes of steady running. ") * 15
    return make_pdf(path, [f"{filler[:600]}Valve {n} is checked every {n % 12 + 1} months, and its "
                           f"seal is replaced when it weeps. {filler[600:]}" for n in range(1, pages + 1)])


def make_damaged_pdf(path) -> Path:
    """A PDF cut short after its first 600 bytes, as an interrupted download leaves it."""
    whole = make_pdf(Path(path).with_suffix(".tmp"), ["A page that will not arrive whole."] * 3)
    Path(path).write_bytes(whole.read_bytes()[:600])
    whole.unlink()
    return Path(path)


def make_scan_pdf(path) -> Path:
    """A PDF holding only a picture of text (Pillow), as a scanner makes it: no text layer."""
    from PIL import Image, ImageDraw
    image = Image.new("L", (850, 1100), 255)
    ImageDraw.Draw(image).text((80, 80), "Scanned page: the pump must be primed first.", fill=0)
    image.save(path, "PDF")
    return Path(path)


def make_script_html(path, megabytes: int = 50) -> Path:
    """A saved page whose inline script is `megabytes` MB, around one paragraph of text."""
    line = "var state = {pump: 'P-200', primed: false, valves: [1, 2, 3, 4, 5, 6]};\n"
    script = line * (megabytes * 1_000_000 // len(line))
    Path(path).write_text(f"<html><head><title>Pump page</title><script>{script}</script></head>"
                          f"<body><main><h1>Pump page</h1><p>The P-200 pump holds 6 bar.</p></main>"
                          f"</body></html>", encoding="utf-8")
    return Path(path)


def make_zip_bomb_docx(path, megabytes: int = 1024) -> Path:
    """A .docx whose document.xml inflates to `megabytes` MB of zeros (a file of about 1/1000)."""
    block = b"\0" * (1 << 20)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open("word/document.xml", "w", force_zip64=True) as member:
            for _ in range(megabytes):
                member.write(block)
    return Path(path)


def make_outputs_notebook(path, megabytes: int = 100) -> Path:
    """A notebook of 20 code cells whose outputs (plots, as PNG in base64) add up to `megabytes` MB."""
    import nbformat
    notebook = nbformat.v4.new_notebook()
    picture = "iVBORw0KGgo" + "A" * (megabytes * 1_000_000 // 20)
    notebook.cells = [nbformat.v4.new_markdown_cell("# Pressure plots\n\nEach cell plots one day.")]
    for day in range(20):
        cell = nbformat.v4.new_code_cell(f"plot_pressure(day={day})")
        cell.outputs = [nbformat.v4.new_output("display_data", data={"image/png": picture,
                                                                     "text/plain": "<Figure>"})]
        notebook.cells.append(cell)
    Path(path).write_text(nbformat.writes(notebook), encoding="utf-8")
    return Path(path)


# -- Shapes that cost a naive reader minutes or gigabytes (each made small by a few bytes) ------
def raw_pdf(path, contents: list[bytes], outline: list = (), tangled: bool = False) -> Path:
    """A PDF written by hand, for shapes fpdf2 will not make: each page one Flate-compressed
    content stream, and an outline of (title, page index, depth) entries in reading order;
    tangled: each entry's first child is its next sibling too (a damaged outline)."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R /Outlines 3 0 R >>", b"", b"",
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    pages = []
    for content in contents:
        packed = zlib.compress(content, 9)
        objects.append(b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream"
                       % (len(packed), packed))
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                       b"/Resources << /Font << /F1 4 0 R >> >> >>" % len(objects))
        pages.append(len(objects))
    kids = b" ".join(b"%d 0 R" % n for n in pages)
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, len(pages))
    first = len(objects) + 1                            # the object number of the outline's first entry
    links, root, path_now = [{} for _ in outline], {}, []     # path_now: (depth, entry) above this one
    for i, (_, _, depth) in enumerate(outline):
        while path_now and path_now[-1][0] >= depth:
            path_now.pop()
        parent = links[path_now[-1][1]] if path_now else root
        links[i]["Parent"] = first + path_now[-1][1] if path_now else 3
        if "Last" in parent:
            links[parent["Last"] - first]["Next"], links[i]["Prev"] = first + i, parent["Last"]
        parent.setdefault("First", first + i)
        parent["Last"] = first + i
        path_now.append((depth, i))
    for entry in links if tangled else []:
        if "First" in entry:
            entry.setdefault("Next", entry["First"])
    refs = lambda named: b"".join(b" /%s %d 0 R" % (key.encode(), n) for key, n in named.items())
    objects[2] = b"<< /Type /Outlines%s >>" % refs(root)
    objects += [b"<< /Title (%s) /Dest [%d 0 R /Fit]%s >>" % (title.encode(), pages[page], refs(links[i]))
                for i, (title, page, _) in enumerate(outline)]
    out, offsets = bytearray(b"%PDF-1.7\n"), []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (n, body)
    xref = b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += (b"xref\n0 %d\n0000000000 65535 f \n%s" % (len(objects) + 1, xref)
            + b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, len(out)))
    Path(path).write_bytes(bytes(out))
    return Path(path)


def text_stream(lines: list[str], size: float = 10) -> bytes:
    """A page's content stream: one line of text after another, `size` points high."""
    shown = b"".join(b"(%s) Tj T*\n" % line.encode("latin-1") for line in lines)
    return b"BT /F1 %g Tf %g TL 20 780 Td\n%sET\n" % (size, size * 1.2, shown)


def make_long_word_pdf(path, chars: int = 200_000) -> Path:
    """One page whose text is a single word of `chars` letters (a file of under 1 KB)."""
    shown = b"(%s) Tj\n" % (b"a" * 20_000) * (chars // 20_000)
    return raw_pdf(path, [b"BT /F1 10 Tf 20 780 Td\n" + shown + b"ET\n"])


def make_outline_pdf(path, entries: int = 20_000, pages: int = 20, lines: int = 1_000) -> Path:
    """`pages` pages of `lines` lines each, and `entries` bookmarks spread over them whose titles
    no line shows, so every line is a candidate for every bookmark of its page."""
    page = text_stream([f"Line {n}: the valve is opened slowly." for n in range(lines)], size=0.6)
    return raw_pdf(path, [page] * pages, [(f"Section {n}", n * pages // entries, 0) for n in range(entries)])


def make_deep_outline_pdf(path, depth: int = 10_000) -> Path:
    """One page and an outline `depth` bookmarks deep, each the child and the next sibling of
    the one before: a reader that stops at some depth meets that depth at every bookmark."""
    return raw_pdf(path, [text_stream(["The pump is primed with water."])],
                   [(f"Level {n}", 0, n) for n in range(depth)], tangled=True)


def make_flate_bomb_pdf(path, megabytes: int = 60) -> Path:
    """One page whose content stream inflates to `megabytes` MB of one-letter text objects."""
    return raw_pdf(path, [b"BT /F1 10 Tf 20 780 Td\n" + b"(a) Tj\n" * (megabytes * 1_000_000 // 7) + b"ET\n"])


DOCX_TYPES = (b'<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/'
              b'content-types"><Default Extension="xml" ContentType="application/xml"/></Types>')
W = b'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


def make_docx(path, body, doctype: bytes = b"") -> Path:
    """A .docx written by hand: word/document.xml holds the pieces of `body` (bytes), written
    one at a time, so a document of hundreds of megabytes costs no memory to make."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", DOCX_TYPES)
        with archive.open("word/document.xml", "w", force_zip64=True) as member:
            member.write(b'<?xml version="1.0" encoding="UTF-8"?>%s<w:document %s><w:body>' % (doctype, W))
            for piece in body:
                member.write(piece)
            member.write(b"</w:body></w:document>")
    return Path(path)


def make_entity_docx(path, references: int = 700_000) -> Path:
    """A .docx whose one paragraph names `references` times an entity that holds a run of text
    (a file of a few KB)."""
    return make_docx(path, [b"<w:p>", b"&e;" * references, b"</w:p>"],
                     doctype=b'<!DOCTYPE w:document [<!ENTITY e "<w:r><w:t>pump </w:t></w:r>">]>')


def make_paragraphs_docx(path, megabytes: float = 20, text: str = "The pump is primed with water.") -> Path:
    """A .docx of `megabytes` MB of paragraphs of `text` (empty: <w:p/> alone)."""
    one = b"<w:p><w:r><w:t>%s</w:t></w:r></w:p>" % text.encode() if text else b"<w:p/>"
    count = int(megabytes * 1_000_000) // len(one)
    return make_docx(path, (one * min(10_000, count - n) for n in range(0, count, 10_000)))


def make_html(path, body: str) -> Path:
    """A page whose <body> is `body`."""
    Path(path).write_text(f"<html><head><title>Pump page</title></head><body>{body}</body></html>",
                          encoding="utf-8")
    return Path(path)


def make_random_html(path, megabytes: float = 10, seed: int = 0) -> Path:
    """A page of `megabytes` MB of tag soup: random tags, opened and closed at random, and words."""
    import random
    pick, parts, size = random.Random(seed), [], 0
    tags = ["p", "div", "span", "b", "i", "a", "li", "ul", "table", "td", "tr", "pre", "code", "h2", "em"]
    while size < megabytes * 1_000_000:
        tag = pick.choice(tags)
        part = pick.choice([f"<{tag}>", f"</{tag}>", f"<{tag} class=c{pick.randrange(99)}>", "pump ", " \n "])
        parts.append(part)
        size += len(part)
    return make_html(path, "".join(parts))


def make_cells_notebook(path, cells: int = 1_000_000) -> Path:
    """A notebook of `cells` empty Markdown cells."""
    cell = '{"cell_type": "markdown", "metadata": {}, "source": []}'
    Path(path).write_text('{"cells": [' + ", ".join([cell] * cells) + '], "metadata": {}, "nbformat": 4, '
                          '"nbformat_minor": 5}', encoding="utf-8")
    return Path(path)


def make_long_line_notebook(path, megabytes: float = 10) -> Path:
    """A notebook whose one code cell is a single line of `megabytes` MB."""
    import nbformat
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell("# Data\n\nThe table as one literal."),
                      nbformat.v4.new_code_cell("table = '" + "pump," * int(megabytes * 200_000) + "'")]
    Path(path).write_text(nbformat.writes(notebook), encoding="utf-8")
    return Path(path)


def make_under_caps_docx(path) -> Path:
    """A .docx just under readers.MAX_DOCX_TAGS: 2,800 paragraphs of ten runs (about 118,000 tags)."""
    return make_docx(path, [b"<w:p>" + b"<w:r><w:t>pump </w:t></w:r>" * 10 + b"</w:p>"] * 2_800)


BAD_FILES = {                 # name -> how it is made, full size
    "locked.pdf": lambda path: make_pdf(path, ["The locked page."], password="secret"),
    "damaged.pdf": make_damaged_pdf,
    "scan.pdf": make_scan_pdf,
    "long.pdf": make_long_pdf,
    "long-word.pdf": make_long_word_pdf,
    "outline.pdf": make_outline_pdf,
    "deep-outline.pdf": make_deep_outline_pdf,
    "flate-bomb.pdf": make_flate_bomb_pdf,
    "flate-bomb-300.pdf": lambda path: make_flate_bomb_pdf(path, 300),
    "script.html": make_script_html,
    "spaces.html": lambda path: make_html(path, "<p>pump" + " " * 300_000 + "primed</p>"),
    "space-tabs.html": lambda path: make_html(path, "<p>pump" + " \t" * 200_000 + "primed</p>"),
    "tiny-tags.html": lambda path: make_html(path, "<i>a</i>" * 625_000),
    "tiny-tags-50.html": lambda path: make_html(path, "<i>a</i>" * 6_250_000),
    "random.html": make_random_html,
    "under-caps.html": lambda path: make_html(path, "<p>The pump is primed.</p>" * 24_900),   # 49,800 tags
    "comment.html": lambda path: make_html(path, "<p>The pump.</p><!--" + "pump " * 12_600_000),
    "url.html": lambda path: Path(path).write_text("https://example.com/pump-manual") and Path(path),
    "bomb.docx": make_zip_bomb_docx,
    "not-a-zip.docx": lambda path: Path(path).write_bytes(b"PK\x03\x04 not a zip after all") and Path(path),
    "entities.docx": make_entity_docx,
    "empty-paragraphs.docx": lambda path: make_paragraphs_docx(path, 20, ""),
    "paragraphs.docx": make_paragraphs_docx,
    "paragraphs-240.docx": lambda path: make_paragraphs_docx(path, 240),
    "under-caps.docx": make_under_caps_docx,
    "outputs.ipynb": make_outputs_notebook,
    "broken.ipynb": lambda path: Path(path).write_text('{"cells": [', encoding="utf-8") and Path(path),
    "cells.ipynb": make_cells_notebook,
    "long-line.ipynb": make_long_line_notebook,
    "under-caps.ipynb": lambda path: make_cells_notebook(path, 9_999),
}


# == Measuring ==============================================================================
# The child's peak memory is VmHWM, its own address space's high-water mark: ru_maxrss would
# carry over the parent's, which made a 100 MB notebook just before (Linux keeps it across exec).
# PDFium reads in a process of its own (pdf.pdfium_guarded): the larger of the two peaks counts.
CHILD = """
import re, resource, sys, time
from pathlib import Path
from ragkit.documents import load_documents
start = time.perf_counter()
docs = load_documents(sys.argv[1])
seconds = time.perf_counter() - start
status = Path("/proc/self/status")
peak = (int(re.search(r"VmHWM:\\s*(\\d+)", status.read_text()).group(1)) if status.exists()
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024
peak = max(peak, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
print(f"{seconds:.2f} {peak:.0f} {len(docs)}")
"""


def measure(folder: Path) -> tuple[float, float, int, list[str]]:
    """(seconds, peak MB, documents, stderr lines) of load_documents on a folder, in a fresh process."""
    done = subprocess.run([sys.executable, "-c", CHILD, str(folder)], capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).resolve().parent.parent)
    if done.returncode != 0:
        why = one_line(RuntimeError(done.stderr[-300:]))
        raise RuntimeError(f"the reader failed on {folder}: {why}")
    seconds, peak, docs = done.stdout.split()
    return float(seconds), float(peak), int(docs), done.stderr.splitlines()


def run(args) -> None:
    """Make each bad file, read it beside a note, and print seconds and memory against the note alone."""
    with tempfile.TemporaryDirectory(prefix="rag-readers-") as tmp:
        alone = Path(tmp, "alone")
        alone.mkdir()
        (alone / "note.md").write_text(NOTE, encoding="utf-8")
        _, base, _, _ = measure(alone)
        print(f"note alone: peak {base:.0f} MB; limits: {LIMIT_S} s and {LIMIT_MB} MB over it")
        print(f"{'file':<22} {'size':>9} {'seconds':>8} {'MB over':>8} {'docs':>5}  what the run said")
        for name, make in list(BAD_FILES.items())[:args.files]:
            folder = Path(tmp, name.replace(".", "-"))
            folder.mkdir()
            (folder / "note.md").write_text(NOTE, encoding="utf-8")
            size = make(folder / name).stat().st_size
            seconds, peak, docs, said = measure(folder)
            line = next((s for s in said if name in s and s.startswith(("[skip]", "[info]", "reading"))),
                        next((s for s in said if s.startswith("read ")), ""))
            flag = "" if seconds < LIMIT_S and peak - base < LIMIT_MB else "  OVER THE LIMIT"
            print(f"{name:<22} {size / 1e6:>7.1f}MB {seconds:>8.2f} {peak - base:>8.0f} {docs:>5}  "
                  f"{line}{flag}")


def parse_args(argv=None):
    """The sizes are the ones docs/reliability.md names; --files N runs the first N only."""
    p = support.OneLineParser(description="Bad files against the --docs readers: seconds and "
                                           "memory of each.")
    p.add_argument("--files", type=support.bounded(int, 1, len(BAD_FILES)), default=len(BAD_FILES),
                   help="only the first N bad files (default: all %(default)s)")
    return p.parse_args(argv)


main = support.main_for(run, parse_args)


if __name__ == "__main__":
    support.leave(main())
