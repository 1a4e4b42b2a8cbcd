"""ann.py at a tiny size: every method runs, the exact ones agree with NumPy, the table
is printed; figures of speed are the benchmark's business, never a test's."""
import re
from pathlib import Path

import numpy as np
import pytest

import rag_from_scratch as rag
import rag_vector_db  # noqa: F401  (imported before a test replaces rag.Embedder)
from ragbench import ann

ROOT = Path(__file__).resolve().parent.parent
METHODS = ["NumPy exact (index @ q)", "pgvector exact (no index)", "pgvector HNSW ef_search=40",
           "pgvector HNSW ef_search=200", "Qdrant local (exhaustive)"]


def cisi_folder() -> Path:
    """The repository's own copy of CISI."""
    return ROOT / "data" / "cisi"


@pytest.mark.slow
def test_tiny_benchmark_prints_every_method(monkeypatch, minilm, tmp_path, capsys):
    monkeypatch.setattr(rag, "Embedder", lambda backend="minilm", *a, **kw: minilm)
    code = ann.main(["--sizes", "120", "150", "--queries", "4", "--noise", "0.2",
                           "--collection", str(cisi_folder()), "--cache", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("9,847 real MiniLM vectors of CISI texts")
    assert lines[1].split() == ["N", "method", "recall@10", "median", "ms", "load/build", "s"]
    rows = [re.split(r"\s{2,}", line.strip()) for line in lines[2:]]   # N, method, recall, ms[, s]
    assert [(r[0], r[1]) for r in rows] == [(n, m) for n in ("120", "150") for m in METHODS]
    for r in rows:
        assert 0 <= float(r[2]) <= 1 and float(r[3]) > 0
        if "exact" in r[1] or "exhaustive" in r[1]:
            assert r[2] == "1.00"                    # exact search finds NumPy's top 10
    assert "pgvector HNSW ef_search=40" in out and "pgvector HNSW ef_search=200" in out
    assert not list(Path("/tmp").glob("bench-ann-pg-*/pg_db/pgdata/postmaster.pid"))


def test_noisy_copies_are_unit_length_and_distinct():
    rng = np.random.default_rng(0)
    real = ann.unit_rows(rng.standard_normal((5, 8)).astype(np.float32))
    grown = ann.grow(real, 40, 0.2, rng)
    assert grown.shape == (40, 8) and np.allclose(grown[:5], real)
    assert np.allclose(np.linalg.norm(grown, axis=1), 1, atol=1e-5)
    assert len({row.tobytes() for row in grown}) == 40                  # no ties
    nearest = (grown[5:] @ real.T).max(axis=1)
    assert nearest.min() > 0.9                                          # close to an original


def test_recall_counts_the_shared_rows():
    assert ann.recall([[1, 2, 3], [4, 5, 6]], [[3, 2, 9], [4, 5, 6]]) == pytest.approx(5 / 6)


def test_a_noise_out_of_range_is_one_line_that_names_the_range(capsys):
    with pytest.raises(SystemExit) as stopped:                 # argparse's exit: status 2
        ann.main(["--noise", "0"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err == "error: argument --noise: 0 is not between 0.001 and 10 (see --help)\n"


@pytest.mark.parametrize("argv, message", [
    (["--sizes", "5"], "every size must be at least --k (10)"),
    (["--collection", "/nonexistent"], "no test collection at /nonexistent"),
])
def test_bad_input_is_one_line(argv, message, capsys):
    assert ann.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
