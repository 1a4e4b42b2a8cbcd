"""ragkit/readers.py: every file type read as sections: Markdown as its structure, and HTML,
Word, Jupyter and PDF files as the sections the Markdown reader yields, so chunking, --context,
the saved index, filters and citations treat them like notes.

    read_markdown(note_text)       -> [("Install", [("text", ...), ("code", "```bash\n...\n```")])]
    html_sections(page_bytes)      -> the same, for the page's main content

Markdown (.md and .txt files, opened by ragkit/documents.py) needs no library: read_markdown
(the first section below) reads it in time linear in the text. Each other format is parsed by
a kept library, imported only when a file of its kind is met; each is an optional extra
(EXTRAS), and a folder without it is still read, with its files of that kind named and the
`pip install` that reads them:
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
import math
import os
import re
import sys
import warnings
from collections import Counter

from ragkit.support import forked, limit_child, one_line, progress, soft_limit

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


# == Markdown: the structure every reader yields ===========================================
# Markdown read as structure, for the chunker, in time linear in the text.
#
#     read_markdown("# A\nSome *text*.\n```py\nx = 1\n```")
#       -> [("A", [("text", "Some text."), ("code", "```py\nx = 1\n```")])]
#
# A small reader for what documentation sites write, not a full CommonMark parser. It keeps
# what a reader sees (headings, paragraphs, list items, table rows, code with its line breaks)
# and drops or unwraps the markup around it: emphasis, heading attributes `{ #id }`, block
# quotes, admonitions (`!!!`, `???`, `///`, `:::`), content tabs (`=== "Tab"`), MyST directives
# that hold Markdown (```` ```{note} ````, `:::{tip}`) and roles ({func}`name`), HTML tags and
# comments, include and Jinja directives. Inline code keeps its backticks; a ```` ```{eval-rst} ````
# or any other directive that holds no Markdown comes out verbatim, as code (one fenced with `:::`
# is read as Markdown). No pattern can backtrack over a line: each is anchored and bounded, or
# replaced by a plain scan, and nesting is a stack, not recursion.

FENCE = re.compile(r"( *)(`{3,}|~{3,})(.*)")                           # ```python, ```{note} Title
ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t](.*))?")                      # "## Title", "#" alone
SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*")                            # a line of = or - under text
OPENER = re.compile(r'(?:!!!|\?\?\?\+?|===\+?)[ \t]+(?:\w[\w-]*)?(?:[ \t]*"([^"]*)")?[ \t]*')
BLOCK_FENCE = re.compile(r"[ \t]*(?:/{3,}|:{3,})(?![/:])(.*)")         # /// note | Title   ::: tip
DIRECTIVE_NAME = re.compile(r"\{([\w:-]+)\}[ \t]*(.*)")                # {note} Title, {code-block} py
LABEL = re.compile(r"[ \t]*\([\w.:-]+\)=[ \t]*")                       # MyST's (target)= line
OPTION = re.compile(r"[ \t]*:[\w-]+:.*")                               # a directive's ":maxdepth: 2"
TAG = re.compile(r"</?[A-Za-z][\w-]*(?:\s[^<>]*)?/?>")
# [text](url)
LINK = re.compile(r"!?\[((?:[^\[\]\n]|\[[^\[\]\n]*\])*)\]\((?:[^()\s]|\([^()\s]*\))*(?:\s[^()]*)?\)")
ATTRIBUTES = re.compile(r"\{:?[ \t]*(?:[#.]|[\w-]+=)[^{}\n]*\}")   # { #id }, {: .class }, { loading=lazy }
REFERENCE = re.compile(r" {0,3}\[[^\]\n]+\]:[ \t]*\S+.*")             # [name]: https://... (a target)
REF_LINK = re.compile(r"\[([^\[\]\n]+)\]\[[^\[\]\n]*\]")              # [text][name] -> text
SHORTCUT = re.compile(r"\[([^\[\]\n]+)\]")
AUTOLINK = re.compile(r"<((?:https?|mailto):[^<>\s]+)>")               # <https://...> -> the address
ROLE = re.compile(r"\{([\w:.-]+)\}$")                                 # {func} right before `code`
EMPHASIS = re.compile(r"(?<![\w*])\*{1,3}(?=[^\s*])|(?<=[^\s*])\*{1,3}(?![\w*])"
                      r"|(?<![\w_])_(?=[^\s_])|(?<=[^\s_])_(?![\w_])")   # *a*, **b**, _c_ (not a_b)
LIST_ITEM = re.compile(r"[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]")
OPENERS = {"{*": "*}", "{%": "%}", "{{": "}}"}                         # include and Jinja directives

VERSIONS = {"versionadded": "New in version", "versionchanged": "Changed in version",
            "deprecated": "Deprecated since version", "versionremoved": "Removed in version"}
# MyST directives: these hold Markdown and are read as it; these hold nothing a reader sees;
# every other one (```{eval-rst}, ```{code-block}, ```{math}) is kept verbatim, as code, since
# reading reStructuredText or code as Markdown changes its words (_FOO=1 would lose its "_").
MARKDOWN_DIRECTIVES = {"note", "warning", "tip", "important", "seealso", "admonition", "attention",
                       "caution", "danger", "error", "hint", "todo", *VERSIONS, "tab", "tab-set",
                       "tab-item", "card", "dropdown", "grid", "grid-item", "grid-item-card", "topic",
                       "sidebar", "margin", "rubric", "glossary", "epigraph", "pull-quote", "div",
                       "container"}
DROPPED_DIRECTIVES = {"toctree", "include", "literalinclude", "image", "figure", "raw",
                      "contents", "automodule", "autoclass", "autofunction", "autodata",
                      "autoexception", "automethod", "autoattribute", "only"}
# Kept verbatim, these name their language in the fence: ```{code-block} python -> ```python
CODE_DIRECTIVES = {"code", "code-block", "code-cell", "sourcecode", "doctest", "testcode",
                   "testsetup", "testcleanup", "testoutput", "pip-cli", "prompt", "mermaid"}
CODE_ROLES = {"func", "class", "meth", "mod", "obj", "attr", "data", "exc", "any", "const",
              "option", "envvar", "command", "program", "code", "samp", "kbd"}


# == Markdown: inline markup ================================================================
def drop_directives(text: str) -> str:
    """Include and template directives ({* ... *}, {% ... %}, {{ ... }}) out, by a plain scan;
    an opener with no closer stays as text."""
    out, i = [], 0
    while True:
        starts = [(text.find(o, i), o) for o in OPENERS if text.find(o, i) >= 0]
        if not starts:
            out.append(text[i:])
            return "".join(out)
        start, opener = min(starts)
        end = text.find(OPENERS[opener], start + 2)
        if end < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:start])
        i = end + 2


def code_spans(line: str) -> list[tuple[bool, str]]:
    """[(is_code, piece), ...]: `code` spans found by a plain scan; an unclosed run of
    backticks and everything after it stays text, so the scan never goes back."""
    pieces, i = [], 0
    while (start := line.find("`", i)) >= 0:
        run = start
        while run < len(line) and line[run] == "`":
            run += 1
        ticks = line[start:run]
        end = line.find(ticks, run)
        while end >= 0 and end + len(ticks) < len(line) and line[end + len(ticks)] == "`":
            end = line.find(ticks, end + len(ticks) + 1)      # a longer run does not close it
        if end < 0:
            break
        pieces += [(False, line[i:start]), (True, line[start:end + len(ticks)])]
        i = end + len(ticks)
    return pieces + [(False, line[i:])]


def role_text(role: str, code: str) -> tuple[bool, str]:
    """A MyST role's shown text: {func}`a.b` -> `a.b`, {doc}`Guide <guide>` -> Guide, {pep}`8`."""
    inner = code.strip("`")
    if inner.endswith(">") and " <" in inner:               # "shown text <target>"
        inner = inner[:inner.rindex(" <")]
    inner = inner.lstrip("!~")
    name = role.split(":")[-1]
    if name == "pep":
        return False, f"PEP {inner}"
    return (True, f"`{inner}`") if name in CODE_ROLES else (False, inner)


