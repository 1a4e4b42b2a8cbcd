"""rag_experiments.py: the tutorial's Experiments A-E line for line, the measured results of
F-J, BM25 against rank_bm25, the bootstrap against SciPy, the charts and the CLI (the test
collections' scores are tested in test_collection.py)."""
import contextlib
import io
import math
import re
from pathlib import Path

import numpy as np
import pytest
from sklearn.feature_extraction.text import CountVectorizer

import rag_experiments as rx
import rag_from_scratch as rag
from rageval import ir_scores, score_matrices
from ragkit import retrieval
from ragkit.support import split_sentences

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def run(minilm, tmp_path_factory):
    """Every experiment once, sharing the session's model: (results, printed text, chart folder)."""
    folder = tmp_path_factory.mktemp("plots")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        results = rx.run_experiments("ABCDEFGHIJ", minilm=minilm, plot_dir=str(folder))
    return results, out.getvalue(), folder


def block(text: str, letter: str) -> list[str]:
    """The printed lines of one experiment, header included."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"== Experiment {letter}:"))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("== ")), len(lines))
    return [line for line in lines[start:end] if line]


# ---------------------------------------------------------------------------
# A to E: the tutorial's printed figures, verbatim
# ---------------------------------------------------------------------------
TUTORIAL_A = """\
== Experiment A: embedding backend (chunk_size=50, overlap=10) ==
  HIT  want=['HR-01'] got=[HR-01]  How many vacation days do I get each year?
  HIT  want=['HR-01'] got=[HR-01]  Can I carry unused leave into next year?
  HIT  want=['HR-02'] got=[HR-02]  Do I need a doctor's note if I am ill for three days?
  HIT  want=['IT-01'] got=[IT-01]  I forgot my password. How do I reset it?
  HIT  want=['IT-02'] got=[IT-02]  My laptop was stolen at the airport. What should I do?
  HIT  want=['FIN-02'] got=[FIN-02]  What is the hotel limit when I travel to Mumbai?
  HIT  want=['SEC-01'] got=[SEC-01]  Can I use ChatGPT to summarise a customer's complaint?
  MISS want=['HR-04'] got=[IT-02]  How much time off do new fathers get?
  HIT  want=['LND-01'] got=[LND-01]  Will the company pay for my AWS certification exam?
  HIT  want=['FIN-01', 'FIN-02'] got=[FIN-02]  How do I book flights for a client visit and claim the costs afterwards?
tfidf   hit@1=0.90 recall@1=0.85 | hit@3=1.00 recall@3=1.00
minilm  hit@1=1.00 recall@1=0.95 | hit@3=1.00 recall@3=1.00"""

TUTORIAL_B = """\
== Experiment B: chunk size and overlap (MiniLM) ==
size=12  overlap=0  chunks=49  hit@1=0.90 recall@1=0.90 recall@3=0.95
size=12  overlap=4  chunks=69  hit@1=0.90 recall@1=0.90 recall@3=0.95
size=50  overlap=10 chunks=17  hit@1=1.00 recall@1=0.95 recall@3=1.00
size=500 overlap=0  chunks=10  hit@1=1.00 recall@1=0.95 recall@3=1.00"""

TUTORIAL_C = """\
== Experiment C: what a 12-word chunk with no overlap looks like ==
  HR-02#0: Employees receive 12 days of paid sick leave per calendar year. Sick
  HR-02#1: leave cannot be carried forward. Inform your manager before 10:00 AM on
  HR-02#2: the day you are unwell. If you are absent for more than
  HR-02#3: 2 consecutive days, upload a medical certificate from a registered doctor to
  HR-02#4: the PeoplePortal within 3 days of returning to work."""

TUTORIAL_D = """\
== Experiment D: stuffing more chunks into the prompt (MiniLM, size=50, overlap=10) ==
k=1  precision@k=1.00  prompt length for Q1=66 words
k=3  precision@k=0.53  prompt length for Q1=156 words
k=5  precision@k=0.32  prompt length for Q1=228 words
k=10 precision@k=0.18  prompt length for Q1=467 words"""

