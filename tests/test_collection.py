"""rageval/ir_collection.py on real CISI and on small collections that hold the format's traps, grade
readings, ragkit/folder_index.py's embedding model with the real MiniLM, and rageval/ir_scores.py's
cross-validated evaluation (by hand on a tiny collection, then on CISI)."""
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import CISI

import rag_experiments as rx
import rag_from_scratch as rag
from rageval import ir_collection as ic
from rageval import ir_scores as rc
from rageval.embedding_cache import EmbeddingCache, text_key
from rageval.ir_collection import load_collection
from ragkit import support
from ragkit.folder_index import CACHE_DIR


def write(folder, files: dict, newline="\n"):
    """Write {name: text} into folder (made if needed) and return the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_bytes(text.replace("\n", newline).encode("utf-8"))
    return folder


# A SMART collection with CISI's traps: ".T " with a trailing space, fields over several lines,
# indented and space-padded lines, two .A fields, .X and .K blocks, an abstract that repeats its
# title, a document with no title, and query ids (1, 4, 9, 12) that are not 1, 2, 3.
TOY_DOCS = """\
.I 1
.T 
Solar panels   
on roofs
.A
Smith, J.
.A
Jones, K.
.W
   Solar panels turn light into electricity.   
They work best facing south.
.X
1\t5\t1
3\t1\t1
.I 2
.T
Wind turbines
.W
Their blades turn moving air into electricity.
.K
energy, wind
.I 3
.T
heat pumps .
.W
heat pumps .
they move heat from cold air into warm rooms .
.I 4
.W
Batteries store electricity for the night.
.I 5
.T
Tidal power
.W
Tidal power uses the rise and fall of the sea.
"""
TOY_QUERIES = """\
.I 1
.W
How do solar panels
make electricity?
.I 4
.W
Which machines use the wind?
.I 9
.T
Storage
.W
How is energy stored?
.I 12
.W
A query nobody judged.
"""
# Graded: "query doc grade", read as "higher is more relevant", a grade -1 (not relevant),
# and one document (99) that is not in the collection.
TOY_QRELS = """\
1 1 2
1 3 1
4 2 4
4 5 -1
9 4 1
9 1 3
9 99 2
"""


@pytest.fixture()
def toy(tmp_path):
    return write(tmp_path / "toy", {"TOY.ALL": TOY_DOCS, "TOY.QRY": TOY_QUERIES,
                                    "TOY.REL": TOY_QRELS}, newline="\r\n")


# ---------------------------------------------------------------------------
# Real CISI
# ---------------------------------------------------------------------------
def test_the_shipped_cisi_files_are_the_ones_its_readme_names():
    import hashlib
    import re
    readme = (CISI / "README.md").read_text(encoding="utf-8")
    named = {name: (int(size.replace(",", "")), digest) for name, size, digest in
             re.findall(r"^\| (CISI\.\w+) \|[^|]*\| ([\d,]+) \| `([0-9a-f]{64})` \|$", readme, re.M)}
    assert sorted(named) == ["CISI.ALL", "CISI.BLN", "CISI.QRY", "CISI.REL"]
    for name, (size, digest) in named.items():
        data = (CISI / name).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (size, digest), name


def test_cisi_counts_documents_queries_judged_queries_and_pairs():
    col = load_collection(CISI)
    assert col["counts"] == {"docs": 1460, "queries": 112, "judged_queries": 76, "pairs": 3114}
    assert len(col["docs"]) == 1460 and len(col["queries"]) == 112 and len(col["qrels"]) == 76
    assert col["files"] == {"documents": "CISI.ALL", "queries": "CISI.QRY",
                            "relevance": "CISI.REL"}
    # The "1,458 of 1,460" a first --embed run encodes: two abstracts are printed twice.
    assert col["notes"] == ["2 documents repeat an earlier document's text word for word "
                            "(1440 = 234, 1447 = 1084): 1,458 distinct texts, so a repeat gets "
                            "the same vector and score"]
    text = {d["doc_id"]: d["text"] for d in col["docs"]}
    assert text["1440"] == text["234"] and text["1447"] == text["1084"]
    assert len({d["doc_id"] for d in col["docs"]}) == 1460
    assert all(d["text"] for d in col["docs"])


def test_cisi_text_is_title_plus_abstract_without_authors_or_cross_references():
    docs = {d["doc_id"]: d for d in load_collection(CISI)["docs"]}
    first = docs["1"]
    assert first["title"] == "18 Editions of the Dewey Decimal Classifications"
    assert first["text"].startswith("18 Editions of the Dewey Decimal Classifications\n"
                                    "The present study is a history of the DEWEY Decimal "
                                    "Classification. The first edition")
    assert first["text"].endswith("librarianship in this country and abroad.")
    assert "Comaromi" not in first["text"] and "1004" not in first["text"]
    # Document 321 also has .K keywords and .C codes; they are not part of the text.
    assert docs["321"]["text"].endswith("promises considerable cost advantages.")


def test_cisi_queries_and_qrels_line_up():
    col = load_collection(CISI)
    queries = {q["qid"]: q for q in col["queries"]}
    assert queries["1"]["text"].startswith("What problems and concerns are there in making up "
                                           "descriptive titles?")
    assert queries["58"]["title"] == "Directions in Library Networking"
    assert queries["58"]["text"].startswith("Bibliographic control before and after MARC")
    assert set(col["qrels"]) <= set(queries)
    assert list(col["qrels"]["1"])[:5] == ["28", "35", "38", "42", "43"]
    assert len(col["qrels"]["1"]) == 46
    assert {g for grades in col["qrels"].values() for g in grades.values()} == {1}
    assert col["grades"] == "binary"


# ---------------------------------------------------------------------------
# A SMART collection with the traps
# ---------------------------------------------------------------------------
def test_toy_documents_join_multiline_fields_and_keep_only_title_and_abstract(toy):
    docs = {d["doc_id"]: d for d in load_collection(toy)["docs"]}
    assert list(docs) == ["1", "2", "3", "4", "5"]
    assert docs["1"] == {"doc_id": "1", "title": "Solar panels on roofs",
                         "text": "Solar panels on roofs\nSolar panels turn light into "
                                 "electricity. They work best facing south."}
    assert docs["2"]["text"] == "Wind turbines\nTheir blades turn moving air into electricity."
    # As in 12 CISI documents, the abstract starts with the title: it is not added again
    assert docs["3"]["text"] == "heat pumps . they move heat from cold air into warm rooms ."
    assert docs["4"] == {"doc_id": "4", "title": "",
                         "text": "Batteries store electricity for the night."}


def test_toy_relevance_grades_become_gains_with_notes_on_what_was_dropped(toy):
    col = load_collection(toy)
    assert [q["qid"] for q in col["queries"]] == ["1", "4", "9", "12"]
    assert col["queries"][0]["text"] == "How do solar panels make electricity?"
    assert col["queries"][2] == {"qid": "9", "text": "How is energy stored?", "title": "Storage"}
    assert col["qrels"] == {"1": {"1": 2, "3": 1}, "4": {"2": 4}, "9": {"4": 1, "1": 3}}
    assert col["counts"] == {"docs": 5, "queries": 4, "judged_queries": 3, "pairs": 5}
    notes = " | ".join(col["notes"])
    assert "dropped 1 judgements that the higher reading counts as not relevant" in notes
    assert col["grades"] == "higher"
    assert "dropped 1 judgements of documents that are not in TOY.ALL" in notes


@pytest.mark.parametrize("reading, expected", [
    ("higher", {"1": {"1": 2, "3": 1}, "4": {"2": 4}, "9": {"4": 1, "1": 3}}),
    ("binary", {"1": {"1": 1, "3": 1}, "4": {"2": 1}, "9": {"4": 1, "1": 1}}),
])
def test_the_grade_reading_can_be_named(toy, reading, expected):
    col = load_collection(toy, grades=reading)
    assert col["grades"] == reading and col["qrels"] == expected


def test_grade_readings_by_hand_and_an_unknown_reading():
    assert [ic.gain(g, "higher") for g in [2, 0.5, 0, -1]] == [2, 0.5, 0, 0]
    assert [ic.gain(g, "binary") for g in [2, 0.5, 0, -1]] == [1, 1, 0, 0]
    assert ic.grade_reading([1, 1]) == "binary"
    assert ic.grade_reading([1, 2]) == "higher"
    with pytest.raises(ValueError, match="unknown grade reading 'upside-down': choose auto"):
        ic.grade_reading([1], "upside-down")


@pytest.mark.parametrize("rel, expected", [
    # CISI and CACM: "q d 0 0.000000": the constant columns carry no grade
    ("     1     2\t0\t0.000000\n     1     3\t0\t0.000000\n     4     2\t0\t0.000000\n",
     {"1": {"2": 1, "3": 1}, "4": {"2": 1}}),
    # decimal grades in the last column
    ("1 2 0 0.5\n1 3 0 1.0\n4 5 0 0.25\n", {"1": {"2": 0.5, "3": 1}, "4": {"5": 0.25}}),
    # two columns, a repeated pair
    ("1 2\n1 3\n1 2\n4 5\n", {"1": {"2": 1, "3": 1}, "4": {"5": 1}}),
])
def test_relevance_layouts_with_two_to_four_columns(tmp_path, rel, expected):
    folder = write(tmp_path, {"TOY.ALL": TOY_DOCS, "TOY.QRY": TOY_QUERIES, "TOY.REL": rel})
    assert load_collection(folder)["qrels"] == expected


# ---------------------------------------------------------------------------
# File names and other layouts
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("names", [("CISI.ALL", "CISI.QRY", "CISI.REL"),
                                   ("toy.all", "toy.qry", "toy.rel")])
def test_the_files_are_found_in_any_case_and_others_are_ignored(tmp_path, names):
    docs, queries, rel = names
    folder = write(tmp_path, {docs: TOY_DOCS, queries: TOY_QUERIES, rel: TOY_QRELS,
                              "CISI.BLN": "#q1= #and ('titles')\n", "common_words": "a\nthe\n"})
    col = load_collection(folder)
    assert col["files"] == {"documents": docs, "queries": queries, "relevance": rel}
    assert col["counts"]["pairs"] == 5


def test_a_layout_other_than_smart_is_refused_in_one_line(tmp_path):
    """TIME, NPL and LISA use other layouts; none ships with the kit, so none is guessed at."""
    folder = write(tmp_path, {
        "TIME.ALL": "*TEXT 017 01/04/63 PAGE 020\n\nTHE ALLIES AFTER NASSAU\n\n*STOP\n",
        "TIME.QRY": "*FIND    1\n\n KENNEDY AND THE ALLIES .\n\n*STOP\n",
        "TIME.REL": "  1  17 20\n\n  2  20\n\n"})
    with pytest.raises(ValueError, match="no records in .*TIME.ALL: looked for SMART '.I <id>' lines"):
        load_collection(folder)


def test_a_document_id_repeated_in_a_file_is_refused(tmp_path):
    folder = write(tmp_path, {
        "TOY.ALL": ".I 1\n.W\nfirst.\n.I 1\n.W\nsecond.\n",
        "TOY.QRY": ".I 1\n.W\nA question.\n", "TOY.REL": "1 1\n"})
    with pytest.raises(ValueError, match="TOY.ALL: record id 1 appears twice"):
        load_collection(folder)


# ---------------------------------------------------------------------------
# Errors: one clear line that names what was looked for
# ---------------------------------------------------------------------------
def error_of(folder) -> str:
    with pytest.raises(ValueError) as info:
        load_collection(folder)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_missing_folder_is_a_clear_error(tmp_path):
    assert "collection folder not found" in error_of(tmp_path / "nope")


def test_folder_without_collection_files_names_the_patterns(tmp_path):
    message = error_of(write(tmp_path, {"notes.txt": "hello\n"}))
    assert "no documents file" in message and "*.all" in message


def test_missing_relevance_file_is_named(tmp_path):
    message = error_of(write(tmp_path, {"TOY.ALL": TOY_DOCS, "TOY.QRY": TOY_QUERIES}))
    assert "no relevance file" in message and "*.rel" in message


def test_two_collections_in_one_folder_are_refused(tmp_path):
    message = error_of(write(tmp_path, {"CISI.ALL": TOY_DOCS, "MED.ALL": TOY_DOCS,
                                        "TOY.QRY": TOY_QUERIES, "TOY.REL": TOY_QRELS}))
    assert "more than one documents file" in message and "CISI.ALL, MED.ALL" in message


@pytest.mark.parametrize("docs, expected", [
    ("just some text\nwith no markers\n", "no records in"),
    (".I\n.W\nno id here\n", "'.I' without a record id"),
])
def test_unreadable_documents_file(tmp_path, docs, expected):
    folder = write(tmp_path, {"TOY.ALL": docs, "TOY.QRY": TOY_QUERIES, "TOY.REL": TOY_QRELS})
    assert expected in error_of(folder)


@pytest.mark.parametrize("rel, expected", [
    ("1 1 1\n77 2 1\n", "TOY.REL judges queries that TOY.QRY does not have"),
    ("1 501 1\n4 502 1\n", "TOY.REL names no document of TOY.ALL"),
    ("1 1 high\n1 2 low\n", "grade 'high' is not a number"),
    ("", "is empty"),
    ("1 1 nan\n1 2 1\n", "TOY.REL line 1: grade 'nan' is not a finite number"),
    ("1 1 1\n1 2 inf\n", "TOY.REL line 2: grade 'inf' is not a finite number"),
])
def test_relevance_file_that_does_not_fit(tmp_path, rel, expected):
    folder = write(tmp_path, {"TOY.ALL": TOY_DOCS, "TOY.QRY": TOY_QUERIES, "TOY.REL": rel})
    assert expected in error_of(folder)


def test_cli_prints_counts_and_errors_in_one_line(toy, tmp_path, capsys):
    assert rc.main([str(toy)]) == 0
    out = capsys.readouterr().out
    assert "documents            5   (TOY.ALL)" in out
    assert "judgement pairs      5" in out
    assert "grades          higher: higher grades are more relevant, gain = grade" in out
    assert "note: dropped 1 judgements of documents that are not in TOY.ALL" in out
    assert rc.main([str(tmp_path / "missing")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: collection folder not found") and err.count("\n") == 1


# ---------------------------------------------------------------------------
# EmbeddingCache, with the real model
# ---------------------------------------------------------------------------
class Counting:
    """Wraps a real Embedder and counts the texts it is asked to encode."""

    def __init__(self, embedder, model_name=None):
        self.inner, self.calls, self.texts = embedder, 0, 0
        self.backend = embedder.backend
        self.model_name = model_name or embedder.model_name

    def encode(self, texts):
        self.calls += 1
        self.texts += len(texts)
        return self.inner.encode(texts)


TEXTS = ["Solar panels turn light into electricity.", "Wind turbines turn moving air.",
         "Heat pumps move heat indoors.", "Solar panels turn light into electricity."]


def test_second_run_reads_vectors_from_disk_instead_of_encoding(minilm, tmp_path):
    first = Counting(minilm)
    vectors = EmbeddingCache(tmp_path).encode(first, TEXTS)
    assert first.texts == 3                                    # the repeated text once
    assert vectors.shape == (4, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(vectors, minilm.encode(TEXTS), atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)

    encoded_before = minilm.texts_encoded
    second, cache = Counting(minilm), EmbeddingCache(tmp_path)   # a new run: nothing in memory
    again = cache.encode(second, TEXTS)
    assert second.calls == 0 and minilm.texts_encoded == encoded_before
    assert (cache.hits, cache.misses) == (4, 0)
    np.testing.assert_array_equal(again, vectors)


def test_only_new_texts_are_encoded_and_order_is_kept(minilm, tmp_path):
    EmbeddingCache(tmp_path).encode(Counting(minilm), TEXTS[:2])
    counter = Counting(minilm)
    texts = ["Tidal power uses the sea.", TEXTS[1], TEXTS[0]]
    vectors = EmbeddingCache(tmp_path).encode(counter, texts)
    assert counter.texts == 1
    np.testing.assert_allclose(vectors, minilm.encode(texts), atol=1e-6)


def test_cache_file_is_per_model_written_atomically_and_loads_without_pickle(minilm, tmp_path):
    cache = EmbeddingCache(tmp_path)
    cache.encode(Counting(minilm), TEXTS)
    other = Counting(minilm, model_name="my-org/another-model")
    cache.encode(other, TEXTS)
    assert other.texts == 3                                    # another model, another file
    files = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".rag_from_scratch"))
    assert len(files) == 2 and all(name.endswith(".npz") for name in files)   # no .partial left
    assert (tmp_path / ".rag_from_scratch").is_file()                        # the kit's mark
    assert any(name.startswith("sentence-transformers-all-MiniLM-L6-v2-") for name in files)
    with np.load(cache.path_for(minilm), allow_pickle=False) as saved:
        assert saved["keys"].shape == (3,) and saved["vectors"].shape == (3, 384)
        assert saved["keys"][0] == text_key(TEXTS[0])


def test_unreadable_cache_file_is_rebuilt(minilm, tmp_path, capsys):
    cache = EmbeddingCache(tmp_path)
    support.claim_folder(tmp_path, "--cache")                     # our cache folder ...
    tmp_path.joinpath(cache.path_for(minilm).name).write_bytes(b"not a numpy file")   # ... damaged
    counter = Counting(minilm)
    vectors = cache.encode(counter, TEXTS[:2])
    assert counter.texts == 2 and vectors.shape == (2, 384)
    assert "ignoring unreadable cache" in capsys.readouterr().err
    assert EmbeddingCache(tmp_path).encode(Counting(minilm), TEXTS[:2]).shape == (2, 384)


def test_tfidf_is_not_cached(tfidf_setup, tmp_path):
    embedder, _ = tfidf_setup
    with pytest.raises(ValueError, match="not cached"):
        EmbeddingCache(tmp_path).encode(embedder, TEXTS)
    assert not os.listdir(tmp_path)


# ---------------------------------------------------------------------------
# Cross-validation, by hand
# ---------------------------------------------------------------------------
def test_folds_are_a_seeded_shuffle_of_near_equal_size():
    fold = rc.fold_of_each_query(76, 5, 0)
    assert sorted(np.bincount(fold)) == [15, 15, 15, 15, 16]
    np.testing.assert_array_equal(fold, np.random.default_rng(0).permutation(76) % 5)
    assert not np.array_equal(fold, rc.fold_of_each_query(76, 5, 1))
    with pytest.raises(ValueError, match="needs 2 to 3 folds for 3 judged queries"):
        rc.fold_of_each_query(3, 5, 0)


def test_cross_validation_chooses_on_the_other_folds_only():
    rng = np.random.default_rng(7)
    grid = {f"setting {i}": rng.random((20, 4)) for i in range(6)}
    held_out, chosen = rc.cross_validate(grid, folds=4, seed=3)
    fold = rc.fold_of_each_query(20, 4, 3)
    for f in range(4):                     # brute force: best mean nDCG with fold f left out
        train = fold != f
        best = max(grid, key=lambda name: grid[name][train, 3].mean())
        assert chosen[f] == best
        np.testing.assert_array_equal(held_out[fold == f], grid[best][fold == f])
    # A setting that is best only on the queries it would be scored on is never chosen.
    lucky = {"steady": np.full((4, 4), 0.5), "lucky": np.array([[1.0] * 4, [0.0] * 4] * 2)}
    held_out, chosen = rc.cross_validate(lucky, folds=2, seed=0)
    fold = rc.fold_of_each_query(4, 2, 0)
    assert held_out[:, 3].mean() <= 0.5 and len(chosen) == 2


# ---------------------------------------------------------------------------
# Scoring methods: a tiny collection written here, then CISI
# ---------------------------------------------------------------------------
TINY = {
    "docs": [{"doc_id": "1", "title": "Cataloguing", "text": "Cataloguing rules for library books"},
             {"doc_id": "2", "title": "Indexing", "text": "Automatic indexing of journal articles"},
             {"doc_id": "3", "title": "Citations", "text": "Citation analysis of science journals"},
             {"doc_id": "4", "title": "Budgets", "text": "University library budgets and staff"}],
    "queries": [{"qid": "1", "text": "rules for cataloguing books"},
                {"qid": "2", "text": "citation analysis. In journals?"},
                {"qid": "3", "text": "a query nobody judged"}],
    "qrels": {"1": {"1": 1}, "2": {"3": 1, "2": 1}},
}
FIXED = ["tfidf", "tfidf (sublinear tf)", "bm25", "bm25 (stemmed)", "minilm",
         "0.5 tfidf + 0.5 minilm", "rrf(tfidf, minilm)", "rrf(bm25 stemmed, minilm)"]
PEERS = ["peer: scikit-learn tfidf", "peer: rank_bm25", "peer: sentence-transformers minilm",
         "peer: 0.5 tfidf + 0.5 minilm"]
CV = ["cv: tfidf + rocchio", "cv: minilm + rocchio", "cv: bm25 stemmed",
      "cv: bm25 stemmed + rocchio", "cv: w bm25 stemmed + (1-w) minilm",
      "cv: rrf(bm25 stemmed, minilm)", "cv: fused feedback", "cv: best method, chosen in each fold"]


@pytest.fixture(scope="module")
def tiny_results(minilm):
    return rc.evaluate_collection(TINY, minilm, cache=None, k=2, folds=2)


@pytest.mark.slow      # a second or more
def test_evaluate_collection_scores_a_tiny_collection(tiny_results):
    assert list(tiny_results) == FIXED + PEERS + CV + ["in-sample best (curiosity)"]
    bm25 = tiny_results["bm25"]
    # q1 finds doc 1 first; q2 finds doc 3 first, doc 2 shares no word: recall 1/2.
    assert (bm25["hit@1"], bm25["recall@2"], bm25["mrr@2"]) == (1.0, 0.75, 1.0)
    assert bm25["ndcg@2"] == pytest.approx((1 + 1 / (1 + 1 / math.log2(3))) / 2)
    for r in tiny_results.values():
        assert 0 <= r["ndcg@2"] <= 1 and r["seconds"] >= 0 and len(r["per_query_ndcg"]) == 2
        lo, hi = r["ndcg@2_ci"]
        assert lo <= r["ndcg@2"] <= hi
    cv = tiny_results["cv: fused feedback"]
    assert (cv["folds"], cv["seed"], cv["settings"], len(cv["chosen"])) == (2, 0, 576, 2)
    assert tiny_results["cv: bm25 stemmed"]["settings"] == 16
    best = tiny_results["in-sample best (curiosity)"]
    assert best["kind"] == "in-sample" and best["ndcg@2"] >= cv["ndcg@2"]


def test_the_grid_lists_every_setting_once_and_a_missing_input_drops_its_methods(minilm):
    inputs = rc.score_inputs(TINY, minilm)
    grid = rc.settings(inputs)
    per_method = {}
    for method, setting, _ in grid:
        per_method.setdefault(method, []).append(setting)
    assert {m: len(s) for m, s in per_method.items()} == {
        "tfidf + rocchio": 13, "minilm + rocchio": 13, "bm25 stemmed": 16,
        "bm25 stemmed + rocchio": 192, "w bm25 stemmed + (1-w) minilm": 176,
        "rrf(bm25 stemmed, minilm)": 6, "fused feedback": 576}
    assert len(grid) == 992 == len({(m, s) for m, s, _ in grid})
    del inputs["minilm"]
    assert [m for m, _, _ in rc.settings(inputs)] == (["tfidf + rocchio"] * 13 +
                                                      ["bm25 stemmed"] * 16 +
                                                      ["bm25 stemmed + rocchio"] * 192)


@pytest.mark.slow      # a second or more
def test_cv_row_is_the_mean_of_held_out_queries(tiny_results):
    # With 2 queries and 2 folds, each query is scored by the setting the other one chose.
    r = tiny_results["cv: bm25 stemmed"]
    assert r["ndcg@2"] == pytest.approx(np.mean(r["per_query_ndcg"]))


def test_evaluate_collection_without_snowballstemmer_leaves_out_the_stemmed_rows(monkeypatch, capsys):
    import sys
    monkeypatch.setitem(sys.modules, "snowballstemmer", None)       # import now fails
    results = rc.evaluate_collection(TINY, None, folds=2)
    assert list(results) == ["tfidf", "tfidf (sublinear tf)", "bm25", "peer: scikit-learn tfidf",
                             "peer: rank_bm25", "cv: tfidf + rocchio", "in-sample best (curiosity)"]
    assert ".venv/bin/pip install snowballstemmer" in capsys.readouterr().err


def test_evaluate_collection_without_judgements_is_an_error():
    with pytest.raises(ValueError, match="no query with relevance judgements"):
        rc.evaluate_collection({**TINY, "qrels": {}}, None)


def write_smart(folder: Path) -> Path:
    """TINY three times over as a SMART folder: 12 documents, 6 queries, 5 of them judged."""
    folder.mkdir()
    (folder / "TINY.ALL").write_text("".join(
        f".I {i}\n.T\n{d['title']}\n.A\nSmith, J.\n.W\n{d['text']}\n.X\n1\t1\t1\n"
        for i, d in enumerate(TINY["docs"] * 3, 1)))
    queries = [q["text"] for q in TINY["queries"]] * 2
    (folder / "TINY.QRY").write_text("".join(f".I {i}\n.W\n{q}\n" for i, q in enumerate(queries, 1)))
    (folder / "TINY.REL").write_text("".join(f"{q} {d} 0 0.000000\n" for q, d in
                                             [(1, 1), (2, 3), (2, 2), (3, 4), (4, 5), (5, 7)]))
    return folder


@pytest.mark.slow      # a second or more
def test_cli_collection_json_is_one_object(minilm, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(rag, "load_minilm", lambda *args, **kwargs: minilm.model)   # no reload
    folder = write_smart(tmp_path / "tiny")
    assert rx.main(["--collection", str(folder), "--json", "--cache", str(tmp_path / "cache")]) == 0
    data = json.loads(capsys.readouterr().out)
    # Equal documents tie and the first wins: q1 and q2 find theirs, the copies' queries do not.
    assert data["bm25"]["hit@1"] == 0.4
    assert set(data["minilm"]) == {"hit@1", "recall@10", "mrr@10", "ndcg@10", "ndcg@10_ci",
                                   "seconds", "kind"}
    cv = data["cv: fused feedback"]
    assert (cv["kind"], cv["folds"], cv["seed"], len(cv["chosen"])) == ("cv", 5, 0, 5)
    assert data["in-sample best (curiosity)"]["kind"] == "in-sample"
    assert list((tmp_path / "cache").glob("*.npz"))                # document vectors were cached


def test_cli_collection_errors_are_one_line(capsys, tmp_path):
    assert rx.main(["--collection", str(tmp_path / "missing")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: collection folder not found") and err.count("\n") == 1
    folder = write_smart(tmp_path / "tiny")
    assert rx.main(["--collection", str(folder), "--grades", "sideways"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: unknown grade reading 'sideways'") and err.count("\n") == 1


@pytest.mark.slow
def test_cisi_cross_validated_best_is_at_least_1_08_times_the_best_peer(minilm, capsys):
    # Document vectors are cached in .rag_cache/: the first run encodes 1,460 abstracts.
    results = rc.run_collection(str(CISI), cache_folder=CACHE_DIR, minilm=minilm)
    out = capsys.readouterr().out
    assert out.startswith("1,460 documents, 76 judged queries of 112, 3,114 relevance judgements\n"
                          "grades: binary (every listed pair is relevant, gain 1)")
    ndcg = {name: round(r["ndcg@10"], 3) for name, r in results.items()}
    # Our rows match or beat the libraries: scikit-learn TF-IDF, rank_bm25, MiniLM, their hybrid.
    assert {name: ndcg[name] for name in PEERS} == {
        "peer: scikit-learn tfidf": 0.316, "peer: rank_bm25": 0.242,
        "peer: sentence-transformers minilm": 0.419, "peer: 0.5 tfidf + 0.5 minilm": 0.431}
    assert ndcg["tfidf"] == 0.316 and ndcg["bm25"] == 0.366 and ndcg["bm25 (stemmed)"] == 0.419
    assert ndcg["minilm"] == 0.419 and ndcg["0.5 tfidf + 0.5 minilm"] == 0.431
    # Cross-validated (5 folds, seed 0): fused feedback is the best, 1.08x the best peer or more.
    assert ndcg["cv: fused feedback"] == 0.477 == ndcg["cv: best method, chosen in each fold"]
    assert ndcg["cv: w bm25 stemmed + (1-w) minilm"] == 0.453
    assert rc.best_ratio(results) == ("cv: fused feedback", "peer: 0.5 tfidf + 0.5 minilm",
                                      pytest.approx(0.477 / 0.431, abs=0.003))
    assert rc.best_ratio(results)[2] >= 1.08
    assert ndcg["in-sample best (curiosity)"] == 0.486          # chosen on the scored queries
    assert "5-fold cross-validation over queries (seed 0)" in out
    assert "best cross-validated (cv: fused feedback) / best peer (peer: 0.5 tfidf + 0.5 minilm): 1.11x" in out
    assert "holds across resamples" in out.splitlines()[-1]
