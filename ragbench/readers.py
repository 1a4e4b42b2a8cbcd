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
from pathlib import Path

from ragkit import plumbing

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


BAD_FILES = {                 # name -> how it is made, full size
    "locked.pdf": lambda path: make_pdf(path, ["The locked page."], password="secret"),
    "damaged.pdf": make_damaged_pdf,
    "scan.pdf": make_scan_pdf,
    "long.pdf": make_long_pdf,
    "script.html": make_script_html,
    "bomb.docx": make_zip_bomb_docx,
    "not-a-zip.docx": lambda path: Path(path).write_bytes(b"PK\x03\x04 not a zip after all") and Path(path),
    "outputs.ipynb": make_outputs_notebook,
    "broken.ipynb": lambda path: Path(path).write_text('{"cells": [', encoding="utf-8") and Path(path),
}


# == Measuring ==============================================================================
# The child's peak memory is VmHWM, its own address space's high-water mark: ru_maxrss would
# carry over the parent's, which made a 100 MB notebook just before (Linux keeps it across exec).
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
print(f"{seconds:.2f} {peak:.0f} {len(docs)}")
"""


def measure(folder: Path) -> tuple[float, float, int, list[str]]:
    """(seconds, peak MB, documents, stderr lines) of load_documents on a folder, in a fresh process."""
    done = subprocess.run([sys.executable, "-c", CHILD, str(folder)], capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).resolve().parent.parent)
    if done.returncode != 0:
        raise RuntimeError(f"the reader failed on {folder}: {plumbing.one_line(RuntimeError(done.stderr[-300:]))}")
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
        print(f"{'file':<16} {'size':>9} {'seconds':>8} {'MB over':>8} {'docs':>5}  what the run said")
        for name, make in BAD_FILES.items():
            folder = Path(tmp, name.replace(".", "-"))
            folder.mkdir()
            (folder / "note.md").write_text(NOTE, encoding="utf-8")
            size = make(folder / name).stat().st_size
            seconds, peak, docs, said = measure(folder)
            line = next((s for s in said if name in s and s.startswith(("[skip]", "[info]", "reading"))),
                        next((s for s in said if s.startswith("read ")), ""))
            flag = "" if seconds < LIMIT_S and peak - base < LIMIT_MB else "  OVER THE LIMIT"
            print(f"{name:<16} {size / 1e6:>7.1f}MB {seconds:>8.2f} {peak - base:>8.0f} {docs:>5}  {line}{flag}")


def parse_args(argv=None):
    """No flags: the sizes are the ones docs/reliability.md names."""
    return plumbing.OneLineParser(description="Bad files against the --docs readers: seconds and "
                                              "memory of each.").parse_args(argv)


main = plumbing.main_for(run, parse_args)


if __name__ == "__main__":
    plumbing.leave(main())