TUTORIAL_E = """\
== Experiment E: does the top chunk contain the answer? (MiniLM) ==
size=12 overlap=0: 0.537 HR-04#0: Birth mothers receive 26 weeks of paid maternity leave. Fathers, partners and
size=12 overlap=4: 0.668 HR-04#1: leave. Fathers, partners and adoptive parents receive 4 weeks of paid parental"""


@pytest.mark.parametrize("letter, expected", [("A", TUTORIAL_A), ("B", TUTORIAL_B),
                                              ("C", TUTORIAL_C), ("D", TUTORIAL_D),
                                              ("E", TUTORIAL_E)])
@pytest.mark.slow      # every experiment once (the module's `run`)
def test_experiments_a_to_e_print_the_tutorials_lines_verbatim(run, letter, expected):
    printed = block(run[1], letter)
    wanted = expected.splitlines()
    assert printed[:len(wanted)] == wanted


@pytest.mark.slow      # every experiment once (the module's `run`)
def test_experiment_a_numbers_and_the_one_question_gap(run):
    a = run[0]["A"]
    assert (a["tfidf"]["hit@1"], a["tfidf"]["recall@1"]) == (0.9, 0.85)
    assert (a["minilm"]["hit@1"], a["minilm"]["recall@1"]) == (1.0, 0.95)
    assert a["tfidf"]["hit@3"] == a["tfidf"]["recall@3"] == a["minilm"]["recall@3"] == 1.0
    assert a["tfidf"]["mrr@3"] == pytest.approx(0.95)          # 9 questions at rank 1, one at 2
    # One question out of ten: +0.10, and the interval still touches zero.
    assert a["minilm-tfidf hit@1"] == pytest.approx((0.1, 0.0, 0.3))
    assert "  hit@1, minilm - tfidf: +0.10 [+0.00, +0.30]  (could be chance)" in block(run[1], "A")


@pytest.mark.slow      # every experiment once (the module's `run`)
def test_experiment_b_chunk_counts_and_rates(run):
    b = run[0]["B"]["settings"]
    got = {label: (r["chunks"], r["hit@1"], r["recall@1"], r["recall@3"]) for label, r in b.items()}
    assert got == {"size=12 overlap=0": (49, 0.9, 0.9, 0.95), "size=12 overlap=4": (69, 0.9, 0.9, 0.95),
                   "size=50 overlap=10": (17, 1.0, 0.95, 1.0), "size=500 overlap=0": (10, 1.0, 0.95, 1.0)}
    sweep = run[0]["B"]["sweep"]
    assert sweep["sizes"] == rx.B_SWEEP and set(sweep["hit@1"]) == {0.0, 0.25}
    assert sweep["hit@1"][0.0][rx.B_SWEEP.index(12)] == 0.9     # the sweep agrees with 12/0 above
    assert sweep["hit@1"][0.0][rx.B_SWEEP.index(50)] == 1.0


@pytest.mark.slow      # every experiment once (the module's `run`)
def test_experiment_d_precision_and_prompt_length(run):
    d = run[0]["D"]["k"]
    assert {k: (round(r["precision"], 2), r["prompt_words"]) for k, r in d.items()} == \
        {1: (1.0, 66), 3: (0.53, 156), 5: (0.32, 228), 10: (0.18, 467)}
    assert all(d[k]["recall"] <= d[k2]["recall"] for k, k2 in zip(rx.D_KS, rx.D_KS[1:]))


