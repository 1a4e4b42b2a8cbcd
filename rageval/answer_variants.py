"""
rageval/answer_variants.py: the grounded answer's variants that the kit does not run, kept so
rageval/answer_tuning.py can compare them with the kit's: a second instruction, and three
looser checks of a quote than the kit's "exact" (ragkit/answering.py).

    prompt = answering.grounded_prompt(question, found, INSTRUCTIONS["quote-two-sentences"])
    checked = check_reply(reply, prompt, "section")      # answering.check_reply's dict

exact: only the passage the model named (the kit's check, ragkit/answering.py's where());
any-passage: any passage (the model often names the wrong one), the one it is really in shown;
loose: any passage, a dropped word forgiven; section: loose, and a heading the model quoted
("site_name") stands for the sentences under it in its passage, which are shown in its place.
"""

from __future__ import annotations

import hashlib

from ragkit import answering
from ragkit.support import split_sentences


# The prompt's last lines, by name: the kit's, and the one it was compared with on MkDocs.
INSTRUCTIONS = {
    "quote-two": answering.INSTRUCTION,
    "quote-two-sentences": (
        "Copy, word for word, the one or two whole sentences from the passages that answer the "
        "question (not a heading, not a single word), each on its own line with its passage "
        "number, like this:\n"
        "Quote: \"...\" [n]\n"
        "Then answer the question in a few words, like this:\n"
        "Answer: ...\n"
        f"If no sentence in the passages answers the question, reply only: {answering.REFUSAL}"),
}
# The kit's instruction over shorter passages: each cut to its heading and the sentences nearest
# the question (trimmed() below), so 8 passages make a prompt of about 900 tokens, not 1,700.
INSTRUCTIONS["quote-two, trimmed"] = INSTRUCTIONS["quote-two"]
TRIMMED = {"quote-two, trimmed"}
# Words a trimmed passage keeps (its heading line aside): set so the development questions'
# prompts of 8 passages come to about 900 tokens (median), before any reply was scored.
TRIM_WORDS = 30
GAP = "[...]"              # a line where a trimmed passage left sentences out
STRICTNESS = ("exact", "any-passage", "loose", "section")   # how a quote is checked: see where()
SECTION_WORDS = 40         # a heading quoted stands for at most this many words under it


def passage_units(text: str) -> list[tuple[int, str]]:
    """A passage as (line number, unit): each sentence of a prose line, each list item or table
    row, each fenced code block whole."""
    units, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        if lines[i].lstrip().startswith("```"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), len(lines) - 1)
            units.append((i, "\n".join(lines[i:end + 1])))
            i = end + 1
            continue
        units += [(i, sentence) for sentence in split_sentences(lines[i])]
        i += 1
    return units


def trimmed(text: str, question: str, words: int = TRIM_WORDS) -> str:
    """The passage's first line (its heading, a short one), then its units (passage_units) that
    share the most of the question's content words, each with the unit before and after it, in
    the passage's order, up to `words` words; GAP where units were left out between them. The
    best unit is kept whatever its length; a passage within `words` is kept whole."""
    if len(text.split()) <= words:
        return text
    stop = answering.stop_words()
    asked = set(answering.content_words(question, stop))
    units = passage_units(text)
    head = 1 if units and units[0][0] == 0 and len(units[0][1].split()) <= 12 \
        and not any(u[0] == 0 for u in units[1:]) else 0
    body = units[head:]
    shared = [len(asked & set(answering.content_words(u, stop))) for _, u in body]
    order = sorted((n for n in range(len(body)) if shared[n]), key=lambda n: (-shared[n], n)) \
        or range(len(body))               # nothing of the question here: the passage's start
    kept, used = set(), 0
    for n in order:
        for m in (n, n - 1, n + 1):       # the unit, then what leads into it and follows it
            if not 0 <= m < len(body) or m in kept:
                continue
            size = len(body[m][1].split())
            if kept and used + size > words:
                if m == n:
                    break                 # the unit does not fit: nor do its neighbours
                continue
            kept.add(m)
            used += size
        if used >= words or (not any(shared) and n not in kept):
            break
    out, last = [units[0][1]] if head else [], None
    for m in sorted(kept):
        line, unit = body[m]
        if last is not None and m != last + 1:
            out.append(GAP)
        elif last is not None and line == body[last][0]:
            out[-1] += " " + unit             # the next sentence of the same line
            last = m
            continue
        elif last is None and m > 0:
            out.append(GAP)
        out.append(unit)
        last = m
    if last is not None and last < len(body) - 1:
        out.append(GAP)
    return "\n".join(out)


