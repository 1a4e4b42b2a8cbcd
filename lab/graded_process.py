"""
graded_process.py: the process the lab's graded code runs in, kept at arm's length. check.py
talks to it in lines of JSON; this file holds what bounds it, each piece for one promise:

  GradedProcess   the child behind a keeper (keeper.py): nothing it starts outlives the
                  grader; its own session: a Ctrl-C meant for the grader never reaches it; a
                  deadline on each reply, and requests written by a thread: it cannot hang
                  the grader; what it prints, on our stderr behind "  | ": its first lines,
                  cut short, control characters written out
  limit           in the child: CPU time, memory and, where the count is its own, processes
  drop_root       in the child, as root: a user id of its own, which cannot write the
                  repository or signal the grader, and whose processes can all be killed

None of it stops the graded code from forging its replies (lab/INSTRUCTOR.md).
"""
import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ragkit.support import address_space_limit, plural, printable

KEEPER = Path(__file__).resolve().parent / "keeper.py"
SHOWN_AS = "  | "               # a line the graded code printed, as the grader shows it
SHOWN_LINES, SHOWN_WIDTH = 20, 200      # of what it prints: the first lines, cut this short


class GradedProcess:
    """A child that takes requests and gives replies, one line each; all it starts ends with it."""

    def __init__(self, command: list[str], uid: int):
        """Start `command`; as root, it goes on as user `uid` (see drop_root)."""
        self.lifeline = None
        if os.name == "posix":       # the keeper holds the read end; closing ours ends it all
            keeper_end, self.lifeline = os.pipe()
            command = [sys.executable, "-I", str(KEEPER), str(keeper_end), str(uid), *command]
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
        """Copy the first SHOWN_LINES lines the graded code prints to our stderr, each behind
        SHOWN_AS, cut to SHOWN_WIDTH characters, control characters written out (so it cannot
        pass for a verdict or drive the terminal); then say how much was cut."""
        lines = cut = 0
        starts_a_line = True
        for piece in iter(lambda: self.proc.stderr.readline(2**16), ""):   # a line, or 64 kB
            text = piece.rstrip("\n")
            if starts_a_line and lines < SHOWN_LINES:
                more = "..." if len(text) > SHOWN_WIDTH else ""
                shown(printable(text[:SHOWN_WIDTH], lines=False) + more)
                text = text[SHOWN_WIDTH:]
            lines += starts_a_line
            cut += len(text)
            starts_a_line = piece.endswith("\n")
        if cut or lines > SHOWN_LINES:
            shown(f"(cut: {plural(max(lines - SHOWN_LINES, 0), 'more line')}, "
                  f"{plural(cut, 'character')} in all)")

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


def shown(line: str) -> None:
    """One line of what the graded code printed, on our stderr behind SHOWN_AS."""
    with contextlib.suppress(OSError, ValueError):       # our stderr is closed: drop it
        print(SHOWN_AS + line, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# In the child, before the graded code runs
# ---------------------------------------------------------------------------
def limit(memory_mb: int, cpu_s: int, processes: int | None = None) -> None:
    """Hard limits (soft = hard: the graded code cannot raise them): CPU time; memory, on
    Linux; and, if given, the processes and threads its user may have (RLIMIT_NPROC counts
    all of that user's: give it only where they are the graded code's alone)."""
    try:
        import resource
    except ImportError:                              # Windows: only the parent's time limit
        return
    limits = {resource.RLIMIT_CPU: cpu_s}
    memory = address_space_limit(memory_mb * 2**20)  # None off Linux
    if memory is not None:
        limits[resource.RLIMIT_AS] = memory
    if processes is not None:
        limits[resource.RLIMIT_NPROC] = processes
    for which, value in limits.items():
        hard = resource.getrlimit(which)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))


def drop_root(uid: int) -> bool:
    """As root, go on as user and group `uid` for good (real, effective and saved ids, no
    groups); True if done. check.py gives an id no account has, so its processes are the
    graded code's alone. Python and what it has imported stay usable; a module not yet
    imported loads only if anyone may read its file."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return False
    try:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    except OSError as exc:
        raise RuntimeError(f"cannot switch to user id {uid} ({exc.strerror}; a container that "
                           f"maps fewer user ids?): run the grader as a normal user") from None
    return True