def plain(line: str) -> str:
    """Inline markup out: links kept as their text, roles as theirs, tags, directives,
    attributes and emphasis dropped; inside `code` nothing changes."""
    line = LINK.sub(r"\1", AUTOLINK.sub(r"\1", line))
    line = REF_LINK.sub(r"\1", LINK.sub(r"\1", line))      # a linked image: [![alt](img)](url)
    pieces = code_spans(line)
    for n in range(len(pieces) - 1):
        role = ROLE.search(pieces[n][1]) if not pieces[n][0] else None
        if role and pieces[n + 1][0]:
            pieces[n] = (False, pieces[n][1][:role.start()])
            pieces[n + 1] = role_text(role.group(1), pieces[n + 1][1])
    return "".join(text if is_code else
                   EMPHASIS.sub("", ATTRIBUTES.sub("", TAG.sub("", drop_directives(text))))
                   for is_code, text in pieces)


def heading_text(raw: str) -> str:
    """'Install it { #install }' -> 'Install it': closing #s and an attribute list dropped."""
    text = raw.strip().rstrip("#").rstrip().lstrip(":").lstrip()     # "::: module.name" too
    if text.endswith("}") and "{" in text:
        inside = text[text.rindex("{") + 1:-1].strip()
        if inside[:1] in ("#", ".", ":") or "=" in inside:
            text = text[:text.rindex("{")].rstrip()
    return " ".join(plain(text).split())


