"""
ragkit/readers.py: PDF, HTML, Word and Jupyter files as the sections the Markdown reader
yields, so chunking, --context, the saved index, filters and citations treat them like notes.

    read_pdf(Path("manual.pdf"))   -> [(12, [("Install > Linux", [("text", "Run the ...")])]), ...]
    html_sections(page_bytes)      -> [("Install", [("text", ...), ("code", "```bash\\n...\\n```")])]

A kept library parses each format, imported only when a file of its kind is met; each is an
optional extra (EXTRAS), and a folder without it is still read, with its files of that kind
named and the `pip install` that reads them:
  .pdf          pypdfium2 (PDFium): the text of each page; headings from the outline (bookmarks);
                running headers, footers and page numbers dropped; words hyphenated across
                lines joined. A PDF without a text layer (a scan) needs OCR first.
  .html, .htm   BeautifulSoup and markdownify: the main content (<main>, else role="main", else
                <article>, else <body>) as Markdown, with no navigation, scripts, styles, SVG,
                forms or cookie banners; then read as Markdown, with <title> as its heading
  .docx         mammoth: headings by style, lists, tables and text as HTML, then as .html
  .ipynb        nbformat: Markdown cells as prose, code cells as code; outputs only if asked
A file that cannot be read raises Unreadable; its message is the reason, printed in one line.
"""

import importlib
import re
import sys
import warnings
from collections import Counter

from ragkit.markdown import read_markdown
from ragkit.plumbing import one_line, progress

# suffix -> (the extra in pyproject.toml, the modules it needs, what `pip install` takes)
EXTRAS = {
    ".pdf": ("pdf", ("pypdfium2",), "pypdfium2"),
    ".html": ("html", ("bs4", "markdownify"), "beautifulsoup4 markdownify"),
    ".htm": ("html", ("bs4", "markdownify"), "beautifulsoup4 markdownify"),
    ".docx": ("docx", ("mammoth", "bs4", "markdownify"), "mammoth beautifulsoup4 markdownify"),
    ".ipynb": ("notebook", ("nbformat",), "nbformat"),
}
MAX_BYTES = {".pdf": 1 << 30, ".html": 64 << 20, ".htm": 64 << 20, ".docx": 128 << 20,
             ".ipynb": 256 << 20}         # a file larger than this is skipped, with one line
MAX_PAGES = 1000         # pages read of one PDF (--max-pages): 500 pages take a few seconds
PROGRESS_PAGES = 100     # a PDF this long shows a progress line while it is read
MAX_UNPACKED = 250_000_000  # bytes a .docx may unpack to: more is a zip bomb, not a document
MAX_OUTPUT_CHARS = 2000  # of one notebook output, with --notebook-outputs


class Unreadable(ValueError):
    """A file that cannot be read; its message says why, in a few words."""


def missing(suffix: str) -> list[str]:
    """The modules a file of this kind needs that cannot be imported (its extra is missing)."""
    absent = []
    for module in EXTRAS[suffix][1]:
        try:
            importlib.import_module(module)
        except ImportError:
            absent.append(module)
    return absent


# == PDF ====================================================================================
LIGATURES = str.maketrans({"\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi",
                           "\ufb04": "ffl", "\ufb05": "st", "\ufb06": "st"})
SOFT_HYPHEN = re.compile(r"(\w+)\ufffe\s*(\w+)")   # PDFium marks a hyphen that ended a line
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
    """The non-empty lines of page n, ligatures written out (the 'ﬁ' glyph becomes 'fi')."""
    page = pdf[n]
    textpage = page.get_textpage()
    try:
        text = textpage.get_text_range()
    finally:
        textpage.close()
        page.close()
    text = text.translate(LIGATURES).replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    return [line.strip() for line in text.split("\n") if line.strip()]


def margin_key(line: str) -> str:
    """A line as headers and footers repeat it: 'Page 3 of 9' and 'Page 4 of 9' -> 'page # of #'."""
    return re.sub(r"\d+", "#", " ".join(line.lower().split()))


