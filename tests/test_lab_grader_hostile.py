"""The lab's grader against hostile student code: what it prints is shown cut short and cannot
drive the terminal; it cannot hang the grader, signal it or write the repository (as root); what
it starts, a fork bomb too, is bounded and ends with the grader."""
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import psutil
import pytest
from test_lab import LAB, ROOT, check, run
from test_lab_grader import (ENDLESS_CHUNKER, STUDENT_SOLUTION, all_end_soon, printed, running,
                             starter_with, student_file)

import rag_from_scratch as rag


# ---------------------------------------------------------------------------
# The graded code is shown cut short and cannot drive the terminal; it cannot hang the grader,
# signal it or write the repository (as root); what it starts, a fork bomb too, is bounded and
# ends with the grader
# ---------------------------------------------------------------------------
def grade_cli(module: str, *flags, env=None, user=None, processes=None):
    """lab/check.py --module MODULE [flags], as `user`, under ulimit -u `processes`: (status, out, err)."""
    full_env = {k: v for k, v in os.environ.items() if k != "LAB_MODULE"}
    full_env.update(env or {})

    def start():
        import resource
        if processes is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
        if user is not None:
            os.setgroups([])
            os.setgid(user)
            os.setuid(user)
    done = subprocess.run([sys.executable, "lab/check.py", "--module", module, *flags],
                          cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=300,
                          preexec_fn=start if user or processes else None)
    return done.returncode, done.stdout, done.stderr


@pytest.fixture()
def open_dir():
    """A fresh folder anyone may write, as /tmp is: the graded code may run as another user."""
    folder = Path(tempfile.mkdtemp(prefix="lab-grader-"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder)


@pytest.mark.slow
def test_an_error_message_is_one_fail_line_with_control_characters_written_out(tmp_path):
    tail = ("def chunk_text(text, chunk_size=50, overlap=10):\n"
            "    raise RuntimeError('\\x1b[2J\\nPASS  chunk_text')\n")
    status, out, err = grade_cli(starter_with(tmp_path, tail))
    assert status == 1 and "0/5 functions pass" in out, out + err
    assert re.findall("^PASS", out, re.M) == [] and "\x1b" not in out + err, out + err
    assert r"it raised RuntimeError: \x1b[2J PASS chunk_text (line" in out     # one line, escaped


@pytest.mark.slow
def test_a_crash_is_a_fail_that_names_the_line_never_a_traceback(tmp_path):
    body = ("class Stop(BaseException):\n    pass\n"
            "def chunk_text(text, chunk_size=50, overlap=10):\n"
            "    return text.split()[1000]\n"
            "def cosine_similarity(a, b):\n"
            "    raise Stop('no thanks')\n")
    module = student_file(tmp_path, body)
    lines = Path(module).read_text().splitlines()
    index_line, stop_line = (lines.index(line) + 1 for line in
                             ("    return text.split()[1000]", "    raise Stop('no thanks')"))
    status, out, err = grade_cli(module)
    assert ("FAIL  chunk_text: it raised IndexError: list index out of range "
            f"(line {index_line} of student.py, in chunk_text)") in out, out + err
    assert ("FAIL  cosine_similarity: it raised Stop: no thanks "
            f"(line {stop_line} of student.py, in cosine_similarity)") in out, out + err
    assert "3/5 functions pass" in out and "Traceback" not in err, out + err


@pytest.mark.slow
def test_what_the_graded_code_prints_is_shown_on_stderr_behind_a_bar(tmp_path):
    tail = ("import sys\nprint('PASS  chunk_text\\x1b[2J')\n"
            "print('PASS  search', file=sys.stderr)\n")
    status, out, err = grade_cli(starter_with(tmp_path, tail))
    assert status == 1 and "PASS" not in out, out
    assert "  | PASS  chunk_text\\x1b[2J\n" in err and "  | PASS  search\n" in err, err
    assert "\x1b" not in err


@pytest.mark.slow
def test_what_the_graded_code_prints_is_cut_to_its_first_20_lines_of_200_characters(tmp_path):
    tail = "for _ in range(100):\n    print('x' * 1000)\n"
    status, out, err = grade_cli(starter_with(tmp_path, tail))
    shown = [line for line in err.splitlines() if line.startswith("  | ")]
    # 20 lines of 200 shown: 800 cut from each, then 80 more lines of 1,000
    assert shown == ["  | " + "x" * 200 + "..."] * 20 + [
        "  | (cut: 80 more lines, 96,000 characters in all)"], err[:2000]


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="F_SETPIPE_SZ is Linux only")
def test_a_child_that_never_reads_its_requests_cannot_hang_the_grader(tmp_path):
    """The graded code shrinks its request pipe to one page, forges two replies and never reads
    again: the cosine check's first request (about 15 kB) cannot be written whole."""
    tail = ("import fcntl, os, stat, threading\n"
            "fcntl.fcntl(0, fcntl.F_SETPIPE_SZ, 4096)\n"
            "mine = {os.fstat(0).st_ino, os.fstat(2).st_ino}\n"
            "for fd in range(3, 64):\n"
            "    try:\n        info = os.fstat(fd)\n    except OSError:\n        continue\n"
            "    if stat.S_ISFIFO(info.st_mode) and info.st_ino not in mine:   # the reply pipe\n"
            "        os.write(fd, b'{\"loaded\": true}\\n{\"value\": null}\\n')\n"
            "threading.Event().wait()\n")
    status, out, err = grade_cli(starter_with(tmp_path, tail), "--time-limit", "2")
    assert status == 1 and "0/5 functions pass" in out, out + err
    assert "FAIL  cosine_similarity: it did not finish within 2 s" in out, out


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="POSIX signals")
def test_sigterm_ends_the_grader_and_the_graded_code(tmp_path):
    module = student_file(tmp_path, ENDLESS_CHUNKER, STUDENT_SOLUTION)
    grader = subprocess.Popen([sys.executable, "lab/check.py", "--module", module,
                               "--time-limit", "60"], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    printed(grader, "looping")
    grader.terminate()
    grader.communicate(timeout=60)
    assert grader.returncode == -signal.SIGTERM
    assert all_end_soon(module)


ROOT_ONLY = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                               reason="needs root: only a grader run as root changes user")


