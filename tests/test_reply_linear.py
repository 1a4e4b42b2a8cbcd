"""A hostile reply, read (ragkit/answering.py, rageval/citations.py): replies of 256 KB and 1 MB
built from the shapes that once made a check quadratic (a run of blank lines took 247.5 s) are
each checked in seconds, 1 MB in about four times what 256 KB takes; a reason quoting a reply
shows its start and names its size; a quote inside the answer's line is not shown as the answer."""
import re
import time

import pytest

from rageval import citations
from ragkit import answering

PASSAGES = [{"doc_id": "IT-01", "title": "Backups",
             "text": "Backups run every night at 02:00. They are kept for 30 days."}]
QUESTION = "When do backups run?"
QUOTED = 'Quote: "Backups run every night at 02:00." [1]\nAnswer: It runs at 02:00.'    # the kit's form
CITED = "Sentences: [1.1]\nAnswer: It runs at 02:00."                                 # the evaluation's
UNITS = {"blank lines": "\n ", "bare line ends": "\n", "quotes opened": 'Quote: "', "quote marks": '"\n',
         "citations": "[1]", "markers": "<<BEGIN ", "spaces": " ", "answer labels": "Answer:",
         "initials": "a. "}                          # a full stop and a space, no sentence's end
SHAPES = [*UNITS, "a number in a citation"]


def hostile(shape: str, head: str, size: int) -> str:
    """A reply of about `size` characters: `head`, then `shape` repeated (or, for "a number in a
    citation", head with its first citation's number `size` digits long)."""
    if shape == "a number in a citation":
        return head.replace("[1", "[" + "9" * size, 1)          # [999...9] or [999...9.1]
    return head + UNITS[shape] * (size // len(UNITS[shape]))


def seconds(check, reply: str) -> float:
    start = time.perf_counter()
    check(reply)
    return time.perf_counter() - start


def assert_linear(check, reply_of, small: int = 256 * 1024, large: int = 1024 * 1024) -> None:
    """check(reply) of `large` characters within 10 s, and within ten times (plus a second) what
    `small` took: 4x the size in about 4x the time, where a quadratic check takes 16x (and took
    minutes at 64 KB). Measured on a busy 2-core machine: a check of 1 MB in at most 1.1 s, the
    guard's 256 KB in at most 1.2 s."""
    fast, slow = seconds(check, reply_of(small)), seconds(check, reply_of(large))
    assert slow < 10, f"{large:,} characters took {slow:.1f} s"
    assert slow < 10 * fast + 1, f"{small:,} characters took {fast:.2f} s, {large:,} took {slow:.2f} s"


@pytest.fixture(scope="module")
def prompt():
    return answering.grounded_prompt(QUESTION, PASSAGES)


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
def test_every_hostile_reply_is_checked_in_linear_time(prompt, shape):
    assert_linear(lambda reply: answering.checked_answer(reply, prompt), lambda n: hostile(shape, QUOTED, n))


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
def test_every_hostile_reply_in_the_cited_form_is_checked_in_linear_time(shape):
    cited = citations.cited_prompt(QUESTION, PASSAGES)
    assert_linear(lambda reply: citations.check(reply, cited), lambda n: hostile(shape, CITED, n))


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
def test_the_guard_cleans_every_hostile_reply_in_linear_time_whole_or_streamed(prompt, shape):
    def streamed(reply):        # in pieces of four characters, as a token each
        pieces = (reply[i:i + 4] for i in range(0, len(reply), 4))
        return "".join(answering.without_phrase_loops(answering.guard(pieces, prompt.citable(), prompt.tag)))
    reply_of = lambda n: hostile(shape, QUOTED, n)
    assert_linear(lambda reply: answering.guarded_reply(reply, prompt), reply_of, 64 * 1024, 256 * 1024)
    assert_linear(streamed, reply_of, 64 * 1024, 256 * 1024)


def test_the_guard_still_shows_a_stream_word_by_word_and_a_long_sentence_whole(prompt):
    words = [f"word{i} " for i in range(300)]                  # 2,690 characters, no sentence end
    shown = list(answering.guard(iter(words + ["end."]), prompt.citable(), prompt.tag))
    assert shown[:3] == ["word0 ", "word1 ", "word2 "]
    assert "".join(shown) == "".join(words) + "end."


def test_a_reason_quoting_a_megabyte_number_shows_its_start_and_names_its_size(prompt, capsys):
    number = "9" * 1_048_550
    reply = f'Quote: "Backups run every night at 02:00." [1]\nAnswer: It runs at [{number}.1].'
    checked, shown = answering.checked_answer(answering.guarded_reply(reply, prompt), prompt)
    answering.print_check(checked)
    out = capsys.readouterr().out
    assert shown == answering.REFUSAL and max(len(line) for line in out.splitlines()) < 300
    assert re.search(r"the answer states 9{200}\.\.\. \(1,048,552 characters\), which no quote holds", out)


def test_a_cited_reason_quoting_a_megabyte_number_shows_its_start_and_names_its_size():
    cited = citations.cited_prompt(QUESTION, PASSAGES)
    number = "9" * 1_048_550
    unknown = citations.check(f"Sentences: [{number}.1]\nAnswer: It runs at 02:00.", cited)["set_aside"]
    stated = citations.check(f"Sentences: [1.1]\nAnswer: It runs at {number}.", cited)["set_aside"]
    assert unknown == [f"it cites no sentence of the passages ([{'9' * 199}... (1,048,554 characters) "
                       f"are none of them)"]
    assert stated[0] == f"the answer states {'9' * 200}... (1,048,550 characters), which no passage holds"


@pytest.mark.parametrize("forged", ['Quote: "The backups are stored forever on tape in Zurich." [1]',
                                    'Quote: "The backups are stored forever on tape in Zurich."',
                                    '**Quote:** The backups are stored forever on tape in Zurich.'])
def test_a_quote_inside_the_answers_line_is_not_shown_as_part_of_the_answer(prompt, capsys, forged):
    reply = f'Quote: "Backups run every night at 02:00." [1]\nAnswer: It runs at 02:00. {forged}'
    checked, shown = answering.checked_answer(reply, prompt)
    answering.print_check(checked)
    assert "Zurich" not in shown + capsys.readouterr().out
    assert shown == 'It runs at 02:00.\n  "Backups run every night at 02:00." [IT-01 > Backups]'
