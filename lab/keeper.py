"""
keeper.py: the small process between the lab grader and the code it grades. check.py starts
it; it is not for typing:

    python -I lab/keeper.py FD COMMAND...

It starts COMMAND, the graded child, in a session of its own with the pipes it was given, and
on Linux adopts whatever that child starts, even what leaves its process group with fork and
setsid (PR_SET_CHILD_SUBREAPER). When the child ends, or when the grader lets go of the pipe FD
(the grader closes its end to stop the child, and the kernel closes it when the grader dies,
of SIGTERM or SIGKILL too), the keeper kills the child and everything it adopted, then exits
as the child did. It imports only the standard library (and -I keeps the lab folder off its
path), so nothing the graded code writes can change how it runs.
"""
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 4, 36


def keep(lifeline: int, command: list[str]) -> int:
    """Run the graded child; kill all it leaves once it ends or the lifeline closes; its status."""
    if sys.platform == "linux":
        prctl = ctypes.CDLL(None).prctl
        prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)   # orphans below us come to us, not to init
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)          # a child of our user cannot attach to us
    child = subprocess.Popen(command, start_new_session=True)
    quiet = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):        # the child alone holds the grader's pipes: they close with it
        os.dup2(quiet, fd)
    threading.Thread(target=end_when_let_go, args=(lifeline, child.pid), daemon=True).start()
    child.wait()
    kill_group(child.pid)       # what it started in its own group (os.system, a plain fork)
    for _ in range(100):        # the adopted ones' own children are adopted in turn
        if not kill_adopted():
            break
    return child.returncode


def end_when_let_go(lifeline: int, pid: int) -> None:
    """Wait until the grader closes its end of the lifeline, or dies; then kill the child."""
    while os.read(lifeline, 1):             # the grader never writes: only end of file comes
        pass
    kill_group(pid)


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by `pid` (the child's session is one group)."""
    with contextlib.suppress(OSError):       # already gone
        os.killpg(pid, signal.SIGKILL)


def kill_adopted() -> int:
    """Kill and reap this process's children, which are all adopted once the child has ended,
    and say how many there were."""
    count = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError):       # gone meanwhile
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == os.getpid():   # its ppid
                os.kill(int(stat.parent.name), signal.SIGKILL)
                os.waitpid(int(stat.parent.name), 0)
                count += 1
    return count


def exit_like(status: int) -> None:
    """Exit as the child did: with its exit status, or killed by the same signal."""
    if status < 0:
        with contextlib.suppress(OSError, ValueError):      # SIGKILL takes no handler
            signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)       # on Linux not dumpable: no core file for SIGXCPU
    sys.exit(status if status >= 0 else 128 - status)


if __name__ == "__main__":
    exit_like(keep(int(sys.argv[1]), sys.argv[2:]))
