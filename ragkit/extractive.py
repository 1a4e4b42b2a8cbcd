"""
ragkit/extractive.py: an answer with no language model: the retrieved sentences that answer,
quoted.

    python rag_from_scratch.py --question "How much time off do new fathers get?" --generator extractive

extractive_generator() returns an Extractive generator: its answer(prompt) stands where a
language model's would, and it reads only what a model is given: the grounded prompt's question
and passages (ragkit/answering.py's GroundedPrompt, the passages kept beside its text). It picks
sentences of the passages and replies in the form a model is asked for, each sentence a Quote
line with its passage's number, or with the refusal; the kit then checks and shows the reply
like any model's. How it picks:
  - with MiniLM (your own pages, --docs): by meaning (the cosine of question and sentence) and
    the question's rare words the sentence shares, more for a sentence that names an option,
    command or path or holds code, less for one that is a question itself or comes from a
    lower-ranked passage. It refuses when the best sentence's meaning and words fall below a
    threshold, a higher one when the question has a word no page uses ("conda", "Sentry":
    often what the pages lack);
  - otherwise (the tutorial's ten policies, TF-IDF, no model): by the rare words it shares
    with the question, refusing when too little of the question is supported.
The weights and thresholds are chosen on the development sets by leaving one project out,
counting a wrong answer against a refusal (`python -m rageval.tuning`; the figures and the
history are in docs/generation.md). A heading alone, a lead-in with nothing after it or a list
of links is never an answer; a sentence that points back ("This ...", "Outside those hours")
brings the one before it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ragkit import answering
from ragkit.support import in_prose, split_sentences
from ragkit.answering import content_words, idf_weights, stop_words, supported_share

MIN_SUPPORT = 0.25    # words alone: refuse below this share of the question supported
# WEIGHTS and the two REFUSE_BELOW scores were fitted by rageval/tuning.py when it cut refusals
# at a share of the answerable questions (8%). Refitted as the project now scores (a wrong
# answer -2, a right one +1, after the kit's quote check; `python -m rageval.tuning --part
# answer`), every held-out project refuses 26 to 29 of its 30 to 38 answerable questions and
# every question of the tutorial's sample: the support score does not tell a right sentence
# from a wrong one well enough to answer at that price. These are kept, and the answer is
# labelled "often wrong" where it is offered (docs/generation.md has both fits' figures).
WEIGHTS = {"meaning": 0.7, "words": 0.8, "names": 1.03, "code": 0.52, "asks": -0.05, "rank": -0.22}
REFUSE_BELOW = -0.46             # with MiniLM: refuse below this support ...
REFUSE_BELOW_NEW_WORD = 0.41     # ... or this one, when the question has a word no page uses
ANSWER_WORDS = 50          # more sentences from the best one's file join it up to this many words


# ---------------------------------------------------------------------------
# The extractive generator
# ---------------------------------------------------------------------------
def question_parts(question: str, stop: frozenset) -> list[str]:
    """A question joined by "and" has two parts when each side has content words of its own."""
    parts = [p for p in re.split(r"\band\b", question, maxsplit=1)]
    if len(parts) == 2 and all(len(content_words(p, stop)) >= 2 for p in parts):
        return parts
    return [question]


def best_sentence(part_words: set, candidates: list[dict], idf: dict, skip: set) -> dict | None:
    """The candidate whose words shared with the question weigh most (sum of IDF).

    Ties go to the earlier sentence: the retriever's order, as a reader would start
    with the first passage. (Dividing by sentence length lost 1 fact of 10: it favours
    short sentences that share one common word.)
    """
    def score(c):
        return sum(idf.get(w, idf[None]) for w in part_words & c["words"])
    scored = [(score(c), -i, c) for i, c in enumerate(candidates) if c["text"] not in skip]
    if not scored:
        return None
    best = max(scored, key=lambda t: (t[0], t[1]))
    return best[2] if best[0] > 0 else None


def support(question_words: set, chosen: list[dict], idf: dict) -> float:
    """IDF-weighted share of the question's content words found in the chosen sentences."""
    answer_words = set().union(*(c["words"] for c in chosen)) if chosen else set()
    return supported_share(question_words, answer_words, idf)


LIST_OR_TABLE = re.compile(r"(?:[-*+]|\d+[.)])\s|\|")     # "- item", "1. step", "| a | b |"


REFERS_BACK = re.compile(r"(?:this|that|these|those|it|they|such|there|then|otherwise|outside "
                         r"(?:of )?(?:this|that|these|those))\b", flags=re.I)   # "Outside those hours, ..."


