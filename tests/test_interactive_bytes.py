"""--interactive reads bytes and decodes each line on its own (ragkit/answering.py's
typed_questions): under a strict UTF-8 locale a line that is not UTF-8 text is one error line
naming it and the other lines are answered; a line's length is counted in characters, its
bytes read a bounded piece at a time."""
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ragkit import answering

ROOT = Path(__file__).resolve().parent.parent
LINES = [b"How much time off do new fathers get?", b"Can I work from home on Wednesday?",
         b"Is the caf\xe9 open on Sundays?", b"What is the hotel limit?", b"How long are backups kept?"]
BAD_AT = LINES[2].index(b"\xe9")          # Latin-1's e-acute: no UTF-8 text holds this byte there


@pytest.mark.slow
def test_a_line_that_is_not_utf8_is_one_error_line_and_the_other_four_are_answered():
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict"}
    run = subprocess.run([sys.executable, "rag_from_scratch.py", "--backend", "tfidf", "--interactive"],
                         input=b"\n".join(LINES) + b"\n", capture_output=True, cwd=ROOT, env=env, timeout=300)
    out, err = run.stdout.decode(), run.stderr.decode()
    assert run.returncode == 0, err
    assert [line for line in out.splitlines() if line.startswith("Q: ")] == \
           [f"Q: {line.decode()}" for n, line in enumerate(LINES) if n != 2]
    assert [line for line in err.splitlines() if line.startswith("error:")] == \
           [f"error: line 3 is not UTF-8 text (byte 0xe9 at {BAD_AT}): skipped"]


def test_each_line_is_decoded_on_its_own_under_a_strict_decoder(capsys):
    stdin = io.TextIOWrapper(io.BytesIO(b"\n".join(LINES) + b"\n"), encoding="utf-8", errors="strict")
    asked = list(answering.typed_questions(stdin, 2000))
    assert asked == [line.decode() for n, line in enumerate(LINES) if n != 2]
    assert capsys.readouterr().err == f"error: line 3 is not UTF-8 text (byte 0xe9 at {BAD_AT}): skipped\n"


def test_a_long_line_is_counted_in_characters_though_read_in_pieces_of_bytes(capsys):
    # 10 characters at most: read 44 bytes at a time, so the 22nd "é" is cut in two between pieces
    typed = ("a" + "é" * 30 + "\n" + "é" * 10 + "\n").encode()
    stdin = io.TextIOWrapper(io.BytesIO(typed), encoding="utf-8")
    assert list(answering.typed_questions(stdin, 10)) == ["é" * 10]
    assert capsys.readouterr().err.startswith("error: line 1 is 31 characters, more than the 10 a question")
