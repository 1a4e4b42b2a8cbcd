"""The classroom lab: its measured figures, and a grader that fails the starter and passes the lesson."""
import importlib.util
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

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


@pytest.mark.slow      # a second or more
def test_task3_holds_its_verdict_back_until_asked(minilm, capsys):
    tasks.task3(minilm)
    out = capsys.readouterr().out
    assert "restores hit@1=1.00 at k=1 with" not in out and "still a HIT: (c)" not in out
    assert out.rstrip().endswith("then run: python lab/lab_tasks.py --task 3 --reveal")
    assert tasks.main(["--task", "3", "--reveal", "--backend", "tfidf"]) == 0
    assert "restores hit@1=1.00 at k=1" in capsys.readouterr().out


@pytest.mark.slow      # a second or more
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


@pytest.mark.slow      # a second or more
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


@pytest.mark.slow      # a second or more
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


@pytest.mark.slow      # a second or more
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
        # the tutorial's parameters, in the lesson's order; the lesson may add optional ones after
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
    """The figures the quiz relies on, recomputed here with the lesson."""
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


def pins(text: str) -> dict:
    """name -> version of every `name==version` in a text (requirements, commands)."""
    return {m[1].lower(): m[2] for m in re.finditer(r"\b([A-Za-z][\w.-]*)==([\w.+]+)", text)}


def test_the_wheelhouse_plan_installs_the_versions_the_kit_pins():
    notes = (LAB / "INSTRUCTOR.md").read_text()
    commands = [line.strip() for line in notes.splitlines() if line.strip().startswith("pip ")]
    assert any(c.startswith("pip download") for c in commands)
    assert any("--no-index --find-links wheelhouse" in c for c in commands)   # no network in class
    kit = {**pins((ROOT / "requirements.txt").read_text()), **pins((ROOT / "requirements-dev.txt").read_text()),
           **pins((ROOT / ".ci" / "run").read_text())}
    asked = pins("\n".join(commands))
    assert asked and {name: kit.get(name) for name in asked} == asked        # the same versions
    for command in commands:
        for requirements in re.findall(r"-r (\S+)", command):
            assert (ROOT / requirements).is_file(), command
    readme = (LAB / "README.md").read_text()
    assert ".venv\\Scripts\\activate" in readme and "PART_B_TFIDF.md" in readme
    assert "pytest" not in readme            # the classroom install has no pytest: lab/check.py grades


def test_cheat_sheet_generation_figures_are_task5s_table():
    sheet = (LAB / "CHEATSHEET.md").read_text()
    table = (LAB / "TASK5_generation.md").read_text()
    extractive = re.search(r"^extractive +\S+ +(\S+) +\S+ +(\S+) +\S+ +(\S+)", table, flags=re.M)
    local = re.search(r"^local +\S+ +(\S+) +\S+ +\S+ +\S+ +(\S+)", table, flags=re.M)
    assert extractive.groups() == ("0.80", "1.00", "0.80") and local.groups() == ("0.00", "1.00")
    assert ("facts 0.80, faithful 1.00, refusal R 0.80" in sheet
            and "facts 0.00, refusal R 1.00" in sheet)


def test_the_quiz_and_the_instructor_notes_give_one_plan():
    quiz = " ".join((LAB / "QUIZ.md").read_text().split())
    notes = (LAB / "INSTRUCTOR.md").read_text()
    assert "| Quiz and debrief | 10 min | Q9, Q11 and Q12 together; the rest of QUIZ.md is homework |" in notes
    assert "In class: Q9, Q11 and Q12, together" in quiz and "Q1 to Q15 for the class" not in quiz


def test_the_wheelhouse_is_never_committed():
    assert "/wheelhouse/" in (ROOT / ".gitignore").read_text().splitlines()
