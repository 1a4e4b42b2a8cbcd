"""A child process the kit starts ends when the kit ends, whatever signal ends it: SIGTERM or
SIGHUP sent to the kit alone (Ctrl-C at a terminal reaches the whole process group; these do
not) while a model file of your own is check-loaded in its child (ragkit/llama.py's
load_guarded), and SIGTERM, SIGHUP or SIGKILL while children of ragkit/support.py's forked and
new_python run. Each test waits on what a process printed or did, never on a guessed sleep."""
import contextlib
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from conftest import HANG_S, ROOT, next_line, output_lines
from test_hostile_gguf import ENDLESS, hostile, needs_local

GONE_S = 5        # the promise: no process of the kit alive this long after the kit has ended

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
SIGNALS = pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])


def start(argv):
    """python *argv in a process group of its own (so a test can clean up all of it), stderr
    into stdout, with SIGTERM and SIGHUP at their defaults (a test run under nohup ignores one)."""
    def defaults():
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "AWS_EC2_METADATA_DISABLED": "true"}
    return subprocess.Popen([sys.executable, *argv], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, process_group=0, env=env, preexec_fn=defaults)


def wait_for(lines, seen: list, text: str, count: int = 1) -> None:
    """Read the process's lines until `count` of them hold `text`."""
    while sum(text in line for line in seen) < count:
        line = next_line(lines, seen, repr(text))
        assert line is not None, f"its output ended before {text!r}:\n{''.join(seen)}"
        seen.append(line)


def alive(pid: int) -> bool:
    """True while the process runs (a zombie has ended: only its exit status is left to read)."""
    with contextlib.suppress(psutil.NoSuchProcess):
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    return False


def left_after(pids, seconds: float = GONE_S) -> list:
    """The pids still alive `seconds` from now, or [] as soon as all of them have ended."""
    deadline = time.monotonic() + seconds
    while (left := [pid for pid in pids if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)                     # a poll: the wait ends when the last one ends
    return left


def signal_alone(proc, signum, children) -> list:
    """Send `signum` to the kit's process alone, wait for it to end, and return its children
    still alive GONE_S later."""
    os.kill(proc.pid, signum)
    proc.wait(timeout=HANG_S)
    assert proc.returncode == -signum, f"the kit was not ended by {signum!r}: exit {proc.returncode}"
    return left_after(children)


@contextlib.contextmanager
def cleaned_up(proc):
    """Whatever the test finds, no process of its group is left running afterwards."""
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def mapped(pid: int, path) -> bool:
    """True once the process has mapped the file (llama.cpp maps a model file as it loads it)."""
    return any(m.path == str(path) for m in psutil.Process(pid).memory_maps())


@linux_only
@needs_local
@pytest.mark.slow
@SIGNALS
def test_a_signal_to_the_kit_alone_ends_its_guarded_load_child_within_5_s(tmp_path, signum):
    """The issue's case: a chat template that spins, the kit killed mid-load; before the fix the
    child ran on for 43 s to 1,958 MB, until its CPU bound ended it."""
    model = hostile(tmp_path, ENDLESS)
    proc = start(["rag_from_scratch.py", "--backend", "tfidf", "--question", "q", "--generator", "local",
                  "--local-model", str(model)])
    lines, seen = output_lines(proc), []
    with cleaned_up(proc):
        wait_for(lines, seen, "in a child process first")        # printed once the child is there
        children = [child.pid for child in psutil.Process(proc.pid).children(recursive=True)]
        assert children, "".join(seen)
        deadline = time.monotonic() + HANG_S
        while not mapped(children[0], model):     # llama.cpp has the file: the load is under way
            assert time.monotonic() < deadline, f"the child never mapped {model}"
            time.sleep(0.05)
        assert signal_alone(proc, signum, children) == [], f"alive {GONE_S} s after the kit ended"


# A parent that starts one child of each kind, and each child says when it runs: then the parent
# sleeps, as the kit waits on a child, until the test ends it.
PARENT = """
import sys, time
from ragkit.support import forked, new_python
def forked_child():
    print("running: forked", flush=True)
    time.sleep(60)
forked(forked_child)
new_python("builtins", "exec", "import sys, time; print('running: new_python', file=sys.stderr, flush=True); "
           "time.sleep(60)", stderr=sys.stderr)
time.sleep(60)
"""


@linux_only
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL],
                         ids=["SIGTERM", "SIGHUP", "SIGKILL"])
def test_children_of_forked_and_new_python_end_with_their_parent(signum):
    proc = start(["-c", PARENT])
    lines, seen = output_lines(proc), []
    with cleaned_up(proc):
        wait_for(lines, seen, "running: ", count=2)
        children = [child.pid for child in psutil.Process(proc.pid).children(recursive=True)]
        assert len(children) == 2, "".join(seen)
        assert signal_alone(proc, signum, children) == [], f"alive {GONE_S} s after their parent ended"


@linux_only
def test_a_child_whose_parent_has_already_ended_ends_at_once():
    """The parent may die between the fork and the child's prctl: the child then finds another
    parent (init, or a subreaper) and ends itself, as no signal will come."""
    code = "from ragkit.support import end_with_parent; end_with_parent(1); print('ran on')"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=HANG_S, env={**os.environ, "AWS_EC2_METADATA_DISABLED": "true"})
    assert done.returncode != 0 and done.stdout == done.stderr == "", done
