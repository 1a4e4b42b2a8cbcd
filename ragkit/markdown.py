"""
ragkit/markdown.py: Markdown read as structure, for the chunker.

    read_markdown("# A\nSome *text*.\n```py\nx = 1\n```")
      -> [("A", [("text", "Some *text*."), ("code", "```py\nx = 1\n```")])]

A small reader for what documentation sites write, not a full CommonMark parser. It keeps
what a reader sees (headings, paragraphs, list items, table rows, code with its line breaks)
and drops or unwraps the markup around it: heading attributes `{ #id }`, admonitions (`!!!`,
`???`, `///`, `:::`), content tabs (`=== "Tab"`), HTML tags and comments, include and Jinja
directives. Every pattern is matched line by line, so the time grows with the text.
"""

import re

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})[ \t]*([^`\s]*)")          # ```python  (info: language)
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t](.*))?$")                 # "## Title", "#" alone
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")                      # a line of = or - under text
INDENTED_OPENER = re.compile(r'^(\s*)(?:!!!|\?\?\?\+?|===\+?)[ \t]+(?:\w[\w-]*)?(?:[ \t]*"([^"]*)")?[ \t]*$')
BLOCK_FENCE = re.compile(r"^\s*(?:/{3,}|:{3,})(?![/:])(.*)$")         # /// note | Title   ::: tip
DIRECTIVE = re.compile(r"\{\*[^\n]*?\*\}|\{%[^\n]*?%\}|\{\{[^\n]*?\}\}|^\s*-+8<-+.*$")
COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.S)
TAG = re.compile(r"</?[A-Za-z][\w-]*(?:\s[^<>]*)?/?>")
LINK = re.compile(r"!?\[((?:[^\[\]\n]|\[[^\[\]\n]*\])*)\]\([^()\s]*(?:\s[^()]*)?\)")  # [text](url), ![alt](src)
ATTRIBUTES = re.compile(r"\{:?[ \t]*[#.][^{}\n]*\}")                 # inline { #id } or {: .class }
REFERENCE = re.compile(r"^ {0,3}\[[^\]\n]+\]:[ \t]*\S+.*$")             # [name]: https://... (a link target)
REF_LINK = re.compile(r"\[([^\[\]\n]+)\]\[[^\[\]\n]*\]")                # [text][name] -> text
SHORTCUT = re.compile(r"\[([^\[\]\n]+)\]")
AUTOLINK = re.compile(r"<((?:https?|mailto):[^<>\s]+)>")                 # <https://...> -> the address
QUOTE = re.compile(r"^[ \t]*>[?!]?[ \t]?")                              # "> ", ">? " callouts
TABLE_RULE = re.compile(r"^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)+\|?\s*$")
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d{1,9}[.)])\s+")


def heading_text(raw: str) -> str:
    """'Install it { #install }' -> 'Install it': closing #s and an attribute list dropped."""
    text = raw.strip().rstrip("#").rstrip().lstrip(":").lstrip()     # "::: module.name" too
    if text.endswith("}") and "{" in text:
        inside = text[text.rindex("{") + 1:-1].strip()
        if inside[:1] in ("#", ".", ":") or "=" in inside:
            text = text[:text.rindex("{")].rstrip()
    return plain(text)


def plain(line: str) -> str:
    """Inline markup out: HTML tags, directives, and links kept as their text."""
    line = AUTOLINK.sub(r"\1", ATTRIBUTES.sub("", DIRECTIVE.sub("", line)))
    return REF_LINK.sub(r"\1", LINK.sub(r"\1", TAG.sub("", line)))


def closes(line: str, fence: str) -> bool:
    """Does `line` close a code block opened by `fence`? The same character, at least as many."""
    return line.strip().startswith(fence) and set(line.strip()) == {fence[0]}


