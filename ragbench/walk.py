"""
ragbench/walk.py: how far a reader walks to follow one command: the project's files and
functions it passes through, the calls, and how often the run switches from one file to another.

    python -m ragbench.walk --docs examples/notes/ --question "How do I restart the database?" \
        --generator extractive --backend tfidf

Every flag after the module's name is rag_from_scratch.py's. The command runs in a child process
under a call tracer (sys.setprofile, in every thread), which records each call into the
project's own files (not the virtual environment's); the figures go to stdout, what the command
printed is left out. A function is a def or a lambda a reader would open: a module's or a class
body's code running at import is not counted, nor a comprehension (an expression inside its
function). The run asks its folder for the first time: its kept index goes to a new, empty cache
folder (RAG_CACHE_DIR; Qwen's joined file is linked there, not joined again), so reading and
chunking are walked too. A generator counts a call each time it resumes. A traced run is several times
slower than a plain one.
"""

import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from ragkit.llama import QWEN_FILE
from ragkit.support import cache_folder, run_cli

ROOT = Path(__file__).resolve().parent.parent

# Runs rag_from_scratch.py with the arguments after argv[1], writing the calls into the project's
# own files, in order, as JSON to the path argv[1]: [[file, function], ...].
TRACER = r"""
import inspect, json, os, runpy, sys, threading
COMPREHENSIONS = {"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>"}
root, out = os.path.realpath(os.getcwd()), sys.argv[1]
calls, last = [], [None]
def profile(frame, event, arg):
    if event == "call":
        name, path = frame.f_code.co_filename, os.path.realpath(frame.f_code.co_filename)
        if (not name.startswith("<") and path.startswith(root + os.sep) and "/.venv/" not in path
                and frame.f_code.co_flags & inspect.CO_OPTIMIZED           # no module or class body
                and frame.f_code.co_name not in COMPREHENSIONS):
            calls.append((os.path.relpath(path, root), frame.f_code.co_qualname))
sys.argv = ["rag_from_scratch.py"] + sys.argv[2:]
threading.setprofile(profile)
sys.setprofile(profile)
try:
    runpy.run_path("rag_from_scratch.py", run_name="__main__")
finally:
    sys.setprofile(None)
    threading.setprofile(None)
    with open(out, "w") as f:
        json.dump(calls, f)
"""


def walk(argv: list[str]) -> dict:
    """The traced run's figures: files, functions, calls, switches between files, and the
    files with their functions' counts."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "calls.json"
        env = dict(os.environ, RAG_CACHE_DIR=str(Path(folder) / "cache"))    # a first question
        kit_cache = Path(folder) / "cache" / "rag-from-scratch"
        kit_cache.mkdir(parents=True)
        for name in (QWEN_FILE, QWEN_FILE + ".checked.json"):    # Qwen's joined file: not joined again
            if (cache_folder() / name).exists():
                (kit_cache / name).symlink_to(cache_folder() / name)
        done = subprocess.run([sys.executable, "-c", TRACER, str(out), *argv], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            said = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise RuntimeError(f"the traced command failed: {said[:300]}")
        calls = [tuple(c) for c in json.loads(out.read_text())]
    files = [path for path, _ in calls]
    switches = sum(a != b for a, b in zip(files, files[1:]))
    per_file = Counter(path for path, _ in set(calls))
    return {"files": len(per_file), "functions": len(set(calls)), "calls": len(calls),
            "switches": switches, "per_file": dict(per_file.most_common())}


def report(argv: list[str]) -> None:
    """Print the figures of one traced run."""
    figures = walk(argv)
    print(f"files {figures['files']}  functions {figures['functions']}  calls {figures['calls']:,}  "
          f"switches between files {figures['switches']:,}")
    for path, n in figures["per_file"].items():
        print(f"  {n:4d}  {path}")


def main(argv=None) -> int:
    """`python -m ragbench.walk FLAGS`: FLAGS are rag_from_scratch.py's; errors are one line."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    return run_cli(report, argv)


if __name__ == "__main__":
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    sys.exit(main())
