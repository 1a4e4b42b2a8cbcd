"""
keeper.py: the small process between the lab grader and the code it grades. check.py starts
it; it is not for typing:

    python -I lab/keeper.py FD UID COMMAND...

It starts COMMAND, the graded child, in a session of its own. When the child ends, or when the
grader lets go of the pipe FD (it closes its end to stop the child; the kernel closes it when
the grader dies, of SIGKILL too), the keeper kills the child's process group, then what left
the group with setsid, a fork bomb included. As root, the child goes on as user UID, an id of
its own, and the keeper kills every process of that user at once. As a normal user, on Linux,
the child is the first process of a PID namespace of its own, where the system allows one:
when it ends, the kernel kills all the rest. It imports only the standard library (and -I
keeps the lab folder off its path).
"""
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading

CLONE_NEWUSER, CLONE_NEWPID = 0x10000000, 0x20000000
PR_SET_DUMPABLE = 4


def keep(lifeline: int, uid: int, command: list[str]) -> int:
    """Run the graded child; once it ends or the lifeline closes, kill all it started; its
    exit status."""
    root = os.geteuid() == 0
    if not root:
        own_pid_namespace()                 # before the fork: the child is its first process
    child = subprocess.Popen(command, start_new_session=True)
    quiet = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):        # the child alone holds the grader's pipes: they close with it
        os.dup2(quiet, fd)
    threading.Thread(target=end_when_let_go, args=(lifeline, child.pid), daemon=True).start()
    child.wait()                # in a namespace, the kernel has ended the rest before this
    kill_group(child.pid)
    if root:
        kill_user(uid)
    return child.returncode


def own_pid_namespace() -> None:
    """Start our next children in a new user and PID namespace. Most Linux systems let a
    normal user make one; some refuse (Ubuntu 24.04 by default, most containers), and then
    we go on without: only the child's process group is killed."""
    if sys.platform == "linux":
        ctypes.CDLL(None).unshare(CLONE_NEWUSER | CLONE_NEWPID)


def end_when_let_go(lifeline: int, pid: int) -> None:
    """Wait until the grader closes its end of the lifeline, or dies; then kill the child."""
    while os.read(lifeline, 1):             # the grader never writes: only end of file comes
        pass
    kill_group(pid)


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by `pid` (the child's session is one group)."""
    with contextlib.suppress(OSError):       # already gone
        os.killpg(pid, signal.SIGKILL)


def kill_user(uid: int) -> None:
    """As root, kill every process of user `uid`, the graded code's own id: a helper takes that
    id and sends SIGKILL to all it may signal, kill(-1). The kernel reaches them all in one
    pass and stops any fork under way, so a fork bomb cannot outrun it."""
    helper = os.fork()
    if helper == 0:
        try:
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(helper, 0)


def exit_like(status: int) -> None:
    """Exit as the child did: with its exit status, or killed by the same signal."""
    if status < 0:
        with contextlib.suppress(OSError, ValueError):      # SIGKILL takes no handler
            signal.signal(-status, signal.SIG_DFL)
        if sys.platform == "linux":                         # no core file for SIGXCPU
            ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        os.kill(os.getpid(), -status)
    sys.exit(status if status >= 0 else 128 - status)


if __name__ == "__main__":
    exit_like(keep(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]))