@pytest.mark.slow      # every experiment once (the module's `run`)
def test_experiment_e_overlap_puts_the_answer_in_the_top_chunk(run):
    e = run[0]["E"]
    no_overlap, overlap = e["size=12 overlap=0"], e["size=12 overlap=4"]
    assert (no_overlap["chunk_id"], round(no_overlap["score"], 3), no_overlap["has_answer"]) == \
        ("HR-04#0", 0.537, False)
    assert (overlap["chunk_id"], round(overlap["score"], 3), overlap["has_answer"]) == \
        ("HR-04#1", 0.668, True)
    assert no_overlap["text"].endswith("Fathers, partners and")


# ---------------------------------------------------------------------------
# F: sentence-aware chunking
# ---------------------------------------------------------------------------
def test_sentence_chunks_pack_whole_sentences_and_cut_only_overlong_ones():
    text = "One two three. Four five! Six seven eight nine ten eleven twelve? End."
    assert split_sentences(text) == ["One two three.", "Four five!",
                                        "Six seven eight nine ten eleven twelve?", "End."]
    assert rx.sentence_chunks(text, 5) == ["One two three. Four five!",
                                           "Six seven eight nine ten", "eleven twelve? End."]
    assert rx.sentence_chunks(text, 100) == [text]
    assert split_sentences("Visit id.kestrelwood.example today.") == \
        ["Visit id.kestrelwood.example today."]


def test_sentence_chunks_of_the_corpus_keep_every_word_in_order():
    for doc in rag.CORPUS:
        pieces = rx.build_sentence_chunks([doc], 25)
        assert " ".join(p["text"] for p in pieces).split() == doc["text"].split()
        assert all(len(p["text"].split()) <= 25 for p in pieces)


@pytest.mark.slow      # every experiment once (the module's `run`)
def test_experiment_f_sentence_chunks_measured(run):
    f = run[0]["F"]["settings"]
    got = {label: (r["chunks"], r["hit@1"], r["top"]["chunk_id"], r["has_answer"])
           for label, r in f.items()}
    assert got == {
        "words 12/0": (49, 0.9, "HR-04#0", False), "words 12/4": (69, 0.9, "HR-04#1", True),
        "words 50/10": (17, 1.0, "HR-04#0", True), "sentences <=12": (58, 0.8, "HR-04#1", True),
        "sentences <=25": (33, 0.9, "HR-04#1", True), "sentences <=50": (17, 0.9, "HR-04#0", True)}
    # Whole sentences put "4 weeks" in the top chunk without any overlap...
    assert f["sentences <=25"]["top"]["text"].startswith("Fathers, partners and adoptive parents "
                                                          "receive 4 weeks")
    assert "  top chunk, sentences <=25: Fathers, partners and adoptive parents receive 4 weeks of " \
           "paid parental leave, which must be taken within 6 months of the birth or adoption." \
           in block(run[1], "F")
    # ...but hit@1 does not improve on the word window here, and ten questions can't tell.
    assert run[0]["F"]["sentences<=12 - words 12/0 hit@1"] == pytest.approx((-0.1, -0.3, 0.0))


# ---------------------------------------------------------------------------
# G: BM25 against rank_bm25, the worked example, hybrids and rank fusion
# ---------------------------------------------------------------------------
def reference_bm25(chunks, stem=False):
    from rank_bm25 import BM25Okapi
    analyse = ir_scores.stemmed_analyzer() if stem else retrieval.word_analyzer()
    return BM25Okapi([analyse(c["text"]) for c in chunks]), analyse


@pytest.mark.parametrize("k1, b", [(1.5, 0.75), (1.2, 0.4), (2.0, 1.0)])
def test_bm25_okapi_idf_matches_rank_bm25_exactly(chunks, k1, b):
    from rank_bm25 import BM25Okapi
    analyse = retrieval.word_analyzer()
    reference = BM25Okapi([analyse(c["text"]) for c in chunks], k1=k1, b=b)
    vectorizer = CountVectorizer(analyzer=analyse)
    weights = retrieval.bm25_weights(vectorizer.fit_transform([c["text"] for c in chunks]), k1, b,
                                     idf=ir_scores.okapi_idf)
    questions = [item["question"] for item in rag.EVAL_SET] + ["leave leave days"]
    ours = retrieval.bm25_scores(questions, vectorizer, weights)
    for question, row in zip(questions, ours):
        np.testing.assert_allclose(row, reference.get_scores(analyse(question)), rtol=1e-9)