def passage_units(text: str) -> list[dict]:
    """A passage's sentences, each {"text": what is scored, "quote": the pieces of the passage
    it quotes, word for word}. A line break ends a sentence too. A fenced code block stays with
    the sentence before it ("Install it:" and the commands), and so do the list items after a
    sentence that ends with a colon ("The options are:" and the options). A table row comes
    with the table's header row, which says what its cells mean (quoted apart: shown once). A
    sentence that points back ("This ...", "Outside those hours, ...") brings the one before it.
    A short title line ("Version pin") is scored with the sentence after it, not quoted."""
    units, lines, i, title, introduces, header = [], text.split("\n"), 0, "", False, ""
    while i < len(lines):
        line = lines[i].strip()
        if 0 < len(line.split()) <= 6 and not line.endswith((".", "!", "?", ":")) \
                and i + 1 < len(lines) and not line.startswith("```") \
                and not LIST_OR_TABLE.match(line):
            title, i = f"{title}{line}: ", i + 1          # a title line ("Version pin") leads
            continue                                     # into the sentence after it
        if lines[i].startswith("```"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j] == "```"), len(lines) - 1)
            block = "\n".join(lines[i:end + 1])
            if units:
                units[-1]["text"] += "\n" + block
                units[-1]["quote"][-1] += "\n" + block
            else:
                units.append({"text": block, "quote": [block]})
            i = end + 1
            continue
        if introduces and LIST_OR_TABLE.match(line):
            units[-1]["text"] += "\n" + line
            units[-1]["quote"][-1] += "\n" + line
        elif line.startswith("|"):                       # a table row keeps its header row
            first = i == 0 or not lines[i - 1].strip().startswith("|")
            header = line if first else header
            last = i + 1 == len(lines) or not lines[i + 1].strip().startswith("|")
            if not first or last:                        # a header alone only if it is all
                units.append({"text": line if first else f"{header}\n{line}",
                              "quote": [line] if first else [header, line]})
        else:
            sentences = split_sentences(lines[i])
            for n, sentence in enumerate(sentences):
                quote = sentence
                if n and REFERS_BACK.match(sentence):      # its subject is in the one before
                    quote = f"{sentences[n - 1]} {sentence}"
                units.append({"text": (title if n == 0 else "") + sentence, "quote": [quote]})
            title = "" if sentences else title
            introduces = bool(sentences) and sentences[-1].endswith(":")
        i += 1
    return units


# `x`, --flag, a/b, a_b
NAMES = re.compile(r"`[^`\n]+`|(?<![\w-])--?[a-z][\w-]+|\b\w+/\w+|\b[a-z]+_[a-z_]+\b")
# #123, 1.2.0, URLs, hashes
LINKISH = re.compile(r"#\d+|\bv?\d+(?:\.\d+)+\b|https?://\S+|\b[0-9a-f]{7,40}\b")


def answers_nothing(sentence: str) -> bool:
    """A heading alone, a lead-in with nothing after it, or a line of links and version numbers
    (a changelog's): never an answer."""
    words = sentence.split()
    ends = sentence.rstrip()
    if ends.endswith(":") or (len(words) <= 6 and not ends.endswith((".", "!", "?", "```"))):
        return True
    return len(LINKISH.findall(sentence)) * 2 >= len(words)


def candidate_sentences(passages, stop: frozenset) -> list[dict]:
    """Every distinct sentence that could answer, in retrieval order, with its passage's number
    and source, its words, its passage's rank and whether it names an option, command or API.
    Square brackets in the scored text become round ones (they are no citations); the quote
    keeps the passage's own words."""
    seen, out = set(), []
    for rank, passage in enumerate(passages):           # grounded.Passage, in retrieval order
        number, source = passage.number, passage.source
        for unit in passage_units(passage.text):
            sentence = in_prose(unit["text"], lambda t: t.replace("[", "(").replace("]", ")"))
            if sentence not in seen and not answers_nothing(sentence):
                seen.add(sentence)
                out.append({"number": number, "source": source, "text": sentence, "rank": rank,
                            "quote": unit["quote"], "words": set(content_words(sentence, stop)),
                            "names": bool(NAMES.search(sentence)), "code": "```" in sentence,
                            "asks": sentence.rstrip().endswith("?")})
    return out


def extract_answer(prompt: answering.GroundedPrompt, min_support: float = MIN_SUPPORT, encode=None,
                   weights: dict = WEIGHTS, refuse_below: tuple = (REFUSE_BELOW, REFUSE_BELOW_NEW_WORD),
                   known_words: set | None = None) -> str:
    """A reply in the grounded form (ragkit/answering.py): the best retrieved sentences, each a
    Quote line with its passage's number, or the refusal. encode(texts) -> unit vectors
    (MiniLM's) scores by meaning too, refusing below refuse_below[0], or [1] when the question
    has a word not in `known_words` (the pages'); without encode, by words alone, refusing below
    `min_support` of the question."""
    stop = stop_words()
    question = prompt.question.strip()
    candidates = candidate_sentences(prompt.passages, stop)
    idf = idf_weights([c["words"] for c in candidates])
    if encode is not None:
        new_word = known_words is not None and not set(content_words(question, stop)) <= known_words
        chosen = pick(candidates, features(question, candidates, idf, stop, encode), weights,
                      refuse_below[new_word])
    else:
        chosen = []
        for part in question_parts(question, stop):
            found = best_sentence(set(content_words(part, stop)), candidates, idf,
                                 {c["text"] for c in chosen})
            if found is not None:
                chosen.append(found)
        if chosen and support(set(content_words(question, stop)), chosen, idf) < min_support:
            chosen = []
    if not chosen:
        return answering.REFUSAL
    return "\n".join(f'Quote: "{piece}" [{c["number"]}]' for c in chosen for piece in c["quote"])


