"""int8 and binary search against brute force, hand-computed codes and bit counts, FAISS's
quantizers, and the CISI quality table pinned."""
import numpy as np
import pytest
from conftest import CISI

import rag_from_scratch as rag
from rageval import quantized as rq


def unit_rows(n, dim, seed=0):
    vectors = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_int8_codes_and_scale_by_hand():
    codes, scale = rq.int8_index(np.array([[0.5, -1.0], [0.25, 0.5], [0.0, 0.0]], np.float32))
    np.testing.assert_allclose(scale, [0.5 / 127, 1.0 / 127])     # largest |value| -> 127
    assert codes.tolist() == [[127, -127], [64, 64], [0, 0]]       # 63.5 and 63.5 round to even
    assert rq.int8_index(np.zeros((2, 3), np.float32))[0].tolist() == [[0] * 3] * 2  # no 0 / 0


def test_decoded_int8_vectors_are_within_half_a_step():
    vectors = unit_rows(300, 384)
    codes, scale = rq.int8_index(vectors)
    assert codes.dtype == np.int8 and codes.nbytes == vectors.nbytes // 4
    assert np.all(np.abs(codes * scale - vectors) <= scale / 2 + 1e-7)


def test_sign_bits_and_hamming_by_hand():
    words = rq.binary_index(np.array([[0.3, -0.2, 0.1, 0.5]]))
    assert words.dtype == np.uint64 and words.shape == (1, 1)        # 4 bits, padded to a word
    assert words.view(np.uint8).tolist() == [[0b10110000, 0, 0, 0, 0, 0, 0, 0]]
    rows = np.array([[0b1100], [0b1010], [0b11111111]], dtype=np.uint64)
    assert rq.hamming(rows, np.array([0b1010], dtype=np.uint64)).tolist() == [2, 0, 6]


def test_hamming_counts_the_bits_numpy_unpacks():
    vectors = unit_rows(200, 384)
    words = rq.binary_index(vectors)
    assert words.shape == (200, 6) and words.flags.f_contiguous       # 384 bits: 6 words a row
    as_bytes = np.packbits(vectors > 0, axis=1)
    q = vectors[7][::-1].copy()
    expected = np.unpackbits(as_bytes ^ np.packbits(q > 0), axis=1).sum(axis=1)
    assert rq.hamming(words, rq.binary_index(q)[0]).tolist() == expected.tolist()


def test_full_rescoring_depth_finds_the_exact_top_k():
    vectors, queries = unit_rows(500, 64), unit_rows(20, 64, seed=1)
    codes, scale = rq.int8_index(vectors)
    bits = rq.binary_index(vectors)
    for q in queries:
        exact = rag.top_k(vectors @ q, 10).tolist()
        assert rq.int8_search(q, codes, scale, 10, 50, vectors).tolist() == exact   # all 500
        assert rq.binary_search(q, bits, 10, 50, vectors).tolist() == exact
    recall = np.mean([len(set(rq.int8_search(q, codes, scale)) & set(rag.top_k(vectors @ q, 10)))
                      for q in queries]) / 10
    assert recall >= 0.9                        # int8 alone, no rescoring, is nearly exact


def test_rescoring_reads_a_memory_mapped_file(tmp_path):
    vectors, q = unit_rows(1000, 32), unit_rows(1, 32, seed=1)[0]
    np.save(tmp_path / "vectors.npy", vectors)
    on_disk = np.load(tmp_path / "vectors.npy", mmap_mode="r")
    bits = rq.binary_index(vectors)
    assert (rq.binary_search(q, bits, 5, 8, on_disk).tolist()
            == rq.binary_search(q, bits, 5, 8, vectors).tolist())


