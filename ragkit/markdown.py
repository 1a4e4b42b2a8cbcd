"""
ragkit/markdown.py: Markdown read as structure, for the chunker, in time linear in the text.

    read_markdown("# A\nSome *text*.\n```py\nx = 1\n```")
      -> [("A", [("text", "Some text."), ("code", "```py\nx = 1\n```")])]

A small reader for what documentation sites write, not a full CommonMark parser. It keeps
what a reader sees (headings, paragraphs, list items, table rows, code with its line breaks)
and drops or unwraps the markup around it: emphasis, heading attributes `{ #id }`, block
quotes, admonitions (`!!!`, `???`, `///`, `:::`), content tabs (`=== "Tab"`), MyST directives
that hold Markdown (```` ```{note} ````, `:::{tip}`) and roles ({func}`name`), HTML tags and
comments, include and Jinja directives. Inline code keeps its backticks; a ```` ```{eval-rst} ````
or any other directive that holds no Markdown comes out verbatim, as code (one fenced with `:::`
is read as Markdown). No pattern can backtrack over a line: each is anchored and bounded, or
replaced by a plain scan, and nesting is a stack, not recursion.
"""

import re

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


# == Inline markup ==========================================================================
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


# == Lines: quotes, admonitions, tabs and directives unwrapped ==============================
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


# == Blocks: headings, paragraphs, lists, tables and code ===================================
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