def without_margins(pages: list[list[str]]) -> list[list[str]]:
    """Pages without their running headers and footers: a line among the first or last EDGE
    of a page that recurs there (numbers aside) on at least half the pages, and on 2 or more
    (a two-page leaflet's header is on both)."""
    counts = Counter(key for lines in pages for key in {margin_key(line) for line in lines[:EDGE] + lines[-EDGE:]})
    repeated = {key for key, n in counts.items() if n >= max(2, len(pages) / 2)}
    out = []
    for lines in pages:
        top, bottom = min(EDGE, len(lines)), max(len(lines) - EDGE, min(EDGE, len(lines)))
        kept = [line for i, line in enumerate(lines)
                if not ((i < top or i >= bottom) and margin_key(line) in repeated)]
        out.append(kept or lines)        # pages alike but for their numbers (a form) keep their text
    return out


def dehyphenate(text: str, words: set) -> str:
    """Join a word PDFium found hyphenated at a line end ("con-" "sists" -> "consists"), but keep
    the hyphen of a compound ("pulse-" "width") when the joined word never occurs in the document
    and both halves do."""
    def join(match):
        a, b = match.groups()
        if (a + b).lower() in words or not {a.lower(), b.lower()} <= words:
            return a + b
        return f"{a}-{b}"
    return SOFT_HYPHEN.sub(join, text)


def outline(pdf, pages: int) -> dict:
    """page index -> [(level, title), ...] of the bookmarks that point into the pages read."""
    marks = {}
    for mark in pdf.get_toc():
        dest = mark.get_dest()
        index = dest.get_index() if dest is not None else None
        title = " ".join(mark.get_title().split())
        if index is not None and 0 <= index < pages and title:
            marks.setdefault(index, []).append((mark.level, title))
    return marks


def heading_key(text: str) -> str:
    """Words only, lower case: '3.1  Data Analysis' -> '3 1 data analysis'."""
    return " ".join(re.findall(r"\w+", text.lower()))


def is_heading(line: str, title: str) -> bool:
    """A line that is the bookmark's title, perhaps numbered ('2 Related Work', 'A.1 Prompts')."""
    line, title = heading_key(line), heading_key(title)
    return bool(title) and (line == title or re.fullmatch(rf"(?:\d+|[a-z])(?: \d+)* {re.escape(title)}", line) is not None)


def page_sections(lines: list[str], marks: list, path: list) -> tuple[list, list]:
    """(sections, heading path at the page's end): the page's lines cut where a bookmarked
    heading of this page stands. A bookmark whose title is not found on its own line (a long
    title broken over two) takes effect at the next one that is, or at the page's end."""
    sections, current, todo = [], [], list(marks)
    for line in lines:
        found = next((j for j, (_, title) in enumerate(todo) if is_heading(line, title)), None)
        if found is None:
            current.append(line)
            continue
        sections.append((path, current))
        for level, title in todo[:found + 1]:
            path = path[:level] + [title]
        current, todo = [], todo[found + 1:]
    sections.append((path, current))
    for level, title in todo:
        path = path[:level] + [title]
    return [(" > ".join(p), lines) for p, lines in sections if lines], path


def read_pdf(path, max_pages: int = MAX_PAGES, name: str = "") -> tuple[int, list]:
    """(pages in the file, [(page number, sections), ...]) for the pages that hold text, up to
    max_pages; Unreadable if none does (a scan: it needs OCR)."""
    import pypdfium2 as pdfium
    pdf = open_pdf(path)
    try:
        total = len(pdf)
        count = min(total, max_pages)
        numbers = range(count)
        if count >= PROGRESS_PAGES:
            numbers = progress(numbers, count, f"reading {name or path}", " pages")
        pages = without_margins([page_lines(pdf, n) for n in numbers])
        marks = outline(pdf, count)
    except pdfium.PdfiumError as exc:
        raise Unreadable(f"damaged ({one_line(exc)})") from None
    finally:
        pdf.close()
    if not any(pages):
        raise Unreadable("no text layer: needs OCR")
    words = set(re.findall(r"\w+", SOFT_HYPHEN.sub(" ", "\n".join(map("\n".join, pages))).lower()))
    out, path_now = [], []
    for n, lines in enumerate(pages):
        sections, path_now = page_sections(lines, marks.get(n, []), path_now)
        out.append((n + 1, [(heading, [("text", dehyphenate(" ".join(text), words))])
                            for heading, text in sections]))
    return total, [(n, sections) for n, sections in out if sections]


