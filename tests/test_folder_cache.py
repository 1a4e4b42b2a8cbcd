"""--docs without --index: the folder's index is kept in the kit's cache folder and the next
question loads it; a changed setting rebuilds it, a changed file is embedded again alone."""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

import rag_from_scratch as rag
from ragkit import chunking, folder_index, support

HANDBOOK = """# Handbook

## Databases

The reporting database listens on port 6543. Rotate its password every 90 days.

## Backups

Nightly backups go to the cold-storage bucket and are kept for 35 days.
"""


@pytest.fixture()
def notes(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "handbook.md").write_text(HANDBOOK, encoding="utf-8")
    (folder / "travel.txt").write_text("Taxi receipts must be uploaded within 14 days.", encoding="utf-8")
    return folder


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """The kit's cache folder, in tmp_path: a test never writes into the user's ~/.cache."""
    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "rag-from-scratch" / "indexes"


@pytest.fixture()
def calls(monkeypatch):
    """How often the index was chunked and built, and how many texts went to MiniLM for it."""
    counts = {"chunked": 0, "built": 0, "encoded": 0}

    def counting(name, key, size=lambda *a: 1):
        real = getattr(folder_index, name)

        def counted(*args, **kwargs):
            counts[key] += size(*args)
            return real(*args, **kwargs)
        monkeypatch.setattr(folder_index, name, counted)

    counting("chunk_documents", "chunked")
    counting("build_index", "built")
    counting("encode_in_pieces", "encoded", lambda embedder, texts, *a: len(texts))
    return counts


@pytest.fixture()
def one_minilm(monkeypatch, minilm):
    """Every run's Embedder("minilm") is the session's model, loaded once (conftest's shared_minilm
    replaces the class by a function, which the lesson's parser cannot read defaults from)."""
    real = rag.Embedder

    class Shared(real):
        def __new__(cls, backend=real.__init__.__defaults__[0], model=real.__init__.__defaults__[1]):
            return minilm if backend in ("minilm", "auto") else real.__new__(cls)

    monkeypatch.setattr(rag, "Embedder", Shared)


def kept_in(out: str) -> str:
    """The folder a run named as the index's home in the kit's cache."""
    found = re.search(r"(?:saved the index to|loaded the saved index from) (\S+) "
                      r"\(.*kept in the kit's cache", out)
    assert found, out
    return found[1]


def ask(notes, *flags):
    return rag.main(["--docs", str(notes), "--backend", "tfidf", "--question", "How long are backups kept?",
                     *flags])


def test_a_second_question_loads_the_kept_index_and_chunks_and_embeds_nothing(notes, cache, calls, capsys):
    assert ask(notes) == 0
    first = capsys.readouterr().out
    assert "building the index: no saved index yet" in first and calls["built"] == 1
    assert ask(notes) == 0
    second = capsys.readouterr().out
    assert "loaded the saved index" in second and "not re-embedded" in second
    assert calls == {"chunked": 1, "built": 1, "encoded": 0}        # the second run: none of it
    assert kept_in(first) == kept_in(second)
    assert "35 days" in second.split("-- the prompt a model would read")[1]


def test_the_printed_cache_folder_is_the_one_used_one_a_folder_however_it_is_named(notes, cache, capsys,
                                                                                   tmp_path, monkeypatch):
    assert ask(notes) == 0
    out = capsys.readouterr().out
    kept = kept_in(out)
    assert [str(p) for p in cache.iterdir()] == [kept]                 # one folder, the one named
    assert json.loads((cache / kept / "meta.json").read_text())["backend"] == "tfidf"
    link = tmp_path / "same-notes"
    link.symlink_to(notes)
    monkeypatch.chdir(tmp_path)        # the same folder by a relative name and through a link
    for name in ("notes", "notes/", "same-notes"):
        assert ask(name) == 0
        assert kept_in(capsys.readouterr().out) == kept
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.md").write_text("# A\n\nAnother folder.\n")
    assert ask(other) == 0
    assert kept_in(capsys.readouterr().out) != kept and len(list(cache.iterdir())) == 2
    shutil.rmtree(kept)
    assert ask(notes) == 0                                            # the folder named was the one read
    assert "building the index: no saved index yet" in capsys.readouterr().out


@pytest.mark.parametrize("change,reason", [
    ("chunk size", f"the chunk size changed ({chunking.WORDS} -> 40)"),
    ("context", "--context changed (True -> False)"),
    ("edit", "the documents changed"),               # TF-IDF's words depend on every file: it refits
])
def test_a_changed_setting_or_file_rebuilds_the_kept_index_and_says_why(notes, capsys, change, reason):
    assert ask(notes) == 0
    kept = kept_in(capsys.readouterr().out)
    flags = {"chunk size": ["--chunk-size", "40"], "context": ["--no-context"], "edit": []}[change]
    if change == "edit":
        (notes / "travel.txt").write_text("Taxi receipts are due within 30 days.", encoding="utf-8")
    assert ask(notes, *flags) == 0
    out = capsys.readouterr().out
    assert f"building the index: {reason}" in out and kept_in(out) == kept
    assert ask(notes, *flags) == 0                                    # and the rebuilt one is kept
    assert "loaded the saved index" in capsys.readouterr().out