def test_bm25_okapi_floors_negative_idf_like_rank_bm25():
    # "leave" is in 3 of 4 texts: its raw idf is negative and both lift it to 0.25 * mean idf.
    texts = ["leave days", "sick leave", "parental leave weeks", "laptop stolen"]
    from rank_bm25 import BM25Okapi
    analyse = retrieval.word_analyzer()
    reference = BM25Okapi([analyse(t) for t in texts])
    vectorizer = CountVectorizer(analyzer=analyse)
    weights = retrieval.bm25_weights(vectorizer.fit_transform(texts), idf=ir_scores.okapi_idf)
    assert reference.idf["leave"] > 0
    np.testing.assert_allclose(retrieval.bm25_scores(["leave"], vectorizer, weights)[0],
                               reference.get_scores(["leave"]), rtol=1e-9)


@pytest.mark.parametrize("stem", [False, True])
def test_bm25_default_idf_is_rank_bm25_with_lucenes_idf(chunks, stem):
    reference, analyse = reference_bm25(chunks, stem)
    n = len(chunks)
    for term in reference.idf:        # same documents frequencies, Lucene's never-negative idf
        df = sum(term in set(analyse(c["text"])) for c in chunks)
        reference.idf[term] = math.log(1 + (n - df + 0.5) / (df + 0.5))
    vectorizer = CountVectorizer(analyzer=analyse)
    weights = retrieval.bm25_weights(vectorizer.fit_transform([c["text"] for c in chunks]))
    questions = [item["question"] for item in rag.EVAL_SET]
    for question, row in zip(questions, retrieval.bm25_scores(questions, vectorizer, weights)):
        np.testing.assert_allclose(row, reference.get_scores(analyse(question)), rtol=1e-9)


def test_stemming_matches_word_forms():
    analyse = ir_scores.stemmed_analyzer()
    assert analyse("Retrieving retrieval of documents") == ["retriev", "retriev", "document"]
    vectorizer = CountVectorizer(analyzer=analyse)
    weights = retrieval.bm25_weights(vectorizer.fit_transform(["libraries and librarians", "chemistry"]))
    assert retrieval.bm25_scores(["library"], vectorizer, weights)[0, 0] > 0


@pytest.mark.slow      # every experiment once (the module's `run`)
def test_bm25_worked_example_by_hand(run):
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS
    count = lambda text: len([w for w in re.findall(r"\b\w\w+\b", text.lower())
                              if w not in ENGLISH_STOP_WORDS])
    chunks = rag.build_chunks(rag.CORPUS, 50, 10)
    lengths = [count(c["text"]) for c in chunks]
    length = count(next(c["text"] for c in chunks if c["chunk_id"] == "HR-04#0"))
    average = sum(lengths) / len(lengths)
    idf = math.log(1 + (17 - 1 + 0.5) / (1 + 0.5))                  # "fathers" is in one chunk
    score = idf * 1 * 2.5 / (1 + 1.5 * (0.25 + 0.75 * length / average))
    example = run[0]["G"]["worked_example"]
    assert (example["N"], example["n"], example["tf"], example["length"]) == (17, 1, 1, length)
    assert example["score"] == pytest.approx(score) and example["matrix"] == pytest.approx(score)
    assert example["question_score"] == pytest.approx(score)      # "time", "new" aren't in HR-04#0
    printed = block(run[1], "G")
    assert f"  idf = ln(1 + (N - n + 0.5) / (n + 0.5)) = ln(1 + (17 - 1 + 0.5) / (1 + 0.5)) = " \
           f"{idf:.3f}" in printed
    assert any(line.endswith(f"= {score:.3f}; matrix entry W[HR-04#0, 'fathers'] = {score:.3f}")
               for line in printed)
    assert f"{idf:.3f}" == "2.485" and f"{score:.3f}" == "2.108"


