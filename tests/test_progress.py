"""A slow step shows progress on stderr within 2 s, then at least every 5 s, on a terminal and in
a pipe (ragkit/support.py's Progress): reading a folder (--docs), encoding its chunks. A quick
step prints nothing more than before. Each test waits on what is printed, never on a sleep."""
import re
import threading
import time

import numpy as np
import pytest
from conftest import LATE_S

from ragkit import documents, folder_index, support

FIRST_S, EVERY_S = 2.0, 5.0          # the promise: the first line within 2 s, then every 5 s


class Stderr:
    """A stand-in for stderr that notes when each line (or terminal frame) arrives."""

    def __init__(self, terminal: bool = False):
        self.terminal, self.start, self.rest = terminal, time.monotonic(), ""
        self.lines, self.changed = [], threading.Condition()     # [(seconds, text)]

    def isatty(self):
        return self.terminal

    def write(self, text: str) -> int:
        with self.changed:
            *whole, self.rest = re.split(r"[\r\n]", self.rest + text)
            self.lines += [(time.monotonic() - self.start, line) for line in whole if line.strip()]
            self.changed.notify_all()
        return len(text)

    def flush(self):
        pass

    def seen(self, prefix: str) -> list:
        """(seconds, line) of every line so far that starts with `prefix`."""
        with self.changed:
            return [(t, line) for t, line in self.lines if line.startswith(prefix)]

    def wait_for(self, prefix: str, count: int) -> list:
        """Block until `count` lines start with `prefix` (a test's deadline: LATE_S past due)."""
        with self.changed:
            if not self.changed.wait_for(lambda: len(self.seen(prefix)) >= count, LATE_S + 10):
                pytest.fail(f"{count} lines starting {prefix!r} never came: {self.lines}")
        return self.seen(prefix)


def assert_on_time(times: list, started: float) -> None:
    """The first line within FIRST_S of the start, each next one within EVERY_S of the last."""
    assert times[0] - started <= FIRST_S, times
    assert all(b - a <= EVERY_S for a, b in zip(times, times[1:])), times


def watch_stderr(monkeypatch) -> Stderr:
    """sys.stderr replaced by a Stderr, in the test's body (pytest's capture sets sys.stderr
    again after the fixtures are made)."""
    fake = Stderr()
    monkeypatch.setattr("sys.stderr", fake)
    return fake


def notes(folder, names):
    folder.mkdir(exist_ok=True)
    for name in names:
        (folder / name).write_text(f"# {name}\n\nThe P-200 pump is primed with water.\n")
    return folder


@pytest.mark.slow
def test_a_slow_folder_shows_lines_in_a_pipe_within_2_s_then_every_5_s_naming_the_file(
        tmp_path, monkeypatch, capsys):
    folder, real = notes(tmp_path / "docs", ["a.md", "slow.md", "z.md"]), documents.read_file
    stderr = watch_stderr(monkeypatch)

    def read_file(path, rel, *rest):           # slow.md reads until two progress lines are out
        if rel == "slow.md":
            stderr.wait_for("reading files:", 2)
        return real(path, rel, *rest)
    monkeypatch.setattr(documents, "read_file", read_file)
    started = time.monotonic() - stderr.start
    docs = documents.load_documents(folder)
    assert [d["doc_id"] for d in docs] == ["a.md", "slow.md", "z.md"]
    lines = stderr.seen("reading files:")
    assert_on_time([t for t, _ in lines], started)
    assert "1/3" in lines[0][1] and lines[0][1].endswith("slow.md]")        # the file being read
    assert re.match(r"reading files: 100% 3/3 \[", lines[-1][1])            # and where it ended
    assert capsys.readouterr().out == ""                                     # never on stdout


def test_a_quick_folder_prints_what_it_read_and_no_progress(tmp_path, capsys):
    documents.load_documents(notes(tmp_path / "docs", ["a.md", "b.md"]))
    assert capsys.readouterr().err == "read 2 files: 2 .md\n"


