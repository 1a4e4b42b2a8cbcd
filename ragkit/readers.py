"""
ragkit/readers.py: HTML, Word and Jupyter files (PDF: ragkit/pdf.py) as the sections the
Markdown reader yields, so chunking, --context, the saved index, filters and citations treat
them like notes.

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

from ragkit.markdown import read_markdown
from ragkit.text import one_line

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
MAX_UNPACKED = 250_000_000  # bytes a .docx may unpack to: more is a zip bomb, not a document
MAX_OUTPUT_CHARS = 2000  # of one notebook output, with --notebook-outputs
MAX_CELLS = 10_000       # of one notebook, counted before it is parsed (1,000,000 empty cells took 1.5 GB)
MAX_JSON_ITEMS = 1_000_000  # of its lists and objects (',' outside strings), counted before it is
                         # parsed: each costs a few hundred bytes parsed. Nesting without commas
                         # is left to json's recursion limit (a RecursionError: one [skip] line)
MAX_LINE_CHARS = 5_000   # of a line of a cell: longer is data (a literal, base64), not code or prose
JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')    # scanned ahead, never back


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


# == HTML (and Word, through mammoth's HTML) ================================================
DROPPED = {"script", "style", "svg", "math", "noscript", "template", "iframe", "object", "form",
           "button", "nav", "aside", "footer", "dialog"}
ROLES = {"navigation", "banner", "contentinfo", "search", "dialog"}
# An id or class of what is no reading matter even inside the main part: cookie banners,
# menus and edit links (Wikipedia marks its own with noprint)
BANNER = re.compile(r"cookie|consent|gdpr|dropdown|toolbar|breadcrumb|sidebar|editsection|navbox|"
                    r"catlinks|noprint|printfooter", re.I)
LANGUAGE = re.compile(r"(?:language|lang|highlight)-([\w+#.-]+)")
# What html.parser reads as raw text, taken out before it parses: comments (one never closed runs
# to the end, as in a browser), scripts and styles. A 50 MB inline script then costs a scan of
# 0.1 s, and a 63 MB comment left open (1.3 GB as a tree) as little. The patterns are unrolled
# ([^-]* runs to the next '-', then one '-' that does not close is taken): a lazy .*? tries the
# closer at every character and took 2 s.
RAW = re.compile(r"<!--[^-]*(?:-(?!->)[^-]*)*(?:-->|\Z)"
                 r"|<(script|style)\b[^>]*(?:>[^<]*(?:<(?!/\1\s*>)[^<]*)*(?:</\1\s*>|\Z)|\Z)", re.I)
# The tree BeautifulSoup builds costs about 50 us of CPU a tag (5 MB of tiny tags took 244 s and
# 1.5 GB), and markdownify walks up the tree from every tag; so a page is refused before it is
# parsed when it holds more than this:
MAX_HTML_CHARS = 4_000_000   # once RAW is out; a long Wikipedia article holds 1 MB
MAX_HTML_TAGS = 50_000       # '<', counted as the tags' upper bound; a saved Wikipedia page holds
                             # 1,500 outside its scripts. Just under it a page costs about 2 s of CPU
                             # (at 100,000, 4.3 s, and 9.7 s on a busy 2-core machine): bounded, not cheap
MAX_HTML_DEPTH = 100         # tags inside tags, found as it is parsed; a documentation page has 30
SPACES = re.compile(r"[ \t]{2,}")
# An empty element written without its slash (<br>, <img ...>) is written with it (<br/>), as it
# means the same: BeautifulSoup's html.parser builder lists each of the first kind and searches
# that list at every end tag, so 20,000 of them cost seconds. (The names are BeautifulSoup's.)
EMPTY = re.compile(r"<(area|base|basefont|bgsound|br|col|command|embed|frame|hr|image|img|input|isindex|"
                   r"keygen|link|menuitem|meta|nextid|param|source|spacer|track|wbr)\b([^<>]*?)/?>", re.I)


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


def parsed(html: str):
    """The page as BeautifulSoup's tree (html.parser), without RAW; Unreadable if it holds
    more than MAX_HTML_CHARS or MAX_HTML_TAGS. Library warnings (a page that is only a URL) are
    not shown."""
    from bs4 import BeautifulSoup
    html = RAW.sub("", html)
    if len(html) > MAX_HTML_CHARS:
        raise Unreadable(f"{len(html) / 1e6:.1f} MB of markup, over the {MAX_HTML_CHARS / 1e6:.0f} MB "
                         f"a page may hold")
    if html.count("<") > MAX_HTML_TAGS:
        raise Unreadable(f"{html.count('<'):,} tags, over the {MAX_HTML_TAGS:,} a page may hold")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return BeautifulSoup(EMPTY.sub(r"<\1\2/>", html), "html.parser")


def code_language(element) -> str:
    """The language of a <pre>, from its class or its parents' (Sphinx: highlight-python)."""
    for node in (element, element.parent, element.parent.parent if element.parent else None):
        for name in (node.get("class") or []) if node is not None and hasattr(node, "get") else []:
            match = LANGUAGE.fullmatch(name)
            if match and match.group(1) not in ("default", "none"):
                return match.group(1)
    return ""