def test_faiss_binary_flat_and_scalar_quantizer_agree():
    faiss = pytest.importorskip("faiss")
    vectors, q = unit_rows(500, 64), unit_rows(1, 64, seed=1)[0]
    flat_bits = faiss.IndexBinaryFlat(64)
    flat_bits.add(np.packbits(vectors > 0, axis=1))            # FAISS takes the bytes
    distances, ids = flat_bits.search(np.packbits(q[None, :] > 0, axis=1), 500)
    assert rq.hamming(rq.binary_index(vectors), rq.binary_index(q)[0])[ids[0]].tolist() \
        == distances[0].tolist()
    sq8 = faiss.IndexScalarQuantizer(64, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
    sq8.train(vectors)
    sq8.add(vectors)
    scores, ids = sq8.search(q[None, :], 500)
    codes, scale = rq.int8_index(vectors)
    ours = codes.astype(np.float32) @ (q * scale)
    # two quantizers (FAISS: 255 steps from min to max; ours: +-127 steps), both near exact
    assert np.abs(scores[0] - (vectors @ q)[ids[0]]).max() < 0.005
    assert np.abs(ours - vectors @ q).max() < 0.005


@pytest.fixture(scope="module")
def cisi_table(minilm):
    return rq.cisi_quality(CISI, minilm)


@pytest.mark.slow      # MiniLM over CISI's 1,460 documents
def test_cisi_quality_table(cisi_table):
    pinned = {"float32": (0.132, 0.419, 1.0), "int8": (0.132, 0.419, 0.997),
              "int8 + rescore x4": (0.132, 0.419, 1.0), "binary": (0.108, 0.365, 0.586),
              "binary + rescore x4": (0.125, 0.410, 0.918)}
    assert {name: tuple(round(m[key], 3) for key in ("recall", "ndcg", "exact"))
            for name, m in cisi_table.items()} == pinned


@pytest.mark.slow      # MiniLM over CISI's 1,460 documents
def test_float32_row_is_the_core_metrics_on_full_cosine_scores(cisi_table, minilm):
    from rageval.ir_collection import load_collection
    from rageval.ir_scores import query_metrics
    from rageval.embedding_cache import EmbeddingCache
    col = load_collection(CISI)
    judged = [q for q in col["queries"] if q["qid"] in col["qrels"]]
    cache = EmbeddingCache()
    scores = (cache.encode(minilm, [q["text"] for q in judged])
              @ cache.encode(minilm, [d["text"] for d in col["docs"]]).T)
    m = query_metrics(scores, [d["doc_id"] for d in col["docs"]],
                      [col["qrels"][q["qid"]] for q in judged]).mean(axis=0)
    assert (cisi_table["float32"]["recall"], cisi_table["float32"]["ndcg"]) == pytest.approx(
        (m[1], m[3]))


@pytest.mark.slow      # MiniLM over CISI's 1,460 documents
def test_command_prints_the_table(cisi_table, monkeypatch, capsys):
    monkeypatch.setattr(rq, "cisi_quality", lambda collection, rescores: cisi_table)
    assert rq.main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["float32", "0.132", "0.419", "1.00", "1,536"]
    assert lines[5].split() == ["binary", "+", "rescore", "x4", "0.125", "0.410", "0.92", "48", "(+",
                                "1,536", "on", "disk)"]
    from conftest import ROOT
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert "\n".join(lines[:6]) in page                # the docs quote the table as printed


def test_bad_flags_are_one_line(capsys):
    assert rq.main(["--collection", "/no/such"]) == 1
    err = capsys.readouterr().err
    assert "not found" in err and err.count("\n") == 1
    with pytest.raises(SystemExit) as stopped:                 # argparse's exit: status 2
        rq.main(["--rescore", "0"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err == "error: argument --rescore: 0 is not between 1 and 10,000 (see --help)\n"


@pytest.mark.slow      # MiniLM over CISI's 1,460 documents
def test_deeper_rescoring_gives_binary_the_exact_top_10_the_docs_quote(minilm):
    m = rq.cisi_quality(CISI, minilm, rescores=(10,))["binary + rescore x10"]
    assert (round(m["exact"], 2), round(m["ndcg"], 3)) == (0.99, 0.417)
    from conftest import ROOT
    page = " ".join((ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8").split())
    assert "With `--rescore 10` binary + rescore returns 0.99 of float32's top 10 (nDCG@10 0.417)" \
        in page
