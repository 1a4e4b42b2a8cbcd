"""The lab's grader: FAIL with a hint on the untouched starter, PASS on the reference; student
code that exits, hangs, eats memory, crashes or forks without end gets a FAIL that says why, is
shown cut short, and leaves nothing running."""
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np
import psutil
import pytest
from conftest import LATE_S, like_a_terminal
from test_lab import LAB, NO_TORCH_SITE, ROOT, check, run

import rag_from_scratch as rag

# ---------------------------------------------------------------------------
# The grader: FAIL with a hint on the untouched starter, PASS on the reference
# ---------------------------------------------------------------------------
@pytest.mark.slow
def test_check_fails_every_function_of_the_untouched_starter_with_a_hint():
    status, out = run("lab/check.py")
    assert status == 1
    for name in check.FUNCTIONS:
        assert f"FAIL  {name}: still a TODO" in out
        assert check.HINTS[name].split()[0] in out
    assert "0/5 functions pass" in out and "PASS" not in out


@pytest.mark.slow
def test_check_passes_the_reference_without_torch(tmp_path):
    # sitecustomize runs in every Python started with this PYTHONPATH: the grader's child too
    (tmp_path / "sitecustomize.py").write_text(NO_TORCH_SITE)
    status, out = run("lab/check.py", "--module", "rag_from_scratch",
                      env={"PYTHONPATH": str(tmp_path)})
    assert status == 0, out
    assert [f"PASS  {name}" for name in check.FUNCTIONS] == re.findall(r"PASS  \w+", out)
    assert "5/5 functions pass" in out



@pytest.mark.slow
def test_pytest_lab_fails_the_starter_and_passes_the_reference():
    # -v cancels a -q from the root pytest.ini, so the summary line is always printed
    status, out = run("-m", "pytest", "lab", "-v", "-p", "no:cacheprovider")
    assert status == 1 and "5 failed" in out, out
    assert out.count("hint: ") >= 5
    status, out = run("-m", "pytest", "lab", "-v", "-p", "no:cacheprovider",
                      env={"LAB_MODULE": "rag_from_scratch"})
    assert status == 0 and "5 passed" in out, out


@pytest.mark.slow
def test_pytest_on_the_whole_repository_does_not_collect_the_starter_grader():
    # the root folder as an explicit argument overrides any testpaths setting
    status, out = run("-m", "pytest", "--collect-only", "-p", "no:cacheprovider",
                      "--ignore=tests", str(ROOT))
    assert "test_starter" not in out, out
    status, out = run("-m", "pytest", "--collect-only", "-p", "no:cacheprovider", str(LAB))
    assert "test_starter" in out, out


@pytest.mark.slow
def test_check_accepts_an_independent_correct_solution(tmp_path):
    """A student's version written differently (unstable sort, loops) must still pass."""
    solution = tmp_path / "student.py"
    solution.write_text(STUDENT_SOLUTION)
    status, out = run("lab/check.py", "--module", str(solution))
    assert status == 0, out


STUDENT_SOLUTION = '''
import numpy as np

def chunk_text(text, chunk_size=50, overlap=10):
    if chunk_size < 1 or overlap < 0 or overlap >= chunk_size:
        raise ValueError("bad sizes")
    words, out, start = text.split(), [], 0
    while start < len(words):
        out.append(" ".join(words[start:start + chunk_size]))
        if start + chunk_size >= len(words):
            break
        start += chunk_size - overlap
    return out

def cosine_similarity(a, b):
    a, b = np.array(a, float), np.array(b, float)
    return float(a @ b / np.sqrt((a @ a) * (b @ b)))

def search(query, index, chunks, embedder, k=3):
    if not query.strip() or not 1 <= k <= len(chunks):
        raise ValueError("bad query or k")
    scores = np.asarray(index @ embedder.encode([query])[0]).ravel()
    return [dict(chunks[i], score=float(scores[i])) for i in np.argsort(scores)[::-1][:k]]

def build_prompt(question, retrieved):
    lines = ["Context:"] + [f"[{r['doc_id']}] {r['title']}\\n{r['text']}\\n" for r in retrieved]
    return "\\n".join(lines) + f"\\nQuestion: {question}\\nAnswer:"

def evaluate_retrieval(eval_set, index, chunks, embedder, k=3, verbose=False):
    hits = recalls = rrs = 0.0
    for item in eval_set:
        ids = [r["doc_id"] for r in search(item["question"], index, chunks, embedder, k)]
        found = set(ids) & item["relevant"]
        hits += bool(found)
        recalls += len(found) / len(item["relevant"])
        rrs += next((1 / (i + 1) for i, d in enumerate(ids) if d in item["relevant"]), 0.0)
        if verbose:
            print("HIT" if found else "MISS", item["question"])
    n = len(eval_set)
    return {"k": k, "hit_rate": hits / n, "recall": recalls / n, "mrr": rrs / n}
'''


