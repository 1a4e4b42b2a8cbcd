"""The search benchmark on a tiny index: its JSON has every figure, and our search returns the
same ids as FAISS and as a full sort. Figures only: no test here depends on a timing."""
import json

import numpy as np
import pytest
from conftest import CISI

import rag_from_scratch as rag
from ragbench import search as bench

# The lesson's defaults, read from its function signatures (one source of truth).
CHUNK_SIZE = rag.defaults(rag.build_chunks)["chunk_size"]   # the tutorial's 50 words
TOP_K = rag.defaults(rag.search)["k"]

SMALL = ["--sizes", "2000", "--repeats", "3", "--bandwidth-mb", "32",
         "--tfidf-chunks", "0", "--minilm-chunks", "0", "--rescore", "4", "40", "--no-real-vectors"]
METHODS = ["matvec", "core", "rowmajor", "argsort", "faiss"]


@pytest.fixture(scope="module")
def small_report():
    """One JSON run on N=2000, shared by the tests below."""
    import io
    from contextlib import redirect_stdout
    out = io.StringIO()
    with redirect_stdout(out):
        assert bench.main(SMALL + ["--json"]) == 0
    return json.loads(out.getvalue())


def test_json_has_every_field(small_report):
    assert set(small_report) >= {"repeats", "buffer_mb", "threads", "search"}
    (run,) = small_report["search"]
    assert run["read_kernel"] in ("np.dot(buffer, buffer)", "buffer.sum()")
    assert len(run["read_gb_per_s_each"]) == len(METHODS)          # measured next to each method
    assert run["read_gb_per_s"] == pytest.approx(np.median(run["read_gb_per_s_each"]))
    assert run["read_gb_per_s"] > 0
    assert small_report["threads"]["cpus"] >= 1 and small_report["threads"]["load_before"] >= 0
    assert (run["n"], run["dim"], run["k"]) == (2000, 384, TOP_K)
    assert run["index_mb"] == pytest.approx(2000 * 384 * 4 / 1e6)      # 2,000 x 384 float32
    assert run["bound_ms"] > 0
    for name in METHODS:                    # each method timed, next to its own bound reading
        assert run[f"{name}_ms"] >= run[f"{name}_min_ms"] > 0
        assert run[f"{name}_x_bound"] > 0


def test_core_search_returns_the_same_ids_as_faiss_and_argsort(small_report):
    (run,) = small_report["search"]
    assert run["same_ids_faiss"] is True and run["same_ids_argsort"] is True
    assert run["same_ids_rowmajor"] is True
    ids = run["ids_last_query"]
    assert ids["core"] == ids["faiss"] == ids["argsort"] == ids["rowmajor"]
    # and they are the true best: recompute in float64 from the same seeded vectors
    index = bench.random_unit_vectors(2000).astype(np.float64)
    q = bench.query_vectors(3)[-1].astype(np.float64)
    assert ids["core"] == np.argsort(-(index @ q))[:TOP_K].tolist()


@pytest.mark.slow      # a second or more
def test_text_report_prints_one_row_per_size(capsys):
    assert bench.main(SMALL) == 0
    out = capsys.readouterr().out
    assert "read bandwidth" in out and "bound ms" in out and "faiss ms" in out
    row = next(line for line in out.splitlines() if line.strip().startswith("2,000"))
    assert row.rstrip().endswith("yes") and row.count("x") == 5
    assert "== Quantized search, N=2,000" in out and "faiss binary + rescore" in out


def test_random_unit_vectors_are_unit_length_float32_and_repeatable():
    a = bench.random_unit_vectors(250_000 + 7, dim=8)        # crosses the 100,000-row blocks
    assert a.dtype == np.float32 and a.shape == (250_007, 8)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(bench.random_unit_vectors(300, dim=8),
                                  bench.random_unit_vectors(300, dim=8))


@pytest.mark.slow
def test_tfidf_index_of_10k_cisi_chunks_stays_sparse_and_under_100_mb():
    chunks, source, questions = bench.text_chunks(10_000, CISI)
    assert len(chunks) == 10_000 and "overlap 40" in source
    assert max(len(c["text"].split()) for c in chunks) == CHUNK_SIZE
    t = bench.bench_tfidf(chunks, questions[:2], repeats=2)
    assert t["chunks"] == 10_000
    assert t["sparse_mb"] < 100
    assert t["dense_float32_mb"] == pytest.approx(10_000 * t["terms"] * 4 / 1e6)
    assert t["dense_float64_mb"] == 2 * t["dense_float32_mb"]
    assert t["dense_float64_mb"] > 50 * t["sparse_mb"]
    # the vocabulary is the one scikit-learn builds with the lesson's settings
    from sklearn.feature_extraction.text import TfidfVectorizer
    vectorizer = TfidfVectorizer(stop_words="english", ngram_range=(1, 2))
    reference = vectorizer.fit_transform([c["text"] for c in chunks])
    assert (t["terms"], t["nonzeros"]) == (reference.shape[1], reference.nnz)


