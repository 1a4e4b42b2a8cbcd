"""
ragkit/children.py: a library that may crash or spin (PDFium on a hostile PDF, llama.cpp on a
model file of your own), run in a child process within bounds of CPU time and memory, so that
its crash or its endless loop is one line here, never the end of this process.

  forked                target(*args) in a forked child process
  new_python            module.function(*args) in a new interpreter
  limit_child           in the child: CPU seconds, address space, no core file, Ctrl-C ignored
  address_space_limit   a child's memory limit: what it uses now plus a margin (Linux)
  soft_limit            one resource limit, within the hard limit the process was given
"""

import os
import signal
import sys


def address_space_limit(extra_bytes: int) -> int | None:
    """The address space this process uses now plus extra_bytes (for RLIMIT_AS); None off Linux."""
    try:
        with open("/proc/self/statm") as statm:       # Linux: the address space, in pages
            pages = int(statm.read().split()[0])
    except OSError:                                    # macOS has none, and does not enforce RLIMIT_AS
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") + extra_bytes


def forked(target, *args):
    """target(*args) started in a forked child process; None where there is no fork (Windows)."""
    import multiprocessing
    import warnings
    if "fork" not in multiprocessing.get_all_start_methods():
        return None
    sys.stdout.flush()                              # or the child would write them out again
    sys.stderr.flush()
    child = multiprocessing.get_context("fork").Process(target=target, args=args, daemon=True)
    with warnings.catch_warnings():                 # Python 3.12 warns of forking beside threads:
        warnings.simplefilter("ignore", DeprecationWarning)   # the child runs one library alone
        child.start()
    return child


def new_python(module: str, function: str, *args: str, stderr):
    """module.function(*args) in a new Python interpreter, its stderr written to the file
    `stderr`: a subprocess.Popen, or None where there is no fork (Windows). For a library that
    keeps threads of its own (llama.cpp's log writer and thread pool): a fork of a process that
    has run it lacks them, and crashed or lost its log."""
    import subprocess
    from pathlib import Path
    if not hasattr(os, "fork"):
        return None
    home = str(Path(__file__).resolve().parent.parent)     # where ragkit is, installed or not
    paths = os.pathsep.join(p for p in (home, os.environ.get("PYTHONPATH")) if p)
    code = f"import sys, {module}; {module}.{function}(*sys.argv[1:])"
    return subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=stderr, env={**os.environ, "PYTHONPATH": paths})


def soft_limit(kind, soft: int) -> None:
    """setrlimit(kind) to `soft`, within the hard limit the process was given."""
    import resource
    hard = resource.getrlimit(kind)[1]
    resource.setrlimit(kind, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def limit_child(seconds: float, extra_bytes: int) -> None:
    """In a child: at most `seconds` of CPU (then SIGXCPU; a child's CPU time starts at 0)
    and extra_bytes more address space than now (Linux), no core file, no crash report of
    Python's own, and Ctrl-C left to the parent, which ends the child."""
    import faulthandler
    import math
    import resource
    faulthandler.disable()                           # an abort here is no crash to report
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    soft_limit(resource.RLIMIT_CORE, 0)
    soft_limit(resource.RLIMIT_CPU, math.ceil(seconds))
    memory = address_space_limit(extra_bytes)        # None off Linux
    if memory is not None:
        soft_limit(resource.RLIMIT_AS, memory)