def no_reading(tag) -> bool:
    """A tag that holds nothing to read: navigation, scripts, forms, hidden parts, banners,
    Sphinx's '¶' anchors."""
    classes = tag.get("class") or []
    return (tag.name in DROPPED or tag.has_attr("hidden") or tag.get("role") in ROLES
            or (tag.name == "a" and "headerlink" in classes)
            or BANNER.search(tag.get("id") or "") is not None or any(BANNER.search(c) for c in classes))


def main_content(soup):
    """The element holding the page's own text (<main>, else role="main", else <article>, else
    the body without its page header), with everything that holds nothing to read taken out:
    one pass over the tags, in which tags nested deeper than MAX_HTML_DEPTH are Unreadable."""
    from bs4 import Tag
    depth, gone, found = {id(soup): 0}, [], {}      # depth: of each tag kept so far
    for tag in [node for node in soup.descendants if isinstance(node, Tag)]:
        if id(tag.parent) not in depth:             # inside a tag that goes
            continue
        if depth[id(tag.parent)] >= MAX_HTML_DEPTH:
            raise Unreadable(f"tags nested more than {MAX_HTML_DEPTH} deep")
        if no_reading(tag):
            gone.append(tag)
            continue
        depth[id(tag)] = depth[id(tag.parent)] + 1
        if tag.name in ("main", "article"):
            found.setdefault(tag.name, tag)
        if tag.get("role") == "main":
            found.setdefault("role", tag)
    take_out(gone)
    main = found.get("main") or found.get("role") or found.get("article")
    if main is None:                    # no marked main part: the body without its page header
        main = soup.body or soup
        take_out(main.find_all("header"))
    return main


def take_out(tags: list) -> None:
    """Take tags out of the tree, each parent's from its last: decompose() looks up a tag's place
    among its siblings one by one, so 50,000 buttons side by side took minutes."""
    by_parent = {}
    for tag in tags:
        if tag.parent is not None:                  # None: inside a tag taken out before it
            by_parent.setdefault(id(tag.parent), (tag.parent, []))[1].append(tag)
    for parent, children in by_parent.values():
        place = {id(child): i for i, child in enumerate(parent.contents)}
        for tag in sorted(children, key=lambda tag: place[id(tag)], reverse=True):
            tag.extract(_self_index=place[id(tag)])


def collapse_spaces(main) -> None:
    """Runs of spaces and tabs outside <pre> made one space, as markdownify makes them, but before
    it sees them: its pattern for them takes time in the square of a run's length (a run of
    300,000 spaces ran for minutes)."""
    in_pre = {id(string) for pre in main.find_all("pre") for string in pre.find_all(string=True)}
    for string in main.find_all(string=True):
        if id(string) not in in_pre and SPACES.search(string):
            string.replace_with(type(string)(SPACES.sub(" ", string)))


def markdown_of(main) -> str:
    """An element as Markdown (markdownify), a <pre>'s blank lines at its ends trimmed here: the
    pattern markdownify trims them with, [ \\n]*$, takes time in the square of a run of spaces."""
    from markdownify import MarkdownConverter

    class Converter(MarkdownConverter):
        def convert_pre(self, el, text, parent_tags):
            lead = len(text) - len(text.lstrip(" \n"))
            return super().convert_pre(el, text[text.rfind("\n", 0, lead) + 1:].rstrip(" \n"), parent_tags)

    return Converter(heading_style="ATX", bullets="-", strip=["a", "img"], escape_asterisks=False,
                     escape_underscores=False, escape_misc=False, code_language_callback=code_language,
                     table_infer_header=True, strip_pre=None).convert_soup(main).strip("\n")


def heading_key(text: str) -> str:
    """Words only, lower case: '3.1  Data Analysis' -> '3 1 data analysis'."""
    return " ".join(re.findall(r"\w+", text.lower()))


def html_markdown(html: str) -> str:
    """The main content of an HTML page as Markdown, headed by its <title> unless its first
    heading already says it."""
    soup = parsed(html)
    title = " ".join(soup.title.get_text(" ").split()) if soup.title else ""
    main = main_content(soup)
    collapse_spaces(main)
    text = markdown_of(main)
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


# mammoth builds a DOM of all the XML it reads (minidom) and takes about 100 us of CPU a
# paragraph, empty or not, and 30 us a tag: 20 MB of empty paragraphs (a 30 KB file) ran for
# minutes in 2.3 GB. So its XML is counted first, inflated a piece at a time, and refused past
# these. Just under them a .docx still costs about 4 s of CPU (mammoth, then the HTML reader):
# the caps bound the cost, they do not make a long report cheap; a longer one must be split.
MAX_DOCX_XML = 32_000_000       # bytes of XML (the document, its styles and notes)
MAX_DOCX_TAGS = 120_000         # '<' in it; a 100-page report written by Word holds about 80,000
MAX_DOCX_PARAGRAPHS = 10_000    # about 250 pages (at 250,000 tags or 20,000, 7.5 s of CPU)
PARAGRAPH = re.compile(rb"<(?:[\w.-]+:)?p[\s/>]")      # <w:p>, <w:p w:rsidR="...">, <w:p/>