def features(question: str, candidates: list[dict], idf: dict, stop, encode) -> list[list[dict]]:
    """For each part of the question, every candidate's features: meaning (the cosine of the
    part and the sentence with its source in front, as --context embeds chunks), words
    (share of the part's rare words), names (an option, command or path), code, asks (a
    question itself, as FAQ headings are), rank (of its passage)."""
    parts = question_parts(question, stop)
    titled = [f"{c['source'].replace('_', ' ').replace('`', ' ')}: {c['text']}"    # file > headings: ...
              for c in candidates]
    vectors = encode(parts + titled) if candidates else []
    out = []
    for p, part in enumerate(parts):
        words = set(content_words(part, stop))
        total = sum(idf.get(w, idf[None]) for w in words) or 1.0
        out.append([{"meaning": float(vectors[p] @ vectors[len(parts) + i]),
                     "words": sum(idf.get(w, idf[None]) for w in words & c["words"]) / total,
                     "names": float(c["names"]), "code": float(c["code"]),
                     "asks": float(c["asks"]), "rank": float(c["rank"])}
                    for i, c in enumerate(candidates)])
    return out


def support_of(features: dict, weights: dict) -> float:
    """How well a sentence answers, in meaning and rare words alone: what refusing compares
    with REFUSE_BELOW (options, code and rank help choose a sentence, not decide to answer)."""
    return weights["meaning"] * features["meaning"] + weights["words"] * features["words"]


def pick(candidates: list[dict], features: list[list[dict]], weights: dict,
         refuse_below: float) -> list[dict]:
    """For each part's features, the candidate with the highest weighted sum (ties: the earlier
    one), each candidate once, then the next best of the first part's from the same file while
    the answer stays within ANSWER_WORDS; nothing if the best supported is below `refuse_below`."""
    chosen, best, orders = [], float("-inf"), []
    for part in features:
        totals = [sum(weights[f] * x[f] for f in weights) for x in part]
        orders.append(sorted(range(len(totals)), key=lambda i: (-totals[i], i)))
        first = next((i for i in orders[-1] if candidates[i] not in chosen), None)
        if first is not None:
            chosen.append(candidates[first])
            best = max(best, support_of(part[first], weights))
    if best < refuse_below:
        return []
    file = chosen[0]["source"].split(" > ")[0]
    for i in orders[0][1:3]:                       # the runners-up of the first part
        more = candidates[i]
        words = sum(len(c["text"].split()) for c in chosen + [more])
        if more not in chosen and more["source"].split(" > ")[0] == file and words <= ANSWER_WORDS:
            chosen.append(more)
    return chosen


def known_words(chunks: list[dict]) -> set:
    """Every content word of the pages (titles too): a question word outside it is one the
    pages never use."""
    stop = stop_words()
    return {w for c in chunks for w in content_words(f"{c['title']} {c['text']}", stop)}


@dataclass
class Extractive:
    """The generator with no language model: it answers from a grounded prompt's own passages,
    by meaning too when `encode` is MiniLM's (and by words alone without it)."""
    encode: object = None               # texts -> unit vectors, or None
    known_words: set | None = None      # the pages' words (known_words()), or None
    min_support: float = MIN_SUPPORT
    streams: bool = False               # answer() gives the pieces, one cited sentence each
    truncated: bool = False             # no token limit: never cut short
    usage: dict = field(default_factory=dict)     # no tokens counted

    @property
    def runtime(self) -> str:
        """What answers: no model, and MiniLM if it scores the sentences."""
        return "no model" + (", sentences scored by MiniLM" if self.encode else "")

    @property
    def name(self) -> str:
        """The name shown above the answer."""
        return f"extractive: {self.runtime}"

    def answer(self, prompt: answering.GroundedPrompt):
        """The reply in the grounded form; with streams, an iterator of its lines."""
        answer = extract_answer(prompt, self.min_support, self.encode, known_words=self.known_words)
        return iter(answer.splitlines(keepends=True)) if self.streams else answer


def extractive_generator(min_support: float = MIN_SUPPORT, stream: bool = False, embedder=None,
                         chunks=None) -> Extractive:
    """The Extractive generator: by meaning too when `embedder` is MiniLM (the one that indexed
    `chunks`, whose words it learns), else by words alone; stream=True: the same answer as an
    iterator, one cited sentence at a time."""
    encode = embedder.encode if embedder is not None and embedder.backend == "minilm" else None
    known = known_words(chunks) if encode and chunks else None
    return Extractive(encode, known, min_support, stream)