# == Markdown lines: quotes, admonitions, tabs and directives unwrapped =====================
def without_comments(text: str) -> str:
    """HTML comments out, by a plain scan (one left open runs to the end)."""
    out, i = [], 0
    while (start := text.find("<!--", i)) >= 0:
        out.append(text[i:start])
        end = text.find("-->", start + 4)
        if end < 0:
            return "".join(out)
        i = end + 3
    return "".join(out) + text[i:]


def unquote(line: str, most: int) -> tuple[str, int]:
    """(the line without up to `most` block-quote markers ("> ", ">? "), how many it had)."""
    i, n = 0, 0
    while n < most:
        j = i
        while j < len(line) and line[j] in " \t":
            j += 1
        if j >= len(line) or line[j] != ">":
            break
        j += 1 + (j + 1 < len(line) and line[j + 1] in "?!")
        i, n = j + (j < len(line) and line[j] in " \t"), n + 1
    return line[i:], n


def indent_of(line: str) -> int:
    """Columns of leading white space (a tab counts 4)."""
    width = 0
    for char in line:
        if char not in " \t":
            break
        width += 4 if char == "\t" else 1
    return width


def dedent(line: str, columns: int) -> str:
    """The line without its first `columns` columns of white space."""
    i = width = 0
    while i < len(line) and width < columns and line[i] in " \t":
        width += 4 if line[i] == "\t" else 1
        i += 1
    return line[i:]


def closes(line: str, fence: str) -> bool:
    """Does `line` close a code block opened by `fence`? The same character, at least as many."""
    stripped = line.strip()
    return stripped.startswith(fence) and not stripped.strip(fence[0])


def directive_title(name: str, args: str) -> str:
    """What a MyST directive shows above its body: its argument, or the version sentence."""
    if name in VERSIONS:
        return f"{VERSIONS[name]} {args}".strip().rstrip(".") + "."
    return args


def unwrap(lines: list[str]) -> list[str]:
    """Plain lines: block quotes, admonitions and tabs (bodies indented), /// and ::: blocks,
    MyST directives and labels unwrapped, each leaving its title; each code block comes out
    whole, as one "```lang\n...\n```" item, its lines verbatim. Nesting is tracked on stacks,
    so any depth reads the same."""
    out, indents, directives = [], [], []      # admonition body indents; open ```{name} fences
    code = skip = None                         # an open code block [fence, indent, lines]; a
    quotes, options = 0, False                 # dropped directive's fence; quote markers of the
    for raw in lines:                          # code block; a directive's options may follow
        line, depth = unquote(raw, quotes if code else len(raw))
        quotes = depth if code is None else quotes
        if line.strip() and indents and indent_of(line) < indents[-1] and not code:
            while indents and indent_of(line) < indents[-1]:
                indents.pop()
            out.append("")                     # an admonition's body ends
        line = dedent(line, indents[-1]) if indents and line.strip() else line
        if skip:
            skip = None if closes(line, skip) else skip
        elif code and options and OPTION.fullmatch(line):
            continue                           # a code directive's ":linenos:"
        elif code:
            options = False
            if closes(line, code[0]):
                out.append("\n".join([*code[2], "```"]))
                code = None
            else:
                code[2].append(dedent(line, code[1]))
        elif options and (OPTION.fullmatch(line) or (options == "indented" and line[:1] in " \t")):
            continue                           # ":maxdepth: 2", or ::: module.name's options
        else:
            options = False
            fence = FENCE.fullmatch(line)
            if fence and directives and closes(line, directives[-1]):
                directives.pop()
                out.append("")
            elif fence:
                code, skip, options = open_fence(fence, out, directives)
            else:
                options = unwrap_line(line, out, indents)
    return out + (["\n".join([*code[2], "```"])] if code else [])


