"""The development set (data/devset): what the reader makes of real documentation pages,
retrieval by file, and the extractive answers, pinned as devset.py prints them."""
import json

import pytest

from rageval import devset
from ragkit import documents

pytestmark = pytest.mark.slow      # MiniLM builds of a whole documentation set


def test_the_questions_name_files_that_exist_and_phrases_those_files_contain():
    import re
    lines = devset.DEVSET.joinpath("questions.jsonl").read_text().splitlines()
    items = [json.loads(line) for line in lines]
    answerable = [q for q in items if q.get("answerable", True)]
    assert (len(answerable), len(items) - len(answerable)) == (38, 8)
    for q in answerable:
        for name in q["relevant"]:
            text = (devset.DEVSET / "docs" / name).read_text(encoding="utf-8")
            assert all(re.search(p, text, re.I) for p in q["answer"]), (q["question"], name)


@pytest.fixture(scope="module")
def report():
    """What `python devset.py` prints (MiniLM), run once for these tests."""
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert devset.main([]) == 0
    return out.getvalue()


def test_no_markup_is_left_in_the_chunks_and_none_is_cut(report):
    table = report.split("== What the reader left in the chunks (0 is the goal) ==\n")[1]
    counts = {name: int(n) for n, name in (line.split(None, 1) for line in table.split("\n\n")[0].splitlines())}
    assert {k: v for k, v in counts.items() if k != "ten words or fewer"} == {
        "heading attribute {#id}": 0, "admonition or tab marker": 0, "HTML tag or comment": 0,
        "include or template directive": 0, "block quote marker": 0,
        "link target or URL in brackets": 0, "code block on one line": 0,
        "longer than the model reads": 0}
    assert counts["ten words or fewer"] == 7           # one-line sections ("The legal stuff.")
    assert report.startswith("19 files -> 938 chunks, backend=minilm\n"
                             "most chunks: about/release-notes.md (379 of 938, 40%;")


def test_retrieval_by_file_plain_and_with_context(report):
    assert ("  variant   hit@1  hit@5  mrr@5\n"
            "  plain     0.68   0.95   0.80\n"
            "  context   0.79   1.00   0.87\n") in report


def test_extractive_answers_as_judged_by_the_gold_phrases(report):
    table = report.split("== Extractive answers (46 questions, top 3 chunks with context) ==\n")[1]
    assert table.splitlines()[:6] == ["   15  right", "    1  partial", "   18  wrong",
                                      "    4  refused (wrong)", "    5  refused (right)",
                                      "    3  answered (wrong)"]


def test_the_refusal_threshold_is_chosen_on_the_gold_file_and_the_development_set(capsys):
    """`python generation.py --tune-refusal`: 0.25 and 0.30 tie; ties go to the smaller."""
    from rageval import generation
    assert generation.main(["--tune-refusal"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("extractive refusal threshold on 15 questions x 2 backends (tfidf, minilm) "
                          "+ 46 development-set questions (minilm), k=3\n")
    assert "       0.25     44                   4                    12\n" in out
    assert "       0.30     44                   7                    14\n" in out
    assert out.endswith("leave-one-question-out: 42/76 right on held-out questions "
                        "(thresholds picked: 0.25, 0.30)\n")
    from ragkit import extractive
    assert extractive.MIN_SUPPORT == 0.25                # the smaller of the two that tie


def test_artefacts_are_counted_in_prose_not_in_code():
    chunks = [{"text": "Set it:\n```html\n<div>{{ x }}</div>\n```"}, {"text": "Use <b>bold</b>."}]
    counts = devset.artefact_counts(chunks, lambda text: True)
    assert counts["HTML tag or comment"] == 1 and counts["include or template directive"] == 0
    assert documents.document_chunks([{"doc_id": "a.md", "text": "# A {#a}\n\nx"}])[0]["text"] == "A\nx"