@pytest.mark.slow      # a second or more
def test_without_a_collection_the_text_is_made_up_and_zipf_like():
    chunks, source, questions = bench.text_chunks(400, None)
    assert len(chunks) == 400 and source.startswith("synthetic") and questions
    words = " ".join(c["text"] for c in chunks).split()
    assert len(words) == 400 * CHUNK_SIZE
    counts = np.sort(np.unique(words, return_counts=True)[1])[::-1]
    assert counts[0] > 5 * counts[9]                     # a few words are far more common
    assert bench.synthetic_texts(3) == bench.synthetic_texts(3)


def test_minilm_throughput_counts_only_real_encodes(minilm):
    texts = [f"bench chunk number {i} about retrieval speed" for i in range(12)]
    m = bench.bench_minilm(texts, minilm)
    assert m["chunks"] == 12 and m["chunks_per_s"] > 0 and m["torch_threads"] >= 1
    assert bench.bench_minilm(texts, minilm)["chunks"] == 0   # all in the embedder's cache


@pytest.mark.parametrize("argv, expected", [
    (["--sizes", "3"], "N=3 must be larger than k=3"),
    (["--sizes", "--minilm-chunks", "0", "--tfidf-chunks", "5", "--collection", "/no/such"],
     "collection folder not found"),
])
def test_bad_flags_are_one_line_errors(argv, expected, capsys):
    assert bench.main(argv) == 1
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1


@pytest.mark.parametrize("argv, expected", [
    (["--repeats", "0"], "--repeats: 0 is not between 1 and 1,000"),
    (["--sizes", "100", "--tfidf-chunks", "-1"], "--tfidf-chunks: -1 is not between 0 and 10,000,000"),
    (["--bandwidth-mb", str(10**23)], f"--bandwidth-mb: {10**23} is not between 1 and 65,536"),
])
def test_numbers_out_of_range_are_one_line_that_names_the_range(argv, expected, capsys):
    with pytest.raises(SystemExit) as stopped:                 # argparse's exit: status 2
        bench.main(argv)
    assert stopped.value.code == 2 and capsys.readouterr().err == f"error: argument {expected} (see --help)\n"


def test_sizes_that_do_not_fit_in_memory_are_refused_before_any_work(monkeypatch, capsys):
    monkeypatch.setattr(bench, "available_memory", lambda: 2_000_000_000)
    assert bench.main(["--sizes", "1000000", "--tfidf-chunks", "0", "--minilm-chunks", "0"]) == 1
    err = capsys.readouterr().err
    assert "N=1,000,000 needs about 5.1 GB of memory and 2.0 GB is free" in err


def test_quantized_rows_have_recall_against_exact_and_memory_per_million(small_report):
    (run,) = small_report["search"]
    rows = run["quantized"]
    assert list(rows) == ["float32", "int8", "int8 + rescore x4", "int8 + rescore x40", "binary",
                          "binary + rescore x4", "binary + rescore x40", "faiss SQ8",
                          "faiss SQ8 + rescore x4", "faiss SQ8 + rescore x40", "faiss binary",
                          "faiss binary + rescore x4", "faiss binary + rescore x40"]
    assert {name: r["mb_per_million"] for name, r in rows.items()} == {
        name: 1536 if name == "float32" else 384 if "SQ8" in name or "int8" in name else 48
        for name in rows}
    assert rows["float32"]["recall"] == 1.0 and rows["int8 + rescore x4"]["recall"] >= 0.9
    assert rows["binary + rescore x40"]["recall"] >= rows["binary + rescore x4"]["recall"]
    assert rows["faiss binary + rescore x40"]["recall"] == rows["binary + rescore x40"]["recall"]
    assert "quantized_minilm" not in run                            # --no-real-vectors
    for r in rows.values():
        assert r["x_bound"] == pytest.approx(r["ms"] / run["bound_ms"])
        assert r["recall"] <= 1.0


@pytest.fixture(scope="module")
def cisi_minilm(minilm):
    """CISI's document and query vectors (cached): real structure, as MiniLM rows need."""
    from rageval.ir_collection import load_collection
    from rageval.embedding_cache import EmbeddingCache
    from rageval.score_matrices import unit_rows
    col, cache = load_collection(CISI), EmbeddingCache()
    return (unit_rows(cache.encode(minilm, [d["text"] for d in col["docs"]])),
            unit_rows(cache.encode(minilm, [q["text"] for q in col["queries"]])))


@pytest.mark.slow
def test_minilm_rows_grow_real_vectors_and_use_every_query(cisi_minilm, monkeypatch):
    import io
    from contextlib import redirect_stdout
    monkeypatch.setattr(bench, "minilm_vectors", lambda collection: cisi_minilm)
    out = io.StringIO()
    with redirect_stdout(out):
        assert bench.main(SMALL[:-1] + ["--json"]) == 0             # real vectors on
    (run,) = json.loads(out.getvalue())["search"]
    rows = run["quantized_minilm"]
    assert list(rows) == list(run["quantized"])
    # 1,460 real rows and 540 noisy copies; x40 rescores 400 of the 2,000 rows
    assert rows["int8 + rescore x4"]["recall"] == 1.0
    assert 0.5 < rows["binary"]["recall"] < rows["binary + rescore x4"]["recall"] < 1.0
    assert rows["binary + rescore x40"]["recall"] == 1.0