@pytest.mark.slow
def test_a_file_name_in_the_bar_cannot_forge_a_line(monkeypatch):
    stderr = watch_stderr(monkeypatch)
    with support.Progress("reading files", 1, " files") as bar:
        bar.update(0, now="evil\nerror: forged\x1b[2J.md")
        stderr.wait_for("reading files:", 1)
    assert not stderr.seen("error:") and "\x1b" not in "".join(line for _, line in stderr.lines)


@pytest.mark.slow
def test_on_a_terminal_tqdm_redraws_its_bar_while_one_item_takes_long(monkeypatch):
    stderr = watch_stderr(monkeypatch)
    monkeypatch.setattr(stderr, "terminal", True)
    monkeypatch.setattr(support, "on_terminal", lambda: True)
    started = time.monotonic() - stderr.start
    with support.Progress("encoding chunks", 100, " chunks") as bar:
        frames = stderr.wait_for("encoding chunks:", 4)     # nothing done yet: the clock moves
        bar.update(100)
    assert_on_time([t for t, _ in frames], started)
    assert all(b - a <= 2 * support.DRAW_S + 1 for (a, _), (b, _) in zip(frames, frames[1:]))
    assert "0/100" in frames[0][1]


class SlowEmbedder:
    """An embedder whose first piece waits until two progress lines are out; a text's vector
    says which text it was (its length), so the order of the rows can be checked."""
    backend, model_name = "minilm", "slow"

    def __init__(self, stderr):
        self.stderr, self.calls = stderr, []

    def encode(self, texts):
        if not self.calls:
            self.stderr.wait_for("encoding chunks:", 2)
        self.calls.append(len(texts))
        return np.array([[len(t), 1.0] for t in texts], dtype=np.float32)


@pytest.mark.slow
def test_encoding_chunks_shows_lines_within_2_s_then_every_5_s_and_keeps_their_order(monkeypatch):
    stderr = watch_stderr(monkeypatch)
    texts = ["x" * n for n in range(1, 41)][::3] + ["y" * n for n in range(50, 90)]
    embedder = SlowEmbedder(stderr)
    started = time.monotonic() - stderr.start
    vectors = folder_index.build_index(texts, embedder)
    assert vectors[:, 0].tolist() == [len(t) for t in texts] and vectors.flags.f_contiguous
    assert max(embedder.calls) == folder_index.ENCODE_PIECE and sum(embedder.calls) == len(texts)
    lines = stderr.seen("encoding chunks:")
    assert_on_time([t for t, _ in lines], started)
    assert f"0/{len(texts)}" in lines[0][1] and f"100% {len(texts)}/{len(texts)}" in lines[-1][1]


def test_encoding_in_pieces_gives_sentence_transformers_vectors(minilm):
    texts = [f"The pump number {n} is primed {'with water ' * n}before it starts." for n in range(40)]
    reference = minilm.model.encode(texts, normalize_embeddings=True)      # one call, batches of 32
    assert np.allclose(folder_index.encode_in_pieces(minilm, texts), reference, atol=1e-5)


def test_an_empty_list_encodes_to_no_rows():
    assert folder_index.encode_in_pieces(SlowEmbedder(None), []).shape[0] == 0


def test_the_lessons_model_load_says_its_seconds_within_2_s_then_every_5_s(monkeypatch):
    """The lesson's with_clock, around a load that lasts until two of its lines are out."""
    import rag_from_scratch as rag
    stderr = watch_stderr(monkeypatch)
    started = time.monotonic() - stderr.start
    assert rag.with_clock("loading a model", lambda: stderr.wait_for("loading a model: ", 2) and 7) == 7
    lines = stderr.seen("loading a model: ")
    assert_on_time([t for t, _ in lines], started)
    assert all(re.fullmatch(r"loading a model: \d+ s", line) for _, line in lines)
