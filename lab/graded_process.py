"""
graded_process.py: the process the lab's graded code runs in, kept at arm's length. check.py
talks to it in lines of JSON; this file holds what keeps it from reaching back.

  GradedProcess   the child, behind a keeper (keeper.py) that ends all it starts when it ends
                  or the grader lets go, even by dying; the child's own session, so a Ctrl-C
                  or a signal meant for the grader never reaches it; a deadline on every reply,
                  requests written by a thread of their own (a child that stops reading blocks
                  only that thread); what it prints shown on our stderr behind "  | ", with
                  control characters written out: never on our stdout, never a clear-screen
  unreachable     while grading, on Linux, this process is not dumpable: a child of the same
                  user cannot open our stdout through /proc/PID/fd/1 or attach a debugger
  limit           in the child: hard limits on CPU time and, on Linux, memory
  become_nobody   in the child, when the grader runs as root: go on as the user nobody, who
                  cannot signal the grader, open its files or write the repository

What holds for a normal user (no root to drop): the graded code runs as that same user, so it
can still send the grader a signal (SIGSTOP stops it; one that ends it leaves a non-zero exit
status, never 0), kill the keeper, and write to that user's files and terminal. The verdict
itself is worked out in the grader, from plain values, whoever the child runs as.
"""
import contextlib
import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ragkit.text import printable

KEEPER = Path(__file__).resolve().parent / "keeper.py"
PR_GET_DUMPABLE, PR_SET_DUMPABLE = 3, 4
SHOWN_AS = "  | "               # a line the graded code printed, as the grader shows it


class GradedProcess:
    """A child that takes requests and gives replies, one line each, and reaches nothing else."""

    def __init__(self, command: list[str]):
        self.lifeline = None
        if os.name == "posix":       # the keeper holds the read end; closing ours ends it all
            keeper_end, self.lifeline = os.pipe()
            command = [sys.executable, "-I", str(KEEPER), str(keeper_end), *command]
            place = {"start_new_session": True, "pass_fds": (keeper_end,)}
        else:
            place = {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, errors="replace", **place)
        if self.lifeline is not None:
            os.close(keeper_end)
        self.requests = queue.Queue()
        self.lines = queue.Queue(maxsize=1)          # one line read ahead: a flood just waits
        self.pipes = {threading.Thread(target=work, daemon=True): pipe for work, pipe in
                      ((self.write, self.proc.stdin), (self.read, self.proc.stdout),
                       (self.show, self.proc.stderr))}
        for thread in self.pipes:
            thread.start()

    def write(self) -> None:
        """Write each queued request (a thread: if the child stops reading, only this waits)."""
        for line in iter(self.requests.get, None):
            try:
                self.proc.stdin.write(line)
                self.proc.stdin.flush()
            except (OSError, ValueError):            # the child is gone: its reply says so
                return

    def read(self) -> None:
        """Queue each reply line of at most 1 MB, then "" (a thread: Windows pipes have no
        select)."""
        for line in iter(lambda: self.proc.stdout.readline(2**20), ""):
            self.lines.put(line)
        self.lines.put("")

    def show(self) -> None:
        """Copy what the graded code prints to our stderr, each line behind SHOWN_AS and with
        its control characters written out, so it cannot pass for a verdict or drive the
        terminal."""
        for line in iter(lambda: self.proc.stderr.readline(2**16), ""):
            with contextlib.suppress(OSError, ValueError):   # our stderr is closed: drop it
                print(SHOWN_AS + printable(line.rstrip("\n"), lines=False), file=sys.stderr,
                      flush=True)

    def send(self, line: str) -> None:
        """Queue one request line for the child; never waits."""
        self.requests.put(line)

    def next_line(self, seconds: float) -> str | None:
        """The child's next line; None after `seconds`; "" once it has closed its output."""
        try:
            return self.lines.get(timeout=max(seconds, 0))
        except queue.Empty:
            return None

    def status(self) -> int:
        """The child's exit status as subprocess gives it (negative: killed by that signal),
        once it has ended; its end is forced after 10 s (closed its output, but lives on)."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        self.end()
        return self.proc.returncode

    def end(self) -> None:
        """End the child and all it started: let go of the lifeline (the keeper kills the rest);
        a keeper not gone within 10 s is killed itself."""
        self.requests.put(None)
        if self.lifeline is not None:
            os.close(self.lifeline)
            self.lifeline = None
        elif os.name == "nt":
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()                         # SIGKILL: it will not take long
        self.close_pipes()

    def close_pipes(self) -> None:
        """Close our ends of the pipes once their threads are done, within 10 s in all, so all
        the child printed is shown before we go on; a pipe a thread still uses stays open."""
        deadline = time.monotonic() + 10
        for thread, pipe in self.pipes.items():
            while thread.is_alive() and time.monotonic() < deadline:
                with contextlib.suppress(queue.Empty):   # a reply nobody asked for (forged):
                    self.lines.get_nowait()              # make room, or its reader waits on
                thread.join(timeout=0.05)
            if not thread.is_alive():
                with contextlib.suppress(OSError):
                    pipe.close()


@contextlib.contextmanager
def unreachable():
    """While grading, on Linux: not dumpable, so a child of the same user can neither open our
    stdout through /proc/PID/fd/1 (to forge verdict lines) nor attach a debugger to us."""
    if sys.platform != "linux":
        yield
        return
    prctl = ctypes.CDLL(None).prctl
    was = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0)
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    try:
        yield
    finally:
        prctl(PR_SET_DUMPABLE, was, 0, 0, 0)


# ---------------------------------------------------------------------------
# In the child, before the graded code runs
# ---------------------------------------------------------------------------
def limit(memory_mb: int, cpu_s: int) -> None:
    """Hard limits (soft = hard: the graded code cannot raise them): CPU time, memory on Linux."""
    try:
        import resource
    except ImportError:                              # Windows: only the parent's time limit
        return
    limits = {resource.RLIMIT_CPU: cpu_s}
    statm = Path("/proc/self/statm")                 # macOS does not enforce RLIMIT_AS
    if statm.exists():
        used = int(statm.read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        limits[resource.RLIMIT_AS] = used + memory_mb * 2**20
    for which, value in limits.items():
        hard = resource.getrlimit(which)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))


def become_nobody() -> bool:
    """As root, go on as the user nobody for good (real, effective and saved ids, no groups);
    True if done. Python and what it has imported stay usable; a module not yet imported
    loads only if nobody may read its file."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return False
    import pwd
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:                                 # no such user here: stay as we are
        return False
    os.setgroups([])
    os.setgid(nobody.pw_gid)
    os.setuid(nobody.pw_uid)
    return True