def docx_xml_checked(archive) -> None:
    """Unreadable unless a .docx's XML parts (any member that starts with '<': pictures are
    passed over) stay within MAX_DOCX_XML, MAX_DOCX_TAGS and MAX_DOCX_PARAGRAPHS, and declare no
    DOCTYPE: Word never writes one, and minidom expands its entities in square time (one
    referenced 700,000 times from a 3 KB file ran for minutes)."""
    size = tags = paragraphs = 0
    for info in archive.infolist():
        with archive.open(info) as member:
            piece, last = member.read(1 << 16), b""
            if not piece.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<"):
                continue
            while piece:
                if b"<!DOCTYPE" in last[-8:] + piece:
                    raise Unreadable("its XML declares a DOCTYPE, which Word never writes (an entity bomb?)")
                size, tags = size + len(piece), tags + piece.count(b"<")
                paragraphs += len(PARAGRAPH.findall(piece))
                for count, limit, what in [(paragraphs, MAX_DOCX_PARAGRAPHS, "paragraphs"),
                                           (tags, MAX_DOCX_TAGS, "XML tags"),
                                           (size, MAX_DOCX_XML, "bytes of XML")]:
                    if count > limit:
                        raise Unreadable(f"over {limit:,} {what}, more than a .docx may hold")
                last, piece = piece, member.read(1 << 20)


def docx_sections(path) -> list:
    """A Word file's sections: mammoth's HTML (headings by style, lists, tables, text; images
    left out), read as for a web page. What it unpacks to, and its XML, are checked before
    mammoth reads anything (docx_xml_checked)."""
    import zipfile
    import zlib

    import mammoth
    try:
        with zipfile.ZipFile(path) as archive:
            unpacked = sum(member.file_size for member in archive.infolist())
            if unpacked > MAX_UNPACKED:
                raise Unreadable(f"it unpacks to {unpacked / 1e6:,.0f} MB, over the "
                                 f"{MAX_UNPACKED / 1e6:.0f} MB "
                                 f"limit for a .docx (a zip bomb?)")
            docx_xml_checked(archive)
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error, NotImplementedError) as exc:
        raise Unreadable(f"damaged or not a .docx ({one_line(exc)})") from None
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


def cut_lines(text: str) -> str:
    """A cell's text with each line at most MAX_LINE_CHARS long: a longer one is cut there, and
    says how much more it held."""
    return "\n".join(line if len(line) <= MAX_LINE_CHARS else
                     f"{line[:MAX_LINE_CHARS]} [... {len(line) - MAX_LINE_CHARS:,} more characters]"
                     for line in text.split("\n"))


def notebook_json(data: bytes):
    """A notebook's JSON as nbformat reads it (in version 4), once its cells and items are counted
    (within MAX_CELLS and MAX_JSON_ITEMS); Unreadable if it is no notebook. It is not validated:
    nbformat's validator spends a millisecond on each part of a notebook that breaks its schema
    (50,000 outputs, a 3 MB file, took 49 s) and logs what it finds; the reader needs only .get()."""
    import nbformat
    if data.count(b'"cell_type"') > MAX_CELLS:
        raise Unreadable(f"over {MAX_CELLS:,} cells, more than a notebook may hold")
    if data.count(b",") > MAX_JSON_ITEMS and JSON_STRING.sub(b"", data).count(b",") > MAX_JSON_ITEMS:
        raise Unreadable(f"over {MAX_JSON_ITEMS:,} JSON items, more than a notebook may hold")
    try:
        with warnings.catch_warnings():          # converting an old notebook warns
            warnings.simplefilter("ignore")
            return nbformat.convert(nbformat.reader.reads(data.decode("utf-8-sig")), 4)
    except (ValueError, KeyError, AttributeError, TypeError, nbformat.ValidationError) as exc:
        raise Unreadable(f"not a Jupyter notebook ({one_line(exc)[:100]})") from None


def notebook_markdown(data: bytes, outputs: bool = False) -> str:
    """A notebook as Markdown: its Markdown cells as they are, code cells fenced in the kernel's
    language, and with outputs=True what each code cell printed, fenced as text; every line cut
    at MAX_LINE_CHARS."""
    notebook = notebook_json(data)
    meta = notebook.get("metadata", {})
    language = (meta.get("kernelspec", {}).get("language") or meta.get("language_info", {}).get("name")
                or "python")
    parts = []
    for cell in notebook.get("cells", []):
        source = cut_lines(cell.get("source", ""))
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