def open_fence(fence, out: list, directives: list):
    """(code block, dropped directive's fence, what may follow) for a fence line: a MyST
    directive holding Markdown (its title written to `out`, its fence pushed on `directives`),
    a dropped one, or a code block: plain, a code directive ("```python", its options skipped)
    or any other directive, its fence line and body verbatim ("```{eval-rst}")."""
    info = fence.group(3).strip()
    named = DIRECTIVE_NAME.fullmatch(info)
    name, args = (named.group(1), named.group(2).strip()) if named else (None, info)
    if name in DROPPED_DIRECTIVES:
        return None, fence.group(2), False
    if name in MARKDOWN_DIRECTIVES:
        directives.append(fence.group(2))
        out += [directive_title(name, args), ""]
        return None, None, "fields"
    language = (args.split() or [""])[0] if name is None or name in CODE_DIRECTIVES else info
    options = name in CODE_DIRECTIVES and "fields"          # another's ":field:" lines are its text
    return [fence.group(2), len(fence.group(1)), ["```" + language]], None, options


def unwrap_line(line: str, out: list, indents: list):
    """Write one line that is not inside code to `out`: an admonition or tab opener becomes its
    title (its body indent pushed on `indents`), a /// or ::: line its title, a label or
    comment nothing. Returns what may follow: "fields" (":name: value" options), "indented"
    (::: module.name's indented options) or False."""
    opener = OPENER.fullmatch(line.strip()) if line.strip() else None
    block = BLOCK_FENCE.fullmatch(line)
    if opener:
        indents.append(indent_of(line) + (indents[-1] if indents else 0) + 4)
        out += [opener.group(1), ""] if opener.group(1) else [""]
    elif block:
        out += block_title(block.group(1).strip())
        return "indented" if re.fullmatch(r"[\w.]+", block.group(1).strip()) else "fields"
    elif not (LABEL.fullmatch(line) or line.lstrip().startswith(("%", "--8<--"))):
        out.append(line)                       # (a MyST label or comment, a snippet: dropped)
    return False


def block_title(rest: str) -> list[str]:
    """The lines a /// or ::: fence line leaves: its title ('| Title', '[Title]', or a MyST
    {name} Title), then a blank line."""
    named = DIRECTIVE_NAME.fullmatch(rest)
    if named:
        title = directive_title(named.group(1), named.group(2).strip())
    elif "|" in rest:
        title = rest.split("|", 1)[1].strip()
    elif "[" in rest and rest.endswith("]"):
        title = rest[rest.index("[") + 1:-1].strip()
    else:
        title = ""
    return [title, ""] if title else [""]


# == Markdown blocks: headings, paragraphs, lists, tables and code ==========================
def is_table_rule(line: str) -> bool:
    """'|---|:---:|' or '--- | ---': cells of dashes (and colons) between pipes."""
    if "|" not in line or "-" not in line:
        return False
    cells = line.strip().strip("|").split("|")
    return len(cells) > 1 and all(c.strip() and not c.strip().strip(":").strip("-") for c in cells)


TARGET_NAME = re.compile(r" {0,3}\[[^\]\n]+\]:[ \t]*")                     # "[sdist]:", its URL below


def joined_targets(lines: list[str]) -> list[str]:
    """A link target written on two lines ("[sdist]:" then the URL) made one, as REFERENCE reads it."""
    out = []
    for line in lines:
        if out and TARGET_NAME.fullmatch(out[-1]) and line.strip() and " " not in line.strip():
            out[-1] += " " + line.strip()
        else:
            out.append(line)
    return out