def unwrap(lines: list[str]) -> list[str]:
    """Admonitions and tabs (body indented 4 spaces) become their title, then the body dedented;
    /// and ::: fences go, keeping a title after '|' or in [ ]. Code inside a fence stays."""
    out, fence, depth, i = [], None, 0, 0
    while i < len(lines):
        line = lines[i]
        n = 0                      # a block quote's "> " markers go; in a quoted code block only
        while QUOTE.match(line) and (fence is None or n < depth):   # as many as opened it,
            line, n = QUOTE.sub("", line, count=1), n + 1           # so "> > y" there is "> y"
        depth = n if fence is None else depth
        code = FENCE.match(line)
        if fence is None and code:
            fence = code.group(2)
        elif fence and closes(line, fence):
            fence = None
        opener = INDENTED_OPENER.match(line) if fence is None else None
        block = BLOCK_FENCE.match(line) if fence is None and not code else None
        if opener:
            indent = len(opener.group(1)) + 4
            body, i = [], i + 1
            while i < len(lines) and (not lines[i].strip() or
                                      len(lines[i]) - len(lines[i].lstrip()) >= indent):
                body.append(lines[i][indent:] if lines[i].strip() else "")
                i += 1
            out += ([opener.group(2), ""] if opener.group(2) else []) + unwrap(body) + [""]
            continue
        if block:
            rest = block.group(1).strip()
            title = (rest.split("|", 1)[1].strip() if "|" in rest else
                     rest[rest.index("[") + 1:-1].strip() if "[" in rest and rest.endswith("]") else "")
            out += [title, ""] if title else [""]
            while i + 1 < len(lines) and lines[i + 1].startswith(("    ", "\t")):
                i += 1                               # "::: module.name" and its indented options
        else:
            out.append(line)
        i += 1
    return out


def code_block(fence, rest) -> str:
    """The code a FENCE match opens, verbatim until a fence as long, as ```lang ... ```; the
    lines come from the iterator `rest`, which is left after the closing fence."""
    indent, mark, language = len(fence.group(1)), fence.group(2), fence.group(3)
    code = []
    for inner in rest:
        if closes(inner, mark):
            break
        # the fence's own indent comes off; a line indented less loses what it has
        code.append(inner.lstrip() if inner[:indent].strip() else inner[indent:])
    return "\n".join([f"```{language}", *code, "```"])


def read_markdown(text: str) -> list[tuple[str, list[tuple[str, str]]]]:
    r"""Markdown -> [(heading path, [(kind, text), ...])], kind "text", "list", "table" or "code".

    read_markdown("# A\nSome *text*.\n```py\nx = 1\n```")
      -> [("A", [("text", "Some *text*."), ("code", "```py\nx = 1\n```")])]
    Code blocks keep their line breaks and note their language; a '#' line inside one is code.
    """
    lines = unwrap(COMMENT.sub("", text).splitlines())
    sections, path, blocks, para, kind = [], [], [], [], None      # path: [(level, title), ...]
    targets = {m.group(0).strip()[1:].split("]:")[0].lower() for line in lines if (m := REFERENCE.match(line))}
    shortcut = lambda found: found.group(1) if found.group(1).lower() in targets else found.group(0)

    def end_block():
        nonlocal para, kind
        if para:                                 # markup out only now: a tag may span lines
            joined = (" ".join(plain(" ".join(para)).split()) if kind == "text" else
                      "\n".join(" ".join(plain(item).split()) for item in para))
            joined = SHORTCUT.sub(shortcut, joined)     # [docs_dir], a link by a target's name
            if joined.strip():
                blocks.append((kind, joined.strip()))
        para, kind = [], None

    def start_section(level, title):
        nonlocal path, blocks
        end_block()
        sections.append((" > ".join(t for _, t in path), blocks))
        path, blocks = [(n, t) for n, t in path if n < level] + [(level, title)], []

    rest = iter(lines)
    for line in rest:
        fence, heading = FENCE.match(line), ATX.match(line)
        if fence:
            end_block()
            blocks.append(("code", code_block(fence, rest)))
        elif heading:
            start_section(len(heading.group(1)), heading_text(heading.group(2) or ""))
        elif SETEXT.match(line) and kind == "text" and para:
            title, para = heading_text(" ".join(para)), []
            start_section(1 if line.strip()[0] == "=" else 2, title)
        elif TABLE_RULE.match(line) and para and "|" in para[-1]:
            header = para.pop()                      # the row above the rule is the header
            end_block()
            para, kind = [header.strip()], "table"
        elif not line.strip() or SETEXT.match(line) or REFERENCE.match(line):
            end_block()                              # a blank line, a rule (---), a link target
        elif kind == "table" and "|" in line:
            para.append(line.strip())
        elif kind == "list" and para and line.startswith((" ", "\t")) and not LIST_ITEM.match(line):
            para[-1] += " " + line.strip()           # a list item's continued line
        else:                                        # a list item, or a line of prose
            new = "list" if LIST_ITEM.match(line) else "text"
            if kind != new:
                end_block()
            kind = new
            para.append(line.strip())
    end_block()
    sections.append((" > ".join(t for _, t in path), blocks))
    return [(title, found) for title, found in sections if found]