# == HTML (and Word, through mammoth's HTML) ================================================
DROPPED = ["script", "style", "svg", "math", "noscript", "template", "iframe", "object", "form",
           "button", "nav", "aside", "footer", "dialog"]
DROPPED_SELECTORS = ("a.headerlink, [hidden], [role=navigation], [role=banner], "
                     "[role=contentinfo], [role=search], [role=dialog]")
# An id or class of what is no reading matter even inside the main part: cookie banners,
# menus and edit links (Wikipedia marks its own with noprint)
BANNER = re.compile(r"cookie|consent|gdpr|dropdown|toolbar|breadcrumb|sidebar|editsection|navbox|"
                    r"catlinks|noprint|printfooter", re.I)
LANGUAGE = re.compile(r"(?:language|lang|highlight)-([\w+#.-]+)")


def decoded(data: bytes) -> str:
    """A page's text: UTF-8, else the charset it declares near its top, else Windows-1252."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        declared = re.search(rb"charset=[\"']?([\w-]+)", data[:4096])
        try:
            return data.decode(declared.group(1).decode("ascii") if declared else "cp1252", errors="replace")
        except LookupError:
            return data.decode("cp1252", errors="replace")


def code_language(element) -> str:
    """The language of a <pre>, from its class or its parents' (Sphinx: highlight-python)."""
    for node in (element, element.parent, element.parent.parent if element.parent else None):
        for name in (node.get("class") or []) if node is not None and hasattr(node, "get") else []:
            match = LANGUAGE.fullmatch(name)
            if match and match.group(1) not in ("default", "none"):
                return match.group(1)
    return ""


def main_content(soup):
    """The element holding the page's own text, with everything around and inside it that is not
    text for a reader taken out."""
    for tag in soup(DROPPED) + soup.select(DROPPED_SELECTORS):
        if not tag.decomposed:
            tag.decompose()
    for tag in soup.find_all(attrs={"id": BANNER}) + soup.find_all(class_=BANNER):
        if not tag.decomposed:
            tag.decompose()
    main = soup.find("main") or soup.find(attrs={"role": "main"}) or soup.find("article")
    if main is None:                    # no marked main part: the body without its page header
        main = soup.body or soup
        for tag in main.find_all("header"):
            tag.decompose()
    return main


def html_markdown(html: str) -> str:
    """The main content of an HTML page as Markdown, headed by its <title> unless its first
    heading already says it."""
    from bs4 import BeautifulSoup
    from markdownify import markdownify
    soup = BeautifulSoup(html, "html.parser")
    title = " ".join(soup.title.get_text(" ").split()) if soup.title else ""
    text = markdownify(str(main_content(soup)), heading_style="ATX", bullets="-", strip=["a", "img"],
                       escape_asterisks=False, escape_underscores=False, escape_misc=False,
                       code_language_callback=code_language, table_infer_header=True)
    first = re.search(r"^#{1,6}[ \t]+(.+)$", text, re.M)
    if title and not (first and heading_key(title).startswith(heading_key(first.group(1)))):
        text = f"# {title}\n\n{text}"
    return text


def html_sections(data: bytes) -> list:
    """An HTML page's sections, read as Markdown."""
    return read_markdown(html_markdown(decoded(data)))