def found_loosely(quote: str, passage: str) -> bool:
    """Is the quote text of the passage, as a whole once normalised, or its words in the same
    order, one run of the passage covering 90% of them (a model dropped a word)?"""
    if answering.found_in(quote, passage):
        return True
    from difflib import SequenceMatcher
    q, p = answering.words_of(quote), answering.words_of(passage)
    match = SequenceMatcher(None, q, p, autojunk=False).find_longest_match(0, len(q), 0, len(p))
    return match.size >= 0.9 * len(q)


def section_under(heading: str, text: str) -> str | None:
    """The heading's line of a passage and the whole sentences under it, up to SECTION_WORDS
    words and never past the next heading; None if the heading is no line of it."""
    normalised = answering.normalised
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if normalised(line) == normalised(heading)), None)
    if start is None:
        return None
    body = []                            # prose only: a code block or the next heading ends it
    for line in lines[start + 1:]:
        if line.lstrip().startswith("```") or line in answering.headings(("", line)) \
                or len(" ".join(body + [line]).split()) > 4 * SECTION_WORDS:
            break
        body.append(line)
    kept = []
    for sentence in split_sentences("\n".join(body)):
        if kept and len(" ".join(kept + [sentence]).split()) > SECTION_WORDS:
            break
        kept.append(sentence)
    while kept and kept[-1].rstrip().endswith(":"):          # a lead-in whose code is not shown
        kept.pop()
    return "\n".join([lines[start], *kept]) if kept else None


def where(quote: str, number: str, passages: dict, strictness: str) -> tuple[str | None, str, str]:
    """answering.where() under any of STRICTNESS (see the top of this file): (the number of the
    passage the quote is in, or None; why not; what to show of it)."""
    if strictness not in STRICTNESS:
        raise ValueError(f"unknown strictness {strictness!r}: choose from {', '.join(STRICTNESS)}")
    if strictness == "exact":
        return answering.where(quote, number, passages)
    order = [n for n in [number] + [n for n in passages if n != number] if n in passages]
    heading = answering.is_heading(quote, passages)
    short = len(answering.words_of(quote)) < answering.MIN_QUOTE_WORDS
    if strictness == "section" and (heading or short):
        for n in order:
            section = section_under(quote, passages[n][1])
            if section:
                return n, "", section
    if short:
        return None, "too short to stand for a sentence", quote
    if heading:
        return None, "a heading, not a sentence", quote
    found = found_loosely if strictness in ("loose", "section") else answering.found_in
    for n in order:
        if found(quote, passages[n][1]):
            return n, "", quote
    return None, "in no passage", quote


def fence_tag(question: str, seed: str) -> str:
    """A prompt's marker tag that is the same for the same question and seed: the development
    runs keep each reply by its prompt, so a rerun asks the same (the kit's tag is random)."""
    return hashlib.sha256(f"{seed}\n{question}".encode()).hexdigest()[:16]


def check_reply(reply: str, prompt: answering.GroundedPrompt, strictness: str = "exact",
                min_topic: float = 0.0) -> dict:
    """answering.check_reply() under any of STRICTNESS: the quotes found by where() above, then
    judged as the kit judges them (answering.judged)."""
    quotes, answer = answering.read_reply(reply)
    passages = prompt.numbered()
    located = [(q, n, where(q, n, passages, strictness)) for q, n in quotes]
    return answering.judged(reply, answer, located, prompt, min_topic)


def checked_answer(reply: str, prompt: answering.GroundedPrompt, strictness: str, unchecked: str,
                   min_topic: float) -> tuple[dict, str]:
    """ragkit/answering.py's checked_answer under any of STRICTNESS: (the check, what is shown)."""
    checked = check_reply(reply, prompt, strictness, min_topic)
    if unchecked == "flag" and not checked["checked"] and not checked["refused"] and checked["answer"]:
        return checked, f"{checked['answer']}\n  (unsupported: no quote of it was found in the passages)"
    return checked, answering.shown_answer(checked)