def test_rank_fusion_and_hybrid_by_hand():
    a, b = np.array([[3.0, 1.0, 2.0]]), np.array([[0.1, 0.9, 0.5]])
    np.testing.assert_array_equal(retrieval.ranks(a), [[1, 3, 2]])
    np.testing.assert_array_equal(retrieval.ranks(np.array([2.0, 2.0, 1.0])), [1, 2, 3])   # ties: index order
    fused = retrieval.reciprocal_rank_fusion([a, b], k=60)
    np.testing.assert_allclose(fused, [[1 / 61 + 1 / 63, 1 / 63 + 1 / 61, 2 / 62]])
    np.testing.assert_allclose(retrieval.hybrid_scores(a, b, 0.5), [[1.55, 0.95, 1.25]])
    np.testing.assert_allclose(retrieval.minmax(a), [[1.0, 0.0, 0.5]])
    np.testing.assert_allclose(retrieval.minmax(np.array([[2.0, 2.0]])), [[0.0, 0.0]])   # flat row: no NaN
    with pytest.raises(ValueError, match="between 0 and 1"):
        retrieval.hybrid_scores(a, b, 1.5)


def test_score_matrix_ranks_like_the_cores_search(minilm, minilm_index, chunks, tfidf_setup):
    for embedder, index in [(minilm, minilm_index), tfidf_setup]:
        scores = rx.score_matrix([item["question"] for item in rag.EVAL_SET], index, embedder)
        for k in (1, 3):
            ours = rx.evaluate_scores(scores, chunks, rag.EVAL_SET, k)
            core = rag.evaluate_retrieval(rag.EVAL_SET, index, chunks, embedder, k)
            assert {key: ours[key] for key in ("hit_rate", "recall", "mrr", "ndcg")} == \
                {key: core[key] for key in ("hit_rate", "recall", "mrr", "ndcg")}


@pytest.mark.slow      # every experiment once (the module's `run`)
def test_experiment_g_hybrid_fixes_both_known_failures(run):
    g = run[0]["G"]
    fathers, vacation = rx.FATHERS, rag.EVAL_SET[0]["question"]
    assert g["tutorial"]["tfidf"]["top_doc"][fathers] == "IT-02"        # the tutorial's TF-IDF miss
    assert g["tutorial"]["bm25"]["top_doc"][fathers] == "IT-02"         # BM25 misses it too
    assert g["lab"]["minilm"]["top_doc"][vacation] == "HR-05"           # the lab's regression
    assert g["lab"]["minilm"]["hit@1"] == pytest.approx(10 / 11)
    for method in ["0.5 tfidf + 0.5 minilm", "rrf(tfidf, minilm)", "rrf(bm25, minilm)"]:
        assert g["tutorial"][method]["top_doc"][fathers] == "HR-04"
        assert g["lab"][method]["top_doc"][vacation] == "HR-01"
        assert g["tutorial"][method]["hit@1"] == g["lab"][method]["hit@1"] == 1.0
    assert g["lab: hybrid - minilm hit@1"] == pytest.approx((1 / 11, 0.0, 3 / 11))


# ---------------------------------------------------------------------------
# H: refusal thresholds
# ---------------------------------------------------------------------------
def test_best_threshold_by_hand():
    best = rx.best_threshold([0.5, 0.6, 0.7], [0.1, 0.2])
    assert best == {"threshold": pytest.approx(0.35), "f1": 1.0, "accuracy": 1.0, "separable": True}
    # One unanswerable question scores above one answerable: no cut is perfect.
    best = rx.best_threshold([0.3, 0.6, 0.7], [0.1, 0.4])
    assert not best["separable"] and best["f1"] == pytest.approx(0.8)