def test_with_minilm_a_changed_file_is_embedded_again_alone(notes, one_minilm, calls, capsys):
    args = ["--docs", str(notes), "--backend", "minilm"]
    assert rag.main(args) == 0
    kept = kept_in(capsys.readouterr().out)
    chunks = json.loads((Path(kept) / "chunks.json").read_text())
    assert calls["encoded"] == len(chunks) > 1
    assert rag.main(args + ["--question", "How long are backups kept?"]) == 0
    assert "loaded the saved index" in capsys.readouterr().out and calls["encoded"] == len(chunks)
    (notes / "travel.txt").write_text("Taxi receipts are due within 30 days.", encoding="utf-8")
    assert rag.main(args) == 0
    out = capsys.readouterr().out
    travel = [c for c in json.loads((Path(kept) / "chunks.json").read_text())
              if c["doc_id"] == "travel.txt"]
    assert calls["encoded"] - len(chunks) == len(travel) == 1           # that file's one chunk
    assert (f"updated the index: 1 file changed or removed, 1 chunk embedded, {len(chunks) - 1} reused"
            in out)
    assert rag.main(args + ["--question", "When are taxi receipts due?"]) == 0
    assert "loaded the saved index" in capsys.readouterr().out and calls["encoded"] == len(chunks) + 1


def test_an_unwritable_cache_builds_in_memory_with_one_info_line(notes, tmp_path, monkeypatch, capsys):
    blocked = tmp_path / "a-file"                 # no folder can be made under a file, even by root
    blocked.write_text("not a folder")
    monkeypatch.setenv("RAG_CACHE_DIR", str(blocked))
    assert ask(notes) == 0
    out, err = capsys.readouterr()
    infos = [line for line in err.splitlines() if line.startswith("[info]")]
    assert len(infos) == 1 and "the index is built in memory, not kept: cannot write to" in infos[0]
    assert "building the index ..." in out and "saved the index" not in out
    assert "35 days" in out.split("-- the prompt a model would read")[1]
    assert blocked.read_text() == "not a folder"


def test_a_save_into_the_cache_that_fails_is_one_info_line_and_the_next_run_builds_again(notes, cache,
                                                                                        monkeypatch, capsys):
    real_replace = support.os.replace

    def disk_full(src, dst):
        if str(dst).endswith("meta.json"):
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(support.os, "replace", disk_full)
    assert ask(notes) == 0                            # with --index the same failure ends the run
    out, err = capsys.readouterr()
    infos = [line for line in err.splitlines() if line.startswith("[info]")]
    assert len(infos) == 1 and infos[0].startswith(f"[info] the index was not kept in {cache}/")
    assert infos[0].endswith("the next run builds it again")
    assert "saved the index" not in out and "35 days" in out.split("-- the prompt a model would read")[1]
    monkeypatch.setattr(support.os, "replace", real_replace)
    assert ask(notes) == 0
    out = capsys.readouterr().out
    assert "building the index: no saved index yet" in out and "saved the index to" in out


def test_with_index_dir_the_cache_is_not_touched(notes, cache, tmp_path, capsys):
    assert ask(notes, "--index", str(tmp_path / "ix")) == 0
    out = capsys.readouterr().out
    assert f"saved the index to {tmp_path / 'ix'}\n" in out and "kit's cache" not in out
    assert not cache.exists()


@pytest.mark.skipif(not shutil.which("unshare"), reason="needs unshare (util-linux) for a read-only mount")
def test_a_saved_index_on_a_read_only_disk_is_reused(notes, tmp_path, capsys):
    """A class's shared index, mounted read-only: loaded, not rebuilt, and no lock file is needed;
    a changed file, which needs a save, is one line."""
    index = tmp_path / "ix"
    assert ask(notes, "--index", str(index)) == 0
    capsys.readouterr()
    ro = f"mount --bind {index} {index} && mount -o remount,bind,ro {index} && "
    done = subprocess.run(["unshare", "-m", "sh", "-c", ro + 'exec "$0" "$@"', sys.executable,
                           "rag_from_scratch.py", "--docs", str(notes), "--backend", "tfidf", "--index",
                           str(index), "--question", "How long are backups kept?"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    if "mount" in done.stderr or "unshare" in done.stderr:
        pytest.skip(f"no read-only mount here: {done.stderr.strip()[:200]}")
    assert done.returncode == 0, done.stderr
    assert f"loaded the saved index from {index} (not re-embedded)" in done.stdout
    (notes / "travel.txt").write_text("Taxi receipts must be uploaded within 7 days.", encoding="utf-8")
    changed = subprocess.run(done.args, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert changed.returncode == 1 and "Traceback" not in changed.stderr
    assert changed.stderr.strip().splitlines()[-1] == (             # said before chunking and embedding
        f"error: --index {index} is read-only and its index must be built again (the documents "
        f"changed): give --index a folder you can write to")
    assert "chunks (sections whole" not in changed.stdout


@pytest.mark.slow
def test_two_runs_on_one_folder_at_once_both_succeed_and_keep_one_whole_index(notes, cache):
    args = [sys.executable, str(ROOT / "rag_from_scratch.py"), "--docs", str(notes), "--backend", "tfidf"]
    runs = [subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    results = [r.communicate(timeout=120) for r in runs]
    assert [r.returncode for r in runs] == [0, 0], results
    [kept] = cache.iterdir()
    meta = json.loads((kept / "meta.json").read_text())
    for name, digest in meta["checksums"].items():
        assert support.sha256_file(kept / name) == digest
    again = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "loaded the saved index" in again.stdout, again.stdout + again.stderr
