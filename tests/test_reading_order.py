"""The README's reading order is the path one command really takes.

`--docs F --question Q --generator local` runs in a child process under a call tracer
(sys.setprofile, in every thread): every function the reading order names must be called on
the way, and every module of the project the run passes through must be named there, unless
it is bottom-layer plumbing. A module added to the path, or a function renamed or left off
it, fails here until the README says so."""
import json
import re
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT
from test_generate import needs_local

# What the reading order names, as the README spells it -> (file, function) the run must call.
NAMED = {
    "`rag_from_scratch.main()`": ("rag_from_scratch.py", "main"),
    "`cli.run()`": ("ragkit/cli.py", "run"),
    "`check_args()`": ("ragkit/cli.py", "check_args"),
    "`model_files.find_model()`": ("ragkit/llama.py", "find_model"),
    "`folder_index.index_folder(args)`": ("ragkit/folder_index.py", "index_folder"),
    "`Embedder`": ("rag_from_scratch.py", "Embedder.encode"),
    "`retrieval.make_retriever()`": ("ragkit/retrieval.py", "make_retriever"),
    "`Retriever`": ("ragkit/retrieval.py", "Retriever.__call__"),
    '`llm.make_generator("local", ...)`': ("ragkit/generators.py", "make_generator"),
    "`LocalModel`": ("ragkit/generators.py", "LocalModel.answer"),
    "`model_files.model_file()`": ("ragkit/llama.py", "model_file"),
    "`reply_cleaning.Guarded`": ("ragkit/answering.py", "Guarded.answer"),
    "`answering.ask()`": ("ragkit/answering.py", "ask"),
    "`grounded.grounded_prompt()`": ("ragkit/answering.py", "grounded_prompt"),
    "`grounded.check_reply()`": ("ragkit/answering.py", "check_reply"),
}
# The bottom layer every script shares (tests/test_layers.py, layers 0 and 1): how a command
# ends, progress bars, text and file helpers. A reader meets them as plain helpers.
PLUMBING = {"exits.py", "progress.py", "text.py", "storage.py", "json_lines.py", "deadlines.py",
            "children.py", "content_words.py"}

# Run rag_from_scratch.py as a script, recording (file, function) for each call into the
# project's own files, and write them as JSON to the path in argv[1].
TRACER = r"""
import json, os, runpy, sys, threading
root, out = os.path.realpath(os.getcwd()), sys.argv[1]
called = set()
def profile(frame, event, arg):
    if event == "call":
        name, path = frame.f_code.co_filename, os.path.realpath(frame.f_code.co_filename)
        if (not name.startswith("<") and path.startswith(root + os.sep)   # "<frozen os>": no file
                and "/.venv/" not in path and "/tests/" not in path
                and frame.f_code.co_name != "<module>"):      # importing a module is no step
            called.add((os.path.relpath(path, root), frame.f_code.co_qualname))
sys.argv = ["rag_from_scratch.py"] + sys.argv[2:]
threading.setprofile(profile)
sys.setprofile(profile)
try:
    runpy.run_path("rag_from_scratch.py", run_name="__main__")
finally:
    sys.setprofile(None)
    threading.setprofile(None)
    with open(out, "w") as f:
        json.dump(sorted(called), f)
"""


def reading_order() -> str:
    """The README's section "Reading order", up to the next heading."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return text.split("\n## Reading order\n", 1)[1].split("\n## ", 1)[0]


def named(file: str, section: str) -> bool:
    """Is `file` (answering.py) plumbing, or named in the section as `answering.py` or as one of
    its functions (`answering.ask()`)?"""
    stem = re.escape(file.removesuffix(".py"))
    return file in PLUMBING or re.search(rf"`(ragkit/)?{stem}(\.py`|\.\w)", section) is not None


def test_the_reading_order_names_what_this_test_looks_for():
    section = reading_order()
    assert [name for name in NAMED if name not in section] == []


@pytest.mark.slow
@needs_local
def test_the_reading_order_walks_the_path_of_a_local_answer(tmp_path):
    docs = tmp_path / "notes"
    docs.mkdir()
    for page in ("flags.md", "your-documents.md"):
        shutil.copy(ROOT / "docs" / page, docs / page)
    out = tmp_path / "called.json"
    proc = subprocess.run(
        [sys.executable, "-c", TRACER, str(out), "--docs", str(docs),
         "--question", "How do I leave a file out of the index?",
         "--generator", "local", "--local-model", "smollm2", "--threads", "1", "--max-tokens", "64", "--k", "2",
         "--backend", "tfidf"],         # MiniLM's import, traced call by call, takes a minute
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "== Step 7: the answer" in proc.stdout
    called = {tuple(pair) for pair in json.loads(out.read_text())}

    assert [name for name, call in NAMED.items() if call not in called] == []
    section = reading_order()
    unnamed = sorted({path for path, _ in called if not named(path.split("/")[-1], section)})
    assert unnamed == [], f"on the path but not in the README's reading order: {unnamed}"