def read_markdown(text: str) -> list[tuple[str, list[tuple[str, str]]]]:
    r"""Markdown -> [(heading path, [(kind, text), ...])], kind "text", "list", "table" or "code".

    read_markdown("# A\nSome *text*.\n```py\nx = 1\n```")
      -> [("A", [("text", "Some text."), ("code", "```py\nx = 1\n```")])]
    Code blocks keep their line breaks and note their language; a '#' line inside one is code.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = joined_targets(unwrap(without_comments(text).split("\n")))
    targets = {line.strip()[1:].split("]:")[0].lower() for line in lines if REFERENCE.fullmatch(line)}
    reader = Blocks(targets)
    for line in lines:
        reader.line(line)
    return reader.sections()


class Blocks:
    """The block parser's state: the open paragraph, list, table or heading path."""

    def __init__(self, targets: set):
        self.targets, self.found, self.path, self.blocks = targets, [], [], []
        self.para, self.kind = [], None            # lines (lists of pieces) of the open block

    def end_block(self) -> None:
        """Close the open paragraph, list or table; markup comes out only now (a tag may span
        lines)."""
        if self.para:
            items = ["".join(item) for item in self.para]
            joined = (" ".join(plain(" ".join(items)).split()) if self.kind == "text" else
                      "\n".join(" ".join(plain(item).split()) for item in items))
            joined = SHORTCUT.sub(self.shortcut, joined)      # [docs_dir], a link by its target
            if joined.strip():
                self.blocks.append((self.kind, joined.strip()))
        self.para, self.kind = [], None

    def shortcut(self, found) -> str:
        """[name] stays as text without its brackets when a link target of that name exists."""
        return found.group(1) if found.group(1).lower() in self.targets else found.group(0)

    def heading(self, level: int, title: str) -> None:
        """Start a section under `title`, at `level`."""
        self.end_block()
        self.found.append((" > ".join(t for _, t in self.path), self.blocks))
        self.path, self.blocks = [(n, t) for n, t in self.path if n < level] + [(level, title)], []

    def line(self, line: str) -> None:
        """Read one line, or one whole code block."""
        heading = ATX.fullmatch(line) if line.lstrip(" ").startswith("#") else None
        if line.startswith("```"):                        # a whole code block (unwrap made it)
            self.end_block()
            self.blocks.append(("code", line))
        elif heading:
            self.heading(len(heading.group(1)), heading_text(heading.group(2) or ""))
        elif self.kind == "text" and self.para and SETEXT.fullmatch(line):
            title = heading_text(" ".join("".join(item) for item in self.para))
            self.para = []
            self.heading(1 if line.strip()[0] == "=" else 2, title)
        elif self.para and is_table_rule(line) and "|" in "".join(self.para[-1]):
            header = self.para.pop()                      # the row above the rule is the header
            self.end_block()
            self.para, self.kind = [["".join(header).strip()]], "table"
        elif not line.strip() or SETEXT.fullmatch(line) or REFERENCE.fullmatch(line):
            self.end_block()                              # a blank line, a rule, a link target
        elif self.kind == "table" and "|" in line:
            self.para.append([line.strip()])
        elif self.kind == "list" and self.para and line[:1] in " \t" and not LIST_ITEM.match(line):
            self.para[-1] += [" ", line.strip()]           # a list item's continued line
        else:                                             # a list item, or a line of prose
            kind = "list" if LIST_ITEM.match(line) else "text"
            if self.kind != kind:
                self.end_block()
            self.kind = kind
            self.para.append([line.strip()])

    def sections(self) -> list:
        """[(heading path, blocks)] for every section that has any."""
        self.end_block()
        self.found.append((" > ".join(t for _, t in self.path), self.blocks))
        return [(title, blocks) for title, blocks in self.found if blocks]


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


# == PDF pages =====================================================================================
# a PDF's pages as the sections the Markdown reader yields (ragkit/readers.py
# reads the other formats, and says which extra each needs).
#
#     read_pdf(Path("manual.pdf"))   -> (40, [(12, [("Install > Linux", [("text", "Run the ...")])]), ...])
#
# PDFium (pypdfium2) reads the text of each page; headings come from the outline (bookmarks);
# running headers, footers and page numbers are dropped; words hyphenated across lines are
# joined. A PDF without a text layer (a scan) needs OCR first. A file that cannot be read raises
# readers.Unreadable; its message is the reason, printed in one line.


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
