"""
ragkit/reply_cleaning.py: what a language model writes, cleaned before anyone reads it.

    pieces = guard(model_pieces, prompt.citable(), prompt.tag)   # for --stream
    text = Guarded(model).answer(prompt)                   # a whole answer, the same rules

prompt is ragkit/grounded.py's GroundedPrompt: its passages and tag travel beside its text.

A model's reply is untrusted text, and a small model's is often broken. Before it reaches the
screen:
  - the prompt's own fence markers (<<BEGIN tag [1] source="...">>), or what is left of one,
    are taken out: they are the kit's scaffolding, not an answer;
  - a citation of a passage the prompt does not have ([7] of five) is taken out;
  - a line that starts like one of the kit's own ("sources:", "error:") is marked "(reply)";
  - at the first sentence said a second time, or a phrase repeated three times in a row
    (a loop), the answer ends.
Shown word by word, it holds back only what could still turn into one of these. Code blocks
pass as they are. What it cannot do: tell a true sentence from a false one; the quote check
(ragkit/grounded.py) does what can be done there.
"""

import itertools
import re
from dataclasses import dataclass, field

from ragkit.grounded import GroundedPrompt
from ragkit.text import CODE, in_prose, sentence_ends

# A marker whole ("<<BEGIN tag [2] source="a.md > Setup">>"; a source may hold '>'), one cut
# short at either end ('<<BEGIN 3f2a', 'source="a.md', 'Guide">>'), or its source alone.
FENCE_MARKER = re.compile(r"<<\s*(?:BEGIN|END)\b(?:[^\n]{0,300}?>>|[^<>\n]{0,40})"
                          r"|\bsource=\"[^\"\n]{0,300}\"(?:\s*>>)?|[^\n<\"]{0,300}\"\s*>>")
CITATION = re.compile(r"\[([^\[\]\n]{1,300})\](?!\()")
LONGEST_LINE = 4000          # characters a line holding "<<" is held back for, at most
KIT_LINES = ("sources:", "[stream]", "(unsupported", "(no answer", "(checked", "==", "--", "error:",
             "q:", "[skip]")         # a reply line starting like these is marked "(reply)"
OPENERS = {"[": "]", "<": None, '"': None, ">": None}    # what may still become a marker or citation


def sentence_parts(line: str) -> list[str]:
    """A line cut after each sentence, never inside a fence marker (its source may hold '. ')."""
    markers = [m.span() for m in FENCE_MARKER.finditer(line)]
    parts, last = [], 0
    for end, start in sentence_ends(line):
        if not any(a < end < b for a, b in markers):
            parts.append(line[last:end])
            last = start
    return parts + [line[last:]]


def segments(buffer: str) -> tuple[list[str], str]:
    """(finished pieces, the unfinished rest): sentences, each line's last one with its "\\n".
    An unfinished line holding "<<" waits for its end: a fence marker may still be arriving."""
    *lines, rest = buffer.split("\n")
    done = []
    for line in lines:
        parts = sentence_parts(line)
        done += parts[:-1] + [parts[-1] + "\n"]
    if "<<" in rest and len(rest) <= LONGEST_LINE:
        return done, rest
    *more, rest = sentence_parts(rest)
    return done + more, rest


def cleaned(segment: str, sources: set, tag: str = "") -> str:
    """A piece of an answer without the prompt's fence markers (or its tag, echoed alone) and
    without citations of sources the prompt does not have (a model invents them)."""
    segment = FENCE_MARKER.sub("", segment)
    if tag:                  # the tag, or its start where the answer was cut off
        segment = re.sub(r"(?:<<\s*)?(?:BEGIN|END)?\s*\b([0-9a-f]{6,16})\b(?:\s*\[\d+\])?(?:\s*>>)?",
                         lambda m: "" if tag.startswith(m.group(1)) else m.group(0), segment)
    files = {s.split(" > ")[0] for s in sources}
    real = lambda name: name in sources or name.split(" > ")[0] in files
    return in_prose(segment, lambda prose: CITATION.sub(lambda m: m.group(0) if real(m.group(1).strip())
                                                        else "", prose))


def loop_key(text: str) -> str:
    """A sentence as loops are compared: code spans blanked ("a subclass of `X`", "... of `Y`":
    a small model's loop that only changes a name), lower case, one space between words."""
    return " ".join(CODE.sub("`", text).lower().split())


def held_back(rest: str) -> int:
    """Where what could still become a marker or a citation starts in the unfinished rest of
    a segment: an '[' not closed yet, or the first '<', '>' or '"' (a marker's end may still
    come: 'Guide">>'); len(rest) if nothing is held."""
    cut = len(rest)
    for opener in re.finditer(r'[\[<>"]', rest):
        closer = OPENERS[opener.group()]
        if closer is None or closer not in rest[opener.end():]:
            cut = min(cut, opener.start())
    return cut