@pytest.mark.slow
@ROOT_ONLY
def test_as_root_the_graded_code_runs_as_a_user_of_its_own_that_cannot_touch_the_grader(tmp_path):
    mark = ROOT / f"written-by-graded-code-{os.getpid()}"
    tail = ("import os, signal\n"
            "print(f'uid={os.getuid()} gid={os.getgid()} groups={os.getgroups()}', flush=True)\n"
            "try:\n    os.kill(os.getppid(), signal.SIGSTOP)\n"
            "except PermissionError:\n    print('cannot stop the keeper', flush=True)\n"
            f"try:\n    open({str(mark)!r}, 'w').close()\nexcept OSError:\n"
            "    print('cannot write the repository', flush=True)\n")
    grader = subprocess.Popen([sys.executable, "lab/check.py", "--module",
                               starter_with(tmp_path, tail)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = grader.communicate(timeout=300)
        assert not mark.exists()
    finally:
        mark.unlink(missing_ok=True)
    uid = check.UID_BASE + grader.pid                  # an id of its own: no account has it
    assert grader.returncode == 1 and "0/5 functions pass" in out, out + err
    assert f"uid={uid} gid={uid} groups=[]" in err, err
    assert "cannot stop the keeper" in err and "cannot write the repository" in err, err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="user namespaces are Linux only")
def test_a_user_id_the_system_cannot_give_is_one_line_that_says_what_to_do():
    """Root in a container mapping few user ids (here: root alone) cannot give the graded code one."""
    script = (f"import ctypes, os, sys\nsys.path.insert(0, {str(LAB)!r})\n"
              "from graded_process import drop_root\n"
              "uid, gid = os.getuid(), os.getgid()\n"
              "assert ctypes.CDLL(None).unshare(0x10000000) == 0, 'no user namespace here'\n"
              "for name, text in (('setgroups', 'deny'), ('uid_map', f'0 {uid} 1'),"
              " ('gid_map', f'0 {gid} 1')):\n"
              "    with open(f'/proc/self/{name}', 'w') as out:\n"
              "        out.write(text)\n"
              "try:\n    drop_root(2_000_000_123)\nexcept RuntimeError as exc:\n    print(exc)\n")
    status, out = run("-c", script)
    if "no user namespace here" in out:
        pytest.skip("needs a user namespace, which this system refuses")
    assert status == 0 and out.startswith("cannot switch to user id 2000000123 ("), out
    assert out.rstrip().endswith("a container that maps fewer user ids?): run the grader as a "
                                 "normal user"), out


FORK_BOMB = """
import os, sys, time
def spread():
    while True:                          # fork for ever; at the limit, try again soon
        try:
            if os.fork() == 0:
                os.setsid()              # out of the grader's process group
        except OSError:
            time.sleep(0.1)
forked = 0
try:
    while True:
        if os.fork() == 0:
            os.setsid()
            spread()
        forked += 1
except OSError:
    pass
print(f"forked {forked} before the limit", file=sys.stderr, flush=True)
"""


def fork_bomb_graded(folder: Path, user=None, processes=None) -> tuple[str, str]:
    """Grade the starter with FORK_BOMB appended, from `folder`: (its path, the grader's stderr),
    once the grader has exited."""
    module = starter_with(folder, FORK_BOMB)
    Path(module).chmod(0o644)
    try:
        status, out, err = grade_cli(module, user=user, processes=processes)
    except BaseException:
        kill_all_of(module)
        raise
    assert status == 1 and "0/5 functions pass" in out, out + err
    return module, err


def kill_all_of(marker: str) -> None:
    """Clean up after a grader that failed: SIGKILL each process whose command line holds
    `marker`; as root, every process of its user id at once (a fork bomb outruns one by one)."""
    import keeper
    for _ in range(100):
        for pid in running(marker):
            with contextlib.suppress(psutil.Error, OSError):
                uid = psutil.Process(pid).uids().real
                if os.geteuid() == 0 and uid >= check.UID_BASE:
                    keeper.kill_user(uid)
                else:
                    os.kill(pid, signal.SIGKILL)
        if not running(marker):
            return


@pytest.mark.slow
@ROOT_ONLY
@pytest.mark.parametrize("ulimit", [300, 2000])
def test_as_root_a_fork_bomb_is_bounded_and_nothing_of_it_outlives_the_grader(ulimit, tmp_path):
    module, err = fork_bomb_graded(tmp_path, processes=ulimit)
    forked = int(re.search(r"forked (\d+) before the limit", err).group(1))
    assert 1 <= forked <= check.MORE_PROCESSES, err
    try:
        assert all_end_soon(module)              # 0 left now: 0 in 60 s too (none can start)
    finally:
        kill_all_of(module)


def namespace_refused(user=None) -> str | None:
    """Why `user` (else we) cannot run this Python in a user and PID namespace of its own,
    where a normal user's graded code runs; None if it can."""
    probe = ("import ctypes, subprocess, sys\n"
             "assert ctypes.CDLL(None).unshare(0x10000000 | 0x20000000) == 0, 'refused'\n"
             "subprocess.run([sys.executable, '-c', 'pass'], check=True)\n")
    become = (lambda: (os.setgroups([]), os.setgid(user), os.setuid(user))) if user else None
    try:
        subprocess.run([sys.executable, "-c", probe], capture_output=True, check=True,
                       preexec_fn=become)
        return None
    except (OSError, subprocess.CalledProcessError):
        return (f"user {user or os.getuid()} cannot start this Python in a user and PID "
                f"namespace here (the system refuses one, or Python lives where only root may "
                f"read)")


@pytest.fixture()
def setsid_is_caught():
    """Skip unless what leaves the process group is killed too: as root, or in a namespace."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the grader catches what leaves its process group on Linux only")
    if os.geteuid() != 0 and (why := namespace_refused()):
        pytest.skip(why)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="needs root, to run the grader as the normal user nobody")
@pytest.mark.parametrize("ulimit", [300, 2000])
def test_as_a_normal_user_a_fork_bomb_is_bounded_and_nothing_of_it_outlives_the_grader(
        ulimit, open_dir):
    import pwd
    nobody = pwd.getpwnam("nobody").pw_uid       # a normal user: the grader cannot change user
    if why := namespace_refused(nobody):
        pytest.skip(why)
    module, err = fork_bomb_graded(open_dir, user=nobody, processes=ulimit)
    forked = int(re.search(r"forked (\d+) before the limit", err).group(1))
    assert 1 <= forked <= check.MORE_PROCESSES, err
    try:
        assert all_end_soon(module)
    finally:
        kill_all_of(module)


@pytest.mark.slow
def test_a_fork_and_setsid_in_the_graded_code_ends_with_the_command_line_grader(tmp_path,
                                                                               setsid_is_caught):
    tail = ("import os, sys, time\nif os.fork() == 0:\n    os.setsid()\n"
            "    time.sleep(120)\n    os._exit(0)\nprint('forked', file=sys.stderr)\n")
    module = starter_with(tmp_path, tail)
    status, out = run("lab/check.py", "--module", module)
    assert status == 1 and "0/5 functions pass" in out and "  | forked" in out, out
    assert all_end_soon(module)


@pytest.mark.slow
def test_pytest_lab_leaves_no_process_behind(tmp_path, setsid_is_caught):
    """Graded code that forks twice and leaves its session: nothing of it outlives pytest."""
    tail = ("import os, time\n"
            "if os.fork() == 0:\n    os.setsid()\n"
            "    if os.fork() == 0:\n        time.sleep(120)\n    os._exit(0)\n")
    module = starter_with(tmp_path, tail)
    status, out = run("-m", "pytest", "lab", "-v", "-p", "no:cacheprovider",
                      env={"LAB_MODULE": module})
    assert status == 1 and "5 failed" in out, out
    left = [p.info for p in psutil.process_iter(["pid", "cmdline", "status"])
            if module in " ".join(p.info["cmdline"] or [])
            and p.info["status"] != psutil.STATUS_ZOMBIE]
    assert left == []


# ---------------------------------------------------------------------------
# The reference solution is not the student's work: imported, it passes nothing (a wrapper
# around it is left to whoever reads the code)
# ---------------------------------------------------------------------------
@pytest.mark.slow
def test_a_file_that_only_imports_the_reference_functions_passes_none(tmp_path):
    path = tmp_path / "student.py"
    path.write_text(f"from rag_from_scratch import {', '.join(check.FUNCTIONS)}\n")
    status, out, err = grade_cli(str(path))
    assert status == 1 and "0/5 functions pass" in out, out + err
    for name in check.FUNCTIONS:
        assert f"FAIL  {name}: {name} comes from rag_from_scratch.py, the reference solution" in out


def test_a_function_rebuilt_from_the_reference_is_caught_and_a_wrapper_is_left_to_reading():
    rebuilt = types.FunctionType(rag.cosine_similarity.__code__, {}, "cosine_similarity")
    assert check.borrowed(rebuilt, "cosine_similarity") == (
        "cosine_similarity comes from rag_from_scratch.py, the reference solution")
    assert check.borrowed(lambda a, b: rag.cosine_similarity(a, b), "cosine_similarity") is None


@pytest.mark.slow
def test_the_reference_graded_by_its_own_name_or_path_still_passes_in_the_child():
    for spec in ("rag_from_scratch", str(ROOT / "rag_from_scratch.py")):
        assert check.grade(spec, names=("search",)) == {"search": None}
