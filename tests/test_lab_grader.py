"""The lab's grader: FAIL with a hint on the untouched starter, PASS on the reference; student
code that exits, hangs, eats memory, crashes or attacks the grader gets no PASS and leaves
nothing running."""
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
def test_check_bad_input_is_one_line_and_exit_1(argv, message, capsys):
    assert check.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1, err


def printed_pid(grader) -> int:
    """The pid the graded code printed ("pid=N"), read from the grader's stderr as it comes."""
    for line in grader.stderr:
        if found := re.search(r"pid=(\d+)", line):
            return int(found.group(1))
    raise AssertionError("the graded code never printed its pid")


ENDLESS_CHUNKER = ("import os, sys\ndef chunk_text(text, chunk_size=50, overlap=10):\n"
                   "    print(f'pid={os.getpid()}', file=sys.stderr, flush=True)\n"
                   "    while True:\n        pass\n")


def test_check_ctrl_c_says_interrupted_exits_130_and_ends_the_child(tmp_path):
    grader = subprocess.Popen([sys.executable, "lab/check.py", "--module",
                               student_file(tmp_path, ENDLESS_CHUNKER), "--time-limit", "60"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              preexec_fn=like_a_terminal)
    pid = printed_pid(grader)                   # the child is inside chunk_text's endless loop
    grader.send_signal(signal.SIGINT)
    out, err = grader.communicate(timeout=30)
    assert (grader.returncode, err) == (130, "interrupted\n"), out + err
    assert ends_soon(pid)


def ends_soon(pid: int) -> bool:
    """True once `pid` has ended, within LATE_S (killed and not yet reaped counts as ended)."""
    deadline = time.monotonic() + LATE_S
    while True:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


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
# A starter that attacks the grader still gets no PASS for its unfinished functions: the
# verdict is worked out in the grader's own process, from plain values
# ---------------------------------------------------------------------------
ATTACKS = {
    "replaces the grader's functions": "import sys\nmain = sys.modules['__main__']\n"
        "main.run_check = main.fail = lambda *a: None\nmain.answer = lambda *a: 'null'\n",
    "replaces the entries of CHECKS": "import sys\nchecks = sys.modules['__main__'].CHECKS\n"
        "checks.update({name: (lambda mod: None) for name in checks})\n",
    "writes forged lines to the report pipe": "import json, os\nfor fd in range(3, 64):\n"
        "    for line in ({'loaded': True}, {'event': 'done', 'name': 'chunk_text', 'problem': None},"
        " {'value': None}):\n"
        "        try:\n            os.write(fd, (json.dumps(line) + '\\n').encode())\n"
        "        except OSError:\n            pass\nos._exit(0)\n",
    "returns a str whose __ne__ lies": "class Liar(str):\n    __eq__ = lambda self, other: True\n"
        "    __ne__ = lambda self, other: False\n"
        "def build_prompt(question, retrieved):\n    return Liar('')\n",
    "patches builtins.abs": "import builtins\nbuiltins.abs = lambda x: 0\n"
        "def cosine_similarity(a, b):\n    return 0.5\n",
    "raises its memory limit back": "import resource\ntry:\n"
        "    resource.setrlimit(resource.RLIMIT_AS, (-1, -1))\nexcept ValueError:\n    pass\n"
        "from rag_from_scratch import chunk_text as reference\n"
        "held = []\ndef chunk_text(text, chunk_size=50, overlap=10):\n"
        "    held or held.append(bytearray(2 * 2**30))      # 2 GB, over the 1 GB limit\n"
        "    return reference(text, chunk_size, overlap)\n",
}


def starter_with(tmp_path, tail: str) -> str:
    """lab/starter.py, unfinished, with `tail` appended, as a file outside the repository."""
    starter = (LAB / "starter.py").read_text()
    path = tmp_path / "starter.py"
    path.write_text(starter.replace("Path(__file__).resolve().parent.parent", repr(str(ROOT)))
                    + tail)
    return str(path)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses Linux limits and fds")
@pytest.mark.parametrize("attack", ATTACKS)
def test_a_starter_that_attacks_the_grader_passes_nothing(attack, tmp_path):
    status, out = run("lab/check.py", "--module", starter_with(tmp_path, ATTACKS[attack]))
    assert status == 1 and "PASS" not in out and "0/5 functions pass" in out, out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups: POSIX")
def test_what_the_graded_code_starts_in_the_background_ends_with_the_grader(tmp_path, capsys):
    tail = "import os\nos.system('sleep 120 > /dev/null 2>&1 & echo pid=$! >&2')\n"
    results = check.grade(starter_with(tmp_path, tail), names=("chunk_text",))
    assert results["chunk_text"].startswith("still a TODO")
    assert ends_soon(int(re.search(r"pid=(\d+)", capsys.readouterr().err).group(1)))


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a subreaper is Linux only")
def test_a_fork_and_setsid_in_the_graded_code_ends_with_the_command_line_grader(tmp_path):
    tail = ("import os, sys, time\npid = os.fork()\nif pid == 0:\n    os.setsid()\n"
            "    time.sleep(120)\n    os._exit(0)\nprint(f'pid={pid}', file=sys.stderr)\n")
    status, out = run("lab/check.py", "--module", starter_with(tmp_path, tail))
    assert status == 1 and "0/5 functions pass" in out, out
    assert ends_soon(int(re.search(r"pid=(\d+)", out).group(1)))


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
# The graded code cannot reach back into the grader: its imports, its pipes, its output, its
# signals; and it leaves nothing running
# ---------------------------------------------------------------------------
def grade_cli(module: str, *flags, env=None):
    """python lab/check.py --module MODULE [flags]: (exit status, stdout, stderr)."""
    full_env = {k: v for k, v in os.environ.items() if k != "LAB_MODULE"}
    full_env.update(env or {})
    done = subprocess.run([sys.executable, "lab/check.py", "--module", module, *flags],
                          cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr


@pytest.fixture()
def open_dir():
    """A fresh folder anyone may write, as /tmp is: the graded code may run as another user."""
    folder = Path(tempfile.mkdtemp(prefix="lab-grader-"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder)


ANCESTORS = """
import os
def ancestors():
    '''The processes above this one, up to the test that started the grader (not included).'''
    pid = os.getpid()
    while True:
        with open(f"/proc/{pid}/stat") as stat:
            pid = int(stat.read().rsplit(")", 1)[1].split()[1])
        if pid <= 1 or pid == int(os.environ["GRADER_TEST_PID"]):
            return
        yield pid
"""
ASKED_BY_THIS_TEST = {"GRADER_TEST_PID": str(os.getpid())}


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_graded_code_cannot_write_to_the_graders_output(tmp_path):
    tail = ANCESTORS + (
        "for pid in ancestors():\n"
        "    for fd in (1, 2):\n"
        "        try:\n"
        "            with open(f'/proc/{pid}/fd/{fd}', 'w') as out:\n"
        "                out.write('PASS  chunk_text\\n\\x1b[2J\\n')\n"
        "            print(f'wrote {pid}/{fd}', flush=True)\n"
        "        except OSError:\n"
        "            print(f'refused {pid}/{fd}', flush=True)\n"
        "def chunk_text(text, chunk_size=50, overlap=10):\n"
        "    raise RuntimeError('\\x1b[2J\\nPASS  chunk_text')\n")
    status, out, err = grade_cli(starter_with(tmp_path, tail), env=ASKED_BY_THIS_TEST)
    assert status == 1 and "0/5 functions pass" in out, out + err
    assert re.findall("^PASS", out, re.M) == [] and "\x1b" not in out + err, out + err
    assert "wrote" not in err and err.count("refused") >= 2, err
    assert r"it raised RuntimeError: \x1b[2J PASS chunk_text" in out     # one line, escaped


def test_what_the_graded_code_prints_is_shown_on_stderr_behind_a_bar(tmp_path):
    tail = ("import sys\nprint('PASS  chunk_text\\x1b[2J')\n"
            "print('PASS  search', file=sys.stderr)\n")
    status, out, err = grade_cli(starter_with(tmp_path, tail))
    assert status == 1 and "PASS" not in out, out
    assert "  | PASS  chunk_text\\x1b[2J\n" in err and "  | PASS  search\n" in err, err
    assert "\x1b" not in err


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="the graded code runs as another user only when the grader runs as root")
def test_as_root_the_graded_code_runs_as_nobody_and_cannot_stop_the_grader(tmp_path):
    import pwd
    nobody = pwd.getpwnam("nobody").pw_uid
    mark = ROOT / f"written-by-graded-code-{os.getpid()}"
    tail = ANCESTORS + (
        "import signal\n"
        "print(f'uid={os.getuid()}', flush=True)\n"
        "for pid in ancestors():\n"
        "    try:\n"
        "        os.kill(pid, signal.SIGSTOP)\n"
        "        print(f'stopped {pid}', flush=True)\n"
        "    except PermissionError:\n"
        "        print(f'refused {pid}', flush=True)\n"
        f"try:\n    open({str(mark)!r}, 'w').close()\nexcept OSError:\n"
        "    print('cannot write the repository', flush=True)\n")
    try:
        status, out, err = grade_cli(starter_with(tmp_path, tail), env=ASKED_BY_THIS_TEST)
        assert not mark.exists()
    finally:
        mark.unlink(missing_ok=True)
    assert status == 1 and "0/5 functions pass" in out, out + err
    assert f"uid={nobody}" in err and "cannot write the repository" in err, err
    assert "stopped" not in err and err.count("refused") >= 1, err


@pytest.mark.slow
def test_a_shadow_sklearn_written_by_the_graded_code_never_runs_in_the_grader(tmp_path, open_dir):
    """The graded code writes sklearn/__init__.py into a folder on the path, ahead of the
    installed packages (as the repository root was): the grader imported its own first."""
    tail = ("import os, pathlib\n"
            "shadow = pathlib.Path(os.environ['SHADOW_DIR']) / 'sklearn'\n"
            "shadow.mkdir(exist_ok=True)\n"
            "(shadow / '__init__.py').write_text('import sys\\nmain = sys.modules[\"__main__\"]\\n'\n"
            "    'main.fail = main.run_check = lambda *args: None\\n')\n")
    status, out, err = grade_cli(starter_with(tmp_path, tail),
                                 env={"PYTHONPATH": str(open_dir), "SHADOW_DIR": str(open_dir)})
    assert (open_dir / "sklearn" / "__init__.py").exists()      # the attack did happen
    assert status == 1 and "PASS" not in out and "0/5 functions pass" in out, out + err


@pytest.mark.slow
def test_the_grader_imports_nothing_once_graded_code_runs(tmp_path):
    """Every import of the grader happens before its first child starts (an audit hook sees
    each module that is really loaded): no file the graded code writes can stand in for one."""
    script = (f"import sys\nsys.path.insert(0, {str(LAB)!r})\nimport check\n"
              "started, loaded = [], []\n"
              "def start(self, *args, real=check.Child.__init__):\n"
              "    started.append(1)\n    real(self, *args)\n"
              "check.Child.__init__ = start\n"
              "sys.addaudithook(lambda event, args: started and event == 'import'"
              " and loaded.append(args[0]))\n"
              "assert check.grade('rag_from_scratch') == dict.fromkeys(check.FUNCTIONS)\n"
              f"check.grade({starter_with(tmp_path, '')!r})\n"
              "check.print_result('chunk_text', check.fail('chunk_text', 'why'))\n"
              "print('loaded:', sorted(set(loaded)))\n")
    status, out = run("-c", script)
    assert status == 0 and "loaded: []" in out, out


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
    pid = printed_pid(grader)
    grader.terminate()
    grader.communicate(timeout=60)
    assert grader.returncode == -signal.SIGTERM
    assert ends_soon(pid)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork, setsid and /proc")
def test_pytest_lab_leaves_no_process_behind(tmp_path):
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
# The reference solution is not the student's work: imported or wrapped, it passes nothing
# ---------------------------------------------------------------------------
def test_a_file_that_only_imports_the_reference_functions_passes_none(tmp_path):
    path = tmp_path / "student.py"
    path.write_text(f"from rag_from_scratch import {', '.join(check.FUNCTIONS)}\n")
    status, out, err = grade_cli(str(path))
    assert status == 1 and "0/5 functions pass" in out, out + err
    for name in check.FUNCTIONS:
        assert f"FAIL  {name}: {name} comes from rag_from_scratch.py, the reference solution" in out


WRAPPED_REFERENCE = """
import functools, threading, types
import rag_from_scratch as rag
from rag_from_scratch import chunk_text as given_chunker
chunk_text = lambda *args, **kwargs: given_chunker(*args, **kwargs)
cosine_similarity = types.FunctionType(rag.cosine_similarity.__code__, globals(), "cosine_similarity")
def search(query, index, chunks, embedder, k=3):
    return rag.search(query, index, chunks, embedder, k)
build_prompt = functools.wraps(rag.build_prompt)(lambda *args: rag.build_prompt(*args))
def evaluate_retrieval(*args, **kwargs):
    out = []
    worker = threading.Thread(target=lambda: out.append(rag.evaluate_retrieval(*args, **kwargs)))
    worker.start()
    worker.join()
    return out[0]
"""


@pytest.mark.slow
def test_wrappers_around_the_reference_are_caught_as_the_reference(tmp_path):
    """A lambda, a rebuilt code object, a plain wrapper, functools.wraps and a thread: one each."""
    path = tmp_path / "student.py"
    path.write_text(WRAPPED_REFERENCE)
    results = check.grade(str(path))
    runs = "{0} runs rag_from_scratch.{0}, the reference solution"
    comes = "{0} comes from rag_from_scratch.py, the reference solution"
    expected = {"chunk_text": runs, "cosine_similarity": comes, "search": runs,
                "build_prompt": comes, "evaluate_retrieval": runs}
    for name, reason in expected.items():
        assert results[name].startswith(reason.format(name)), results[name]


@pytest.mark.slow
def test_the_reference_graded_by_its_own_name_or_path_still_passes_in_the_child():
    for spec in ("rag_from_scratch", str(ROOT / "rag_from_scratch.py")):
        assert check.grade(spec, names=("search",)) == {"search": None}