@dataclass
class Shown:
    """What guard() has shown of one answer so far, and what it remembers of it."""
    sources: set                 # what the prompt's passages may be cited as
    tag: str = ""                # the prompt's marker tag
    seen: set = field(default_factory=set)    # loop_key() of every sentence shown
    code: bool = False           # inside a code block
    line_start: bool = True      # the next segment starts a line
    on_screen: str = ""          # how much of the unfinished segment is shown already

    def finish(self, segment: str) -> str | None:
        """The rest of a finished segment as shown, or None for a repeat (the end)."""
        starts_code = segment.lstrip().startswith("```")
        self.code = self.code != starts_code
        if self.code or starts_code:
            text = segment[len(self.on_screen):]
        else:
            whole = loop_key(cleaned(segment, self.sources, self.tag))
            if len(whole.split()) >= 2 and whole in self.seen:
                return None
            self.seen.add(whole)
            rest = cleaned(segment[len(self.on_screen):], self.sources, self.tag)
            text = self.marked(segment, rest)
        self.line_start, self.on_screen = segment.endswith("\n"), ""
        return text if text.endswith("\n") else text + " "

    def ready(self, rest: str) -> int:
        """How much of the unfinished segment can be on screen: whole words before anything
        held back, and nothing new while the sentence could still be one said before."""
        start = rest.lstrip().lower()
        kit_like = (self.line_start and not self.on_screen
                    and any(k.startswith(start) for k in KIT_LINES))
        if self.code or start.startswith("`") or kit_like:
            return len(self.on_screen)    # code, or a line that may yet turn into one of the kit's
        cut = min(len(sentence_parts(rest)[0]), held_back(rest))
        cut = max(rest.rfind(" ", 0, cut), rest.rfind("\t", 0, cut)) + 1
        so_far = loop_key(cleaned(rest[:cut], self.sources, self.tag))
        said = any(s == so_far or s.startswith(so_far + " ") for s in self.seen)
        if cut <= len(self.on_screen) or said:
            return len(self.on_screen)
        return cut

    def marked(self, segment: str, text: str) -> str:
        """text, marked "(reply)" when it starts a line the way one of the kit's own does."""
        kit_like = segment.lstrip().lower().startswith(KIT_LINES)
        if not self.on_screen and self.line_start and kit_like:
            return "(reply) " + text.lstrip()
        return text


def guard(pieces, sources: set, tag: str = ""):
    """Yield an answer's text as it comes, cleaned (see cleaned()): word by word, but holding
    back what could still turn into a fence marker or a citation until its sentence ends, and
    a sentence while it could still be one said before; at the first sentence said again (a
    loop) it stops. A line that starts like one of the kit's own is marked "(reply)". Code
    blocks are passed on as they are, a line at a time."""
    shown, buffer = Shown(sources, tag), ""
    for piece in itertools.chain(pieces, [None]):
        # None: the answer ended, so what is left is finished too
        if piece is not None:
            done, buffer = segments(buffer + piece)
        else:
            done, buffer = (sentence_parts(buffer) if buffer else []), ""
        for i, segment in enumerate(done):
            text = shown.finish(segment)
            if text is None:
                return
            yield text.rstrip(" ") if piece is None and i == len(done) - 1 else text
        if buffer and (cut := shown.ready(buffer)) > len(shown.on_screen):
            new = cleaned(buffer[len(shown.on_screen):cut], shown.sources, shown.tag)
            text = shown.marked(buffer, new)
            shown.on_screen = buffer[:cut]
            yield text


def looping(words: list[str]) -> bool:
    """Do the last words repeat one phrase, three times in a row (a word, six times)? A small
    model's loop inside a sentence: "the output of the output of the output of"."""
    for k in range(1, 13):
        times = max(3, -(-6 // k))
        tail = words[-k * times:]
        if len(tail) == k * times and tail == tail[:k] * times:
            return True
    return False


def without_phrase_loops(pieces):
    """The pieces of an answer until a phrase loops (see looping()): cut before the word that
    would complete the loop. Code and words with no letter or digit ("|", "---") are not counted."""
    words, code = [], False
    for piece in pieces:
        kept = []
        for token in re.split(r"(\s+)", piece):
            if token.startswith("```"):
                code, words = not code, []
            elif not code and re.search(r"\w", token):
                words.append(token.lower().strip(".,;:!?"))
                if looping(words):
                    yield "".join(kept).rstrip()
                    return
            kept.append(token)
        yield "".join(kept)


def guarded_reply(reply: str, prompt: GroundedPrompt) -> str:
    """A whole reply to a GroundedPrompt as guard() leaves it (spaces it left doubled in prose
    made single)."""
    text = "".join(without_phrase_loops(guard([reply], prompt.citable(), prompt.tag)))
    return in_prose(text, lambda prose: re.sub(r"[ \t]{2,}", " ", prose)).strip()


@dataclass
class Guarded:
    """A generator (ragkit/llm.py's Generator) whose answer, a string or pieces as they come,
    passes through guard()."""
    model: object

    name = property(lambda self: self.model.name)
    runtime = property(lambda self: self.model.runtime)
    streams = property(lambda self: self.model.streams)
    truncated = property(lambda self: self.model.truncated)     # of the last reply
    usage = property(lambda self: self.model.usage)

    def answer(self, prompt: GroundedPrompt):
        """The model's answer to a GroundedPrompt, cleaned: pieces when the model streams."""
        answer = self.model.answer(prompt)
        if not isinstance(answer, str):               # a stream: guarded as it comes
            return without_phrase_loops(guard(answer, prompt.citable(), prompt.tag))
        return guarded_reply(answer, prompt)