@pytest.mark.slow      # every experiment once (the module's `run`)
def test_experiment_h_no_threshold_separates_the_questions(run):
    h = run[0]["H"]
    assert len(rx.UNANSWERABLE) >= 5 and set(h) == {"tfidf", "bm25", "minilm"}
    for method in h.values():
        assert len(method["answerable"]) == 10 and len(method["unanswerable"]) == len(rx.UNANSWERABLE)
        assert not method["separable"]
        assert max(method["unanswerable"]) > min(method["answerable"])
    assert round(h["minilm"]["unanswerable"][0], 3) == 0.332       # the tutorial's share price
    assert round(min(h["minilm"]["answerable"]), 3) == 0.299       # ... and the ChatGPT question
    assert {m: round(r["f1"], 2) for m, r in h.items()} == {"tfidf": 0.8, "bm25": 0.89, "minilm": 0.82}


# ---------------------------------------------------------------------------
# I: merging overlapping chunks
# ---------------------------------------------------------------------------
def test_merge_overlapping_joins_neighbours_once_and_keeps_others():
    retrieved = [
        {"chunk_id": "D#1", "doc_id": "D", "title": "t", "text": "d e f g", "score": 0.9},
        {"chunk_id": "X#0", "doc_id": "X", "title": "x", "text": "other text", "score": 0.8},
        {"chunk_id": "D#0", "doc_id": "D", "title": "t", "text": "a b c d e", "score": 0.7},
        {"chunk_id": "D#3", "doc_id": "D", "title": "t", "text": "p q", "score": 0.6},
    ]
    merged = rx.merge_overlapping(retrieved)
    assert [(m["chunk_id"], m["text"], m["score"]) for m in merged] == [
        ("D#0+1", "a b c d e f g", 0.9), ("X#0", "other text", 0.8), ("D#3", "p q", 0.6)]
    # A chunk that bridges two retrieved neighbours joins all three.
    bridge = {"chunk_id": "D#2", "doc_id": "D", "title": "t", "text": "g h p", "score": 0.5}
    merged = rx.merge_overlapping(retrieved + [bridge])
    assert [(m["chunk_id"], m["text"]) for m in merged] == [
        ("D#0+1+2+3", "a b c d e f g h p q"), ("X#0", "other text")]
    # Neighbours that share no words stay apart: nothing is invented.
    apart = [dict(retrieved[2], text="a b"), dict(retrieved[0], text="c d")]
    assert [m["text"] for m in rx.merge_overlapping(apart)] == ["a b", "c d"]


def test_merge_of_the_corpus_chunks_rebuilds_the_document(chunks):
    hr01 = [dict(c, score=1.0) for c in chunks if c["doc_id"] == "HR-01"]
    assert len(hr01) == 2
    merged = rx.merge_overlapping(hr01[::-1])          # found in reverse order, joined in order
    assert len(merged) == 1 and merged[0]["text"] == " ".join(rag.CORPUS[0]["text"].split())


@pytest.mark.slow      # every experiment once (the module's `run`)
def test_experiment_i_prompts_shrink_and_keep_every_fact(run):
    i = run[0]["I"]
    assert i["size=50 overlap=10 k=3"] == {"words_before": 1475, "words_after": 1376, "shorter": 7,
                                           "facts_before": 10, "facts_after": 10, "kept": 10}
    assert "size=50 overlap=10 k=3  1475 -> 1376 (-7%)           7/10    10/10 -> 10/10           " \
           "10/10" in block(run[1], "I")
    # The README's "19% at 12/4 and k=5": 12-word chunks miss three answer phrases before
    # and after merging alike.
    assert i["size=12 overlap=4 k=5"] == {"words_before": 925, "words_after": 753, "shorter": 10,
                                          "facts_before": 7, "facts_after": 7, "kept": 10}
    assert "size=12 overlap=4 k=5   925 -> 753 (-19%)           10/10    7/10 -> 7/10             " \
           "10/10" in block(run[1], "I")


