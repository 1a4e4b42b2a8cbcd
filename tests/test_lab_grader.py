"""The lab's grader: FAIL with a hint on the untouched starter, PASS on the reference; student
code that exits, hangs, eats memory or crashes gets a FAIL that says why. Code that attacks the
grader: test_lab_grader_hostile.py."""
import re
import signal
import subprocess
import sys
import time
import types

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