# The title heads the document, so Word's headings sit one level below it; a code style is code.
STYLE_MAP = "\n".join(f"p[style-name='{style}'] => {html}" for style, html in [
    ("Title", "h1:fresh"), *((f"Heading {n}", f"h{n + 1}:fresh") for n in range(1, 6)),
    ("Code", "pre:separator('\\n')"), ("HTML Preformatted", "pre:separator('\\n')"),
    ("Macro Text", "pre:separator('\\n')")])


def docx_sections(path) -> list:
    """A Word file's sections: mammoth's HTML (headings by style, lists, tables, text; images
    left out), read as for a web page. What it unpacks to is capped before anything is read."""
    import zipfile

    import mammoth
    try:
        with zipfile.ZipFile(path) as archive:
            unpacked = sum(member.file_size for member in archive.infolist())
    except (zipfile.BadZipFile, OSError) as exc:
        raise Unreadable(f"damaged or not a .docx ({one_line(exc)})") from None
    if unpacked > MAX_UNPACKED:
        raise Unreadable(f"it unpacks to {unpacked / 1e6:,.0f} MB, over the {MAX_UNPACKED / 1e6:.0f} MB "
                         f"limit for a .docx (a zip bomb?)")
    no_images = mammoth.images.img_element(lambda image: {})
    with open(path, "rb") as handle:
        try:
            html = mammoth.convert_to_html(handle, style_map=STYLE_MAP, convert_image=no_images).value
        except (KeyError, ValueError, zipfile.BadZipFile) as exc:   # no word/document.xml, bad XML
            raise Unreadable(f"damaged or not a .docx ({one_line(exc)})") from None
    return read_markdown(html_markdown(html))


# == Jupyter notebooks ======================================================================
def fenced(text: str, language: str) -> str:
    """Text as a fenced code block, the fence longer than any run of backticks inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text.rstrip()}\n{fence}"


def output_texts(cell) -> list[str]:
    """The text a code cell printed or returned (no images), each cut at MAX_OUTPUT_CHARS."""
    texts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            text = output.get("text", "")
        elif output.get("output_type") == "error":
            text = f"{output.get('ename', '')}: {output.get('evalue', '')}"
        else:
            text = output.get("data", {}).get("text/plain", "")
        text = "".join(text) if isinstance(text, list) else str(text)
        if len(text) > MAX_OUTPUT_CHARS:
            text = text[:MAX_OUTPUT_CHARS] + f"\n[... {len(text) - MAX_OUTPUT_CHARS:,} more characters]"
        if text.strip():
            texts.append(text)
    return texts


def notebook_markdown(data: bytes, outputs: bool = False) -> str:
    """A notebook as Markdown: its Markdown cells as they are, code cells fenced in the kernel's
    language, and with outputs=True what each code cell printed, fenced as text."""
    import nbformat
    try:
        with warnings.catch_warnings():          # a notebook an old tool saved validates noisily
            warnings.simplefilter("ignore")
            notebook = nbformat.reads(data.decode("utf-8-sig"), as_version=4)
    except (ValueError, KeyError, AttributeError, TypeError, nbformat.ValidationError) as exc:
        raise Unreadable(f"not a Jupyter notebook ({one_line(exc)[:100]})") from None
    meta = notebook.get("metadata", {})
    language = (meta.get("kernelspec", {}).get("language") or meta.get("language_info", {}).get("name")
                or "python")
    parts = []
    for cell in notebook.get("cells", []):
        source = cell.get("source", "")
        if cell.get("cell_type") == "markdown":
            parts.append(source)
        elif cell.get("cell_type") == "code" and source.strip():
            parts.append(fenced(source, language))
            parts += [fenced(text, "text") for text in output_texts(cell)] if outputs else []
    return "\n\n".join(parts)


def notebook_sections(data: bytes, outputs: bool = False) -> list:
    """A notebook's sections, by the headings of its Markdown cells."""
    return read_markdown(notebook_markdown(data, outputs))


def say(line: str) -> None:
    """An [info] line on stderr: something read in part, not skipped."""
    print(f"[info] {line}", file=sys.stderr)