# ---------------------------------------------------------------------------
# J: Rocchio pseudo-relevance feedback
# ---------------------------------------------------------------------------
@pytest.mark.slow      # every experiment once (the module's `run`)
def test_experiment_j_rocchio_beside_the_plain_search(run):
    j = run[0]["J"]
    got = {m: (r["hit@1"], r["recall@1"], r["recall@3"], round(r["mrr@3"], 2)) for m, r in j.items()
           if isinstance(r, dict)}
    assert got == {"tfidf": (0.9, 0.85, 1.0, 0.95), "tfidf + rocchio": (0.9, 0.85, 1.0, 0.95),
                   "minilm": (1.0, 0.95, 1.0, 1.0), "minilm + rocchio": (0.9, 0.9, 1.0, 0.95)}
    # Ten questions cannot tell: feedback costs MiniLM one question, within chance.
    assert j["minilm: rocchio - plain hit@1"] == pytest.approx((-0.1, -0.3, 0.0))
    printed = block(run[1], "J")
    assert printed[0] == ("== Experiment J: Rocchio feedback, q' = 1 q + 0.75 * mean of the top 3 "
                          "chunks (size=50, overlap=10) ==")
    assert "minilm + rocchio  0.90  0.90     1.00     0.95" in printed
    assert "  hit@1, minilm + rocchio minus minilm: -0.10 [-0.30, +0.00]  (could be chance)" in printed


def test_experiment_j_moves_the_query_as_the_formula_says(chunks, tfidf_setup):
    embedder, index = tfidf_setup
    q = embedder.encode([rx.FATHERS], sparse=True)
    scores = (q @ index.T).toarray()
    top = np.argsort(-scores[0], kind="stable")[:score_matrices.ROCCHIO_M]
    feedback = index[top].toarray().mean(axis=0)
    by_hand = score_matrices.ROCCHIO_A * q.toarray()[0] + score_matrices.ROCCHIO_B * feedback
    np.testing.assert_allclose(score_matrices.rocchio(q, index, scores).toarray()[0],
                               by_hand / np.linalg.norm(by_hand), rtol=1e-5)


# ---------------------------------------------------------------------------
# Bootstrap intervals
# ---------------------------------------------------------------------------
def test_bootstrap_matches_scipy_percentile_interval():
    from scipy import stats
    values = [1.0] * 9 + [0.0]
    ours = retrieval.bootstrap_ci(values)
    theirs = stats.bootstrap((np.array(values),), np.mean, n_resamples=2000, method="percentile",
                             confidence_level=0.95, rng=np.random.default_rng(1)).confidence_interval
    assert ours == (0.7, 1.0)
    assert ours == (theirs.low, theirs.high)        # means of 10 values: both on the 0.1 grid
    assert retrieval.bootstrap_ci(values) == retrieval.bootstrap_ci(values)          # seeded: reruns agree
    assert retrieval.bootstrap_ci([0.5] * 10) == (0.5, 0.5)


@pytest.mark.slow      # every experiment once (the module's `run`)
def test_each_text_is_embedded_once_per_backend(run, minilm, capsys):
    before = minilm.texts_encoded
    rx.run_experiments("BDEFI", minilm=minilm)         # every text was seen in the first run
    assert minilm.texts_encoded == before
    assert f"MiniLM has embedded {before} distinct texts so far, each once" in capsys.readouterr().out


def test_difference_lines_say_when_ten_questions_cannot_tell(capsys):
    rx.print_difference("same", (0.0, 0.0, 0.0))
    rx.print_difference("one question", (0.1, 0.0, 0.3))
    rx.print_difference("every question", (0.5, 0.3, 0.7))
    assert capsys.readouterr().out.splitlines() == [
        "  same: +0.00 [+0.00, +0.00]  (no difference)",
        "  one question: +0.10 [+0.00, +0.30]  (could be chance)",
        "  every question: +0.50 [+0.30, +0.70]  (holds across resamples)"]