# ---------------------------------------------------------------------------
# The grader survives student code that exits, hangs, eats memory or crashes
# ---------------------------------------------------------------------------
NEVER_ADVANCES = """
def chunk_text(text, chunk_size=50, overlap=10):
    words, chunks, start = text.split(), [], 0
    while start < len(words):
        chunks.append(" ".join(words[start:start + chunk_size]))
        start += 0                                   # the bug: the window never moves
    return chunks
"""


def student_file(tmp_path, body: str, head: str = STUDENT_SOLUTION) -> str:
    """A student's module: a correct solution of their own, then `body` replacing some of it."""
    path = tmp_path / "student.py"
    path.write_text(head + body)
    return str(path)


@pytest.mark.slow
def test_check_counts_sys_exit_at_import_as_five_fails_never_exit_0(tmp_path):
    status, out = run("lab/check.py", "--module", student_file(tmp_path, "import sys\nsys.exit(0)\n"))
    assert status == 1, out
    assert out.count("FAIL  ") == 5 and "importing the module ends the program (sys.exit(0))" in out
    assert "0/5 functions pass" in out and "Traceback" not in out


@pytest.mark.slow
def test_check_counts_sys_exit_inside_chunk_text_as_its_fail(tmp_path):
    body = "import sys\ndef chunk_text(text, chunk_size=50, overlap=10):\n    sys.exit(0)\n"
    status, out = run("lab/check.py", "--module", student_file(tmp_path, body))
    assert status == 1, out
    assert "FAIL  chunk_text: it calls sys.exit(0), which ends the whole program" in out
    assert re.findall(r"PASS  \w+", out) == [f"PASS  {f}" for f in check.FUNCTIONS[1:]]
    assert "4/5 functions pass" in out


@pytest.mark.slow
def test_check_replaces_a_child_that_exits_and_grades_the_rest(tmp_path):
    body = "import os\ndef chunk_text(text, chunk_size=50, overlap=10):\n    os._exit(0)\n"
    results = check.grade(student_file(tmp_path, body), names=("chunk_text", "cosine_similarity"))
    assert results["chunk_text"].startswith("the program ended while checking it (exit status 0)")
    assert results["cosine_similarity"] is None


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is enforced on Linux only")
def test_check_stops_a_chunk_text_that_never_advances_at_the_memory_limit(tmp_path):
    results = check.grade(student_file(tmp_path, NEVER_ADVANCES), names=("chunk_text",),
                          time_limit=60, memory_mb=100)
    assert results["chunk_text"].startswith("it ran out of memory: does every loop move forward")
    assert f"hint: {check.HINTS['chunk_text']}" in results["chunk_text"]


@pytest.mark.slow
def test_check_stops_an_endless_loop_at_the_time_limit(tmp_path):
    body = "def cosine_similarity(a, b):\n    while True:\n        pass\n"
    results = check.grade(student_file(tmp_path, body), names=("cosine_similarity", "build_prompt"),
                          time_limit=1)
    assert results["cosine_similarity"].startswith("it did not finish within 1 s")
    assert results["build_prompt"] is None                # graded by a fresh child


@pytest.mark.parametrize("argv, message", [
    (["--module", "no_such_file.py"], "error: no file no_such_file.py to grade"),
    (["--module", "no_such_module"], "error: cannot load the module to grade: ModuleNotFoundError"),
    (["--time-limit", "0"], "error: --time-limit and --memory-mb must be positive numbers"),
    (["--time-limit", "nan"], "error: --time-limit and --memory-mb must be positive numbers"),
    (["--time-limit", "inf"], "error: --time-limit and --memory-mb must be positive numbers"),
    (["--memory-mb", "99999999999999"], "error: --time-limit and --memory-mb must be positive numbers"),
])
@pytest.mark.slow
def test_check_bad_input_is_one_line_and_exit_1(argv, message, capsys):
    assert check.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1, err


def printed(grader, text: str) -> None:
    """Wait until the graded code has printed `text`, read from the grader's stderr as it comes."""
    for line in grader.stderr:
        if text in line:
            return
    raise AssertionError(f"the graded code never printed {text!r}")


ENDLESS_CHUNKER = ("import sys\ndef chunk_text(text, chunk_size=50, overlap=10):\n"
                   "    print('looping', file=sys.stderr, flush=True)\n"
                   "    while True:\n        pass\n")


@pytest.mark.slow
def test_check_ctrl_c_says_interrupted_exits_130_and_ends_the_child(tmp_path):
    module = student_file(tmp_path, ENDLESS_CHUNKER)
    grader = subprocess.Popen([sys.executable, "lab/check.py", "--module", module,
                               "--time-limit", "60"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              preexec_fn=like_a_terminal)
    printed(grader, "looping")                  # the child is inside chunk_text's endless loop
    grader.send_signal(signal.SIGINT)
    out, err = grader.communicate(timeout=30)
    assert (grader.returncode, err) == (130, "interrupted\n"), out + err
    assert all_end_soon(module)


def running(marker: str) -> list[int]:
    """The processes still running (a zombie has ended) whose command line holds `marker`."""
    return [p.pid for p in psutil.process_iter(["cmdline", "status"])
            if marker in " ".join(p.info["cmdline"] or [])
            and p.info["status"] != psutil.STATUS_ZOMBIE]


def all_end_soon(marker: str) -> bool:
    """True once no process whose command line holds `marker` runs, within LATE_S."""
    deadline = time.monotonic() + LATE_S
    while running(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def with_bug(name: str, function) -> types.SimpleNamespace:
    """The reference module with one function swapped for a wrong one."""
    module = types.SimpleNamespace(**{f: getattr(rag, f) for f in check.FUNCTIONS})
    setattr(module, name, function)
    return module


def _tail_repeated(text, chunk_size=50, overlap=10):
    pieces = rag.chunk_text(text, chunk_size, overlap)
    words = text.split()
    return pieces + [" ".join(words[-overlap:])] if pieces and overlap else pieces


def _search_mutating(query, index, chunks, embedder, k=3):
    results = rag.search(query, index, chunks, embedder, k)
    for r in results:
        next(c for c in chunks if c["chunk_id"] == r["chunk_id"])["score"] = r["score"]
    return results


def _mrr_over_hits_only(eval_set, index, chunks, embedder, k=3, verbose=False):
    m = rag.evaluate_retrieval(eval_set, index, chunks, embedder, k, verbose)
    hits = [q["rr"] for q in m["per_question"] if q["hit"]]
    return {**m, "mrr": float(np.mean(hits)) if hits else 0.0}


def _recall_as_hit_rate(*args, **kwargs):
    m = rag.evaluate_retrieval(*args, **kwargs)
    return {**m, "recall": m["hit_rate"]}


BUGS = {
    "chunk_text ignores overlap": ("chunk_text", lambda t, s=50, o=10: rag.chunk_text(t, s, 0)),
    "chunk_text adds a tail chunk": ("chunk_text", _tail_repeated),
    "cosine is the raw dot product": ("cosine_similarity", lambda a, b: float(np.dot(a, b))),
    "search returns worst first": ("search", lambda *a, **kw: rag.search(*a, **kw)[::-1]),
    "search writes scores into chunks": ("search", _search_mutating),
    "prompt drops the titles": ("build_prompt", lambda q, rs: rag.build_prompt(
        q, [{**r, "title": ""} for r in rs])),
    "MRR averaged over hits only": ("evaluate_retrieval", _mrr_over_hits_only),
    "recall reported as hit rate": ("evaluate_retrieval", _recall_as_hit_rate),
}


@pytest.mark.parametrize("bug", BUGS)
def test_check_catches_a_plausible_bug_in_one_function(bug):
    name, wrong = BUGS[bug]
    module = with_bug(name, wrong)
    problem = check.run_check(name, check.in_process(module))
    assert problem is not None and f"hint: {check.HINTS[name]}" in problem
    assert "NotImplementedError" not in problem
    others = [f for f in check.FUNCTIONS if f != name]
    assert all(check.run_check(f, check.in_process(module)) is None for f in others)


def test_check_blames_the_unfinished_function_that_evaluate_calls():
    def search(*args, **kwargs):
        raise NotImplementedError("TODO 3")

    def evaluate_retrieval(eval_set, index, chunks, embedder, k=3, verbose=False):
        return [search(item["question"], index, chunks, embedder, k) for item in eval_set]

    module = with_bug("evaluate_retrieval", evaluate_retrieval)
    problem = check.run_check("evaluate_retrieval", check.in_process(module))
    assert problem.startswith("it calls search(), which is still a TODO")


# ---------------------------------------------------------------------------
# What the grader cannot promise: the graded code runs in a process of its own, so it can
# forge its verdict. The test keeps the threat model stated where the grader is read
# ---------------------------------------------------------------------------
FORGER = ("import sys\nimport rag_from_scratch\n"
          "grader = sys.modules['__main__']       # check.py --child: this very process\n"
          "real = grader.answer\n"
          "grader.answer = lambda module, request, given, watch=False: "
          "real(rag_from_scratch, request, given)\n")


@pytest.mark.slow
def test_the_graded_code_can_forge_a_pass_as_the_threat_model_says(tmp_path):
    status, out = run("lab/check.py", "--module", starter_with(tmp_path, FORGER))
    assert status == 0 and "5/5 functions pass" in out, out     # the TODOs were never written
    for text in (check.__doc__, (LAB / "INSTRUCTOR.md").read_text()):
        text = " ".join(text.replace("**", "").split())     # one line, as read
        assert "can be forged" in text and "grade with hidden inputs and read the code" in text


RAISES_ITS_MEMORY_LIMIT = (
    "import resource\ntry:\n"
    "    resource.setrlimit(resource.RLIMIT_AS, (-1, -1))\nexcept ValueError:\n    pass\n"
    "held = []\ndef chunk_text(text, chunk_size=50, overlap=10):\n"
    "    held.append(bytearray(2 * 2**30))      # 2 GB, over the 1 GB limit\n")


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is enforced on Linux only")
def test_the_graded_code_cannot_raise_its_memory_limit(tmp_path):
    status, out = run("lab/check.py", "--module", starter_with(tmp_path, RAISES_ITS_MEMORY_LIMIT))
    assert status == 1 and "FAIL  chunk_text: it ran out of memory" in out, out


def starter_with(tmp_path, tail: str) -> str:
    """lab/starter.py, unfinished, with `tail` appended, as a file outside the repository."""
    starter = (LAB / "starter.py").read_text()
    path = tmp_path / "starter.py"
    path.write_text(starter.replace("Path(__file__).resolve().parent.parent", repr(str(ROOT)))
                    + tail)
    return str(path)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups: POSIX")
def test_what_the_graded_code_starts_in_the_background_ends_with_the_grader(tmp_path):
    tail = "import os, time\nif os.fork() == 0:\n    time.sleep(120)\n    os._exit(0)\n"
    module = starter_with(tmp_path, tail)
    results = check.grade(module, names=("chunk_text",))
    assert results["chunk_text"].startswith("still a TODO")
    assert all_end_soon(module)


@pytest.mark.slow
def test_a_fork_and_setsid_in_the_graded_code_ends_with_the_command_line_grader(tmp_path,
                                                                               setsid_is_caught):
    tail = ("import os, sys, time\nif os.fork() == 0:\n    os.setsid()\n"
            "    time.sleep(120)\n    os._exit(0)\nprint('forked', file=sys.stderr)\n")
    module = starter_with(tmp_path, tail)
    status, out = run("lab/check.py", "--module", module)
    assert status == 1 and "0/5 functions pass" in out and "  | forked" in out, out
    assert all_end_soon(module)


def test_a_buggy_search_is_blamed_not_the_correct_evaluate_retrieval_that_calls_it(tmp_path):
    """The student's own evaluate_retrieval calls the student's own (wrong) search."""
    head = "from rag_from_scratch import chunk_text, cosine_similarity, build_prompt, retrieval_metrics, average_metrics\n"
    body = ('def search(query, index, chunks, embedder, k=3):\n'
            '    scores = index @ embedder.encode([query])[0]\n'
            '    order = list(range(len(chunks)))[:k]          # the bug: chunk order, not scores\n'
            '    return [{**chunks[i], "score": float(scores[i])} for i in order]\n\n\n'
            'def evaluate_retrieval(eval_set, index, chunks, embedder, k=3, verbose=False):\n'
            '    per_question = []\n'
            '    for item in eval_set:\n'
            '        ranked = [r["doc_id"] for r in search(item["question"], index, chunks, embedder, k=k)]\n'
            '        m = retrieval_metrics(ranked, item["relevant"], k)\n'
            '        per_question.append(m)\n'
            '        if verbose:\n'
            '            mark = "HIT " if m["hit"] else "MISS"\n'
            '            print(f"  {mark} want={sorted(item[\'relevant\'])} got=[{\', \'.join(dict.fromkeys(ranked))}]  {item[\'question\']}")\n'
            '    return average_metrics(per_question, k)\n')
    results = check.grade(student_file(tmp_path, body, head))
    assert results["evaluate_retrieval"] is None, results["evaluate_retrieval"]
    assert results["search"] is not None and "at k=1 you returned scores [0.0], the best 1 are" in results["search"]


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