def test_paired_bootstrap_resamples_questions_not_settings():
    before, after = [0.0, 1.0] * 10, [0.0, 1.0] * 10                 # identical settings
    assert retrieval.paired_bootstrap(before, after) == (0.0, 0.0, 0.0)    # unpaired would be wide
    diff, low, high = retrieval.paired_bootstrap([0.0] * 20, [1.0] * 20)
    assert (diff, low, high) == (1.0, 1.0, 1.0)


# ---------------------------------------------------------------------------
# Charts
# ---------------------------------------------------------------------------
@pytest.mark.slow      # every experiment once (the module's `run`)
def test_plots_are_real_png_files(run):
    results, printed, folder = run
    names = sorted(Path(p).name for p in results["plots"])
    assert names == ["b_chunk_size.png", "d_top_k.png", "h_refusal_scores.png"]
    for name in names:
        data = (folder / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 15_000
    assert printed.strip().splitlines()[-1].startswith("charts: ")


def test_plot_without_matplotlib_says_what_to_install(monkeypatch, tmp_path):
    import sys
    monkeypatch.setitem(sys.modules, "matplotlib", None)           # import now fails
    with pytest.raises(RuntimeError, match=".venv/bin/pip install matplotlib"):
        rx.write_plots({"D": {}}, str(tmp_path))


# ---------------------------------------------------------------------------
# The command line and running without MiniLM
# ---------------------------------------------------------------------------
def test_parse_letters_accepts_lists_and_rejects_unknown_letters():
    assert rx.parse_letters("e, a,b") == "ABE" and rx.parse_letters("BD") == "BD"
    for bad in ["Z", "A,Q", ""]:
        with pytest.raises(ValueError, match="choose letters from ABCDEFGHIJ"):
            rx.parse_letters(bad)


@pytest.mark.parametrize("argv", [["--only", "A,Z"], ["--only", "K"], ["--json"]])
def test_cli_bad_flags_are_one_line_errors(capsys, argv):
    assert rx.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_cli_only_c_needs_no_model(capsys, monkeypatch):
    def no_model(*args, **kwargs):
        raise AssertionError("experiment C must not load a model")
    monkeypatch.setattr(rag, "load_minilm", no_model)
    assert rx.main(["--only", "c"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(TUTORIAL_C + "\n") and "skipped" not in out


def test_without_minilm_the_tfidf_parts_run_and_skips_are_named(capsys, monkeypatch):
    def no_model(*args, **kwargs):
        raise RuntimeError("no local copy of the model")
    monkeypatch.setattr(rag, "load_minilm", no_model)
    results = rx.run_experiments("A,B,G,H")
    out = capsys.readouterr().out
    assert set(results["A"]) == {"tfidf"} and results["A"]["tfidf"]["hit@1"] == 0.9
    assert "B" not in results and set(results["skipped"]) == {"B"}
    assert set(results["H"]) == {"tfidf", "bm25"}
    assert "minilm" not in results["G"]["lab"] and results["G"]["lab"]["bm25"]["hit@1"] > 0
    assert "tfidf   hit@1=0.90 recall@1=0.85 | hit@3=1.00 recall@3=1.00" in out
    assert ("skipped B: they measure MiniLM, and MiniLM could not be loaded "
            "(no local copy of the model)") in out


def test_plot_without_matplotlib_stops_before_any_experiment(monkeypatch, tmp_path, capsys):
    import sys
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setattr(rag, "Embedder", lambda *a, **k: pytest.fail("an experiment started"))
    assert rx.main(["--only", "A", "--plot", str(tmp_path / "plots")]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("error: matplotlib is not installed")
