"""The collection loader on real CISI and on small collections that hold the format's traps,
and the on-disk embedding cache with the real MiniLM model."""
import os

import numpy as np
import pytest

import rag_collection as rc
from rag_collection import EmbeddingCache, load_collection

CISI = rc.DEFAULT_COLLECTION


def write(folder, files: dict, newline="\n"):
    """Write {name: text} into folder (made if needed) and return the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_bytes(text.replace("\n", newline).encode("utf-8"))
    return folder


# A SMART collection with the traps: ids "001" vs "1", ".T " with a trailing space, fields over
# several lines, indented and space-padded lines, two .A fields, .X and .K blocks, an abstract
# that repeats its title (Cranfield), a document with no title, and a query file whose ids
# (1, 4, 9, 12) are not the numbers the relevance file uses (positions 1, 2, 3).
TOY_DOCS = """\
.I 001
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
.I 005
.T
Tidal power
.W
Tidal power uses the rise and fall of the sea.
"""
TOY_QUERIES = """\
.I 001
.W
How do solar panels
make electricity?
.I 004
.W
Which machines use the wind?
.I 009
.T
Storage
.W
How is energy stored?
.I 012
.W
A query nobody judged.
"""
# Cranfield style: "query doc grade", queries numbered by position, -1 = of no interest,
# and one document (99) that is not in the collection.
TOY_QRELS = """\
1 1 2
1 3 1
2 2 4
2 5 -1
3 4 1
3 1 3
3 99 2
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
    assert col["files"] == {"documents": ["CISI.ALL"], "queries": ["CISI.QRY"],
                            "relevance": ["CISI.REL"]}
    assert col["notes"] == []
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


# ---------------------------------------------------------------------------
# A SMART collection with the traps
# ---------------------------------------------------------------------------
def test_toy_documents_join_multiline_fields_and_keep_only_title_and_abstract(toy):
    docs = {d["doc_id"]: d for d in load_collection(toy)["docs"]}
    assert list(docs) == ["1", "2", "3", "4", "5"]                  # "001" -> "1"
    assert docs["1"] == {"doc_id": "1", "title": "Solar panels on roofs",
                         "text": "Solar panels on roofs\nSolar panels turn light into "
                                 "electricity. They work best facing south."}
    assert docs["2"]["text"] == "Wind turbines\nTheir blades turn moving air into electricity."
    # Cranfield style: the abstract starts with the title, so the title is not added again
    assert docs["3"]["text"] == "heat pumps . they move heat from cold air into warm rooms ."
    assert docs["4"] == {"doc_id": "4", "title": "",
                         "text": "Batteries store electricity for the night."}


def test_toy_relevance_numbered_by_position_is_mapped_to_query_ids(toy):
    col = load_collection(toy)
    assert [q["qid"] for q in col["queries"]] == ["1", "4", "9", "12"]
    assert col["queries"][0]["text"] == "How do solar panels make electricity?"
    assert col["queries"][2] == {"qid": "9", "text": "How is energy stored?", "title": "Storage"}
    assert col["qrels"] == {"1": {"1": 2, "3": 1}, "4": {"2": 4}, "9": {"4": 1, "1": 3}}
    assert col["counts"] == {"docs": 5, "queries": 4, "judged_queries": 3, "pairs": 5}
    notes = " | ".join(col["notes"])
    assert "dropped 1 judgements with grade <= 0" in notes
    assert "numbers queries by position" in notes
    assert "dropped 1 judgements of documents that are not in TOY.ALL" in notes


def test_relevance_with_matching_ids_is_not_renumbered(tmp_path):
    folder = write(tmp_path, {"TOY.ALL": TOY_DOCS, "TOY.QRY": TOY_QUERIES,
                              "TOY.REL": "1 1 1\n4 2 1\n12 5 1\n"})
    col = load_collection(folder)
    assert col["qrels"] == {"1": {"1": 1}, "4": {"2": 1}, "12": {"5": 1}}
    assert not any("position" in n for n in col["notes"])


@pytest.mark.parametrize("rel, expected", [
    # CISI and CACM: "q d 0 0.000000": the constant columns carry no grade
    ("     1     2\t0\t0.000000\n     1     3\t0\t0.000000\n     4     2\t0\t0.000000\n",
     {"1": {"2": 1, "3": 1}, "4": {"2": 1}}),
    # MED / TREC: "q 0 d grade", a 0 grade is judged not relevant
    ("1 0 2 1\n1 0 3 0\n4 0 5 2\n", {"1": {"2": 1}, "4": {"5": 2}}),
    # decimal grades in the last column
    ("1 2 0 0.5\n1 3 0 1.0\n4 5 0 0.25\n", {"1": {"2": 0.5, "3": 1}, "4": {"5": 0.25}}),
    # two columns, a repeated pair, ids with leading zeros
    ("01 002\n01 0003\n01 2\n04 5\n", {"1": {"2": 1, "3": 1}, "4": {"5": 1}}),
])
def test_relevance_layouts_with_two_to_four_columns(tmp_path, rel, expected):
    folder = write(tmp_path, {"TOY.ALL": TOY_DOCS, "TOY.QRY": TOY_QUERIES, "TOY.REL": rel})
    assert load_collection(folder)["qrels"] == expected


# ---------------------------------------------------------------------------
# Other collections' file names and layouts
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("names", [
    ("CISI.ALL", "CISI.QRY", "CISI.REL"), ("MED.ALL", "MED.QRY", "MED.REL"),
    ("cran.all.1400", "cran.qry", "cranqrel"), ("cacm.all", "query.text", "qrels.text"),
    ("ADI.ALL", "ADI.QRY", "ADI.REL"),
])
def test_classic_file_names_are_found(tmp_path, names):
    docs, queries, rel = names
    folder = write(tmp_path, {docs: TOY_DOCS, queries: TOY_QUERIES, rel: TOY_QRELS,
                              "CISI.BLN": "#q1= #and ('titles')\n", "common_words": "a\nthe\n"})
    col = load_collection(folder)
    assert col["files"] == {"documents": [docs], "queries": [queries], "relevance": [rel]}
    assert col["counts"]["pairs"] == 5


def test_npl_layout_with_slash_separators(tmp_path):
    folder = write(tmp_path, {
        "doc-text": "1\ncompact memories have flexible capacities\n   /\n2\n"
                    "a digital data storage system\nwith random access\n   /\n",
        "query-text": "1\nMEASUREMENT OF DIELECTRIC CONSTANT\n/\n2\nDATA STORAGE SYSTEMS\n/\n",
        "rlv-ass": "1\n    1\n   /\n2\n    1     2\n   /\n"})
    col = load_collection(folder)
    assert col["docs"][1] == {"doc_id": "2", "title": "",
                              "text": "a digital data storage system with random access"}
    assert col["queries"][1]["text"] == "DATA STORAGE SYSTEMS"
    assert col["qrels"] == {"1": {"1": 1}, "2": {"1": 1, "2": 1}}


def test_time_layout_with_star_headers(tmp_path):
    folder = write(tmp_path, {
        "TIME.ALL": "*TEXT 017 01/04/63 PAGE 020\n\nTHE ALLIES AFTER NASSAU\nIN DECEMBER .\n\n"
                    "*TEXT 020 01/04/63 PAGE 021\n\nTHE ROAD TO BRUSSELS .\n\n*STOP\n",
        "TIME.QUE": "*FIND    1\n\n KENNEDY AND THE ALLIES .\n\n*FIND    2\n\n BRUSSELS .\n\n*STOP\n",
        "TIME.REL": "  1  17 20\n\n  2  20\n\n"})
    col = load_collection(folder)
    assert [d["doc_id"] for d in col["docs"]] == ["17", "20"]
    assert col["docs"][0]["text"] == "THE ALLIES AFTER NASSAU IN DECEMBER ."
    assert col["queries"][0]["text"] == "KENNEDY AND THE ALLIES ."
    assert col["qrels"] == {"1": {"17": 1, "20": 1}, "2": {"20": 1}}


def test_lisa_layout_in_several_document_files(tmp_path):
    stars = "*" * 44
    folder = write(tmp_path, {
        "LISA0.001": f"Document  1\nTHE LIBRARY OF THE FUTURE\n\nAN ESSAY ON\nLIBRARIES.\n{stars}\n",
        "LISA0.501": f"Document  2\nONLINE CATALOGUES\n\nA SURVEY OF CATALOGUES.\n{stars}\n",
        "LISA.QUE": "1\nI AM INTERESTED IN THE FUTURE OF LIBRARIES. #\n2\nONLINE CATALOGUES. #\n",
        "LISA.REL": "Query 1\nRelevant Refs:\n1 2 -1\nQuery 2\nRelevant Refs:\n2 -1\n"})
    col = load_collection(folder)
    assert col["files"]["documents"] == ["LISA0.001", "LISA0.501"]
    assert col["docs"][0] == {"doc_id": "1", "title": "THE LIBRARY OF THE FUTURE",
                              "text": "THE LIBRARY OF THE FUTURE\nAN ESSAY ON LIBRARIES."}
    assert col["queries"][0]["text"] == "I AM INTERESTED IN THE FUTURE OF LIBRARIES."
    assert col["qrels"] == {"1": {"1": 1, "2": 1}, "2": {"2": 1}}


def test_a_document_id_repeated_across_parts_is_refused(tmp_path):
    stars = "*" * 44
    folder = write(tmp_path, {
        "LISA0.001": f"Document  1\nA\n\nfirst.\n{stars}\n",
        "LISA0.501": f"Document  1\nB\n\nsecond.\n{stars}\n",
        "LISA.QUE": "1\nA QUESTION. #\n", "LISA.REL": "Query 1\nRelevant Refs:\n1 -1\n"})
    with pytest.raises(ValueError, match="LISA0.501: record id 1 appears twice"):
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
    assert "no documents file" in message and "*.all" in message and "cran.all.*" in message


def test_missing_relevance_file_is_named(tmp_path):
    message = error_of(write(tmp_path, {"TOY.ALL": TOY_DOCS, "TOY.QRY": TOY_QUERIES}))
    assert "no relevance file" in message and "*.rel" in message and "qrels.text" in message


def test_two_collections_in_one_folder_are_refused(tmp_path):
    message = error_of(write(tmp_path, {"CISI.ALL": TOY_DOCS, "MED.ALL": TOY_DOCS,
                                        "TOY.QRY": TOY_QUERIES, "TOY.REL": TOY_QRELS}))
    assert "more than one documents file" in message and "CISI.ALL, MED.ALL" in message


@pytest.mark.parametrize("docs, expected", [
    ("just some text\nwith no markers\n", "no records in"),
    (".I\n.W\nno id here\n", "'.I' without a record id"),
    (".I 1\n.W\none\n.I 01\n.W\ntwo\n", "record id 1 appears twice"),
])
def test_unreadable_documents_file(tmp_path, docs, expected):
    folder = write(tmp_path, {"TOY.ALL": docs, "TOY.QRY": TOY_QUERIES, "TOY.REL": TOY_QRELS})
    assert expected in error_of(folder)


@pytest.mark.parametrize("rel, expected", [
    ("1 1 1\n77 2 1\n", "TOY.REL judges queries that TOY.QRY does not have"),
    ("1 501 1\n4 502 1\n", "TOY.REL names no document of TOY.ALL"),
    ("1 1 high\n1 2 low\n", "grade 'high' is not a number"),
    ("", "is empty"),
])
def test_relevance_file_that_does_not_fit(tmp_path, rel, expected):
    folder = write(tmp_path, {"TOY.ALL": TOY_DOCS, "TOY.QRY": TOY_QUERIES, "TOY.REL": rel})
    assert expected in error_of(folder)


def test_cli_prints_counts_and_errors_in_one_line(toy, tmp_path, capsys):
    assert rc.main([str(toy)]) == 0
    out = capsys.readouterr().out
    assert "documents            5   (TOY.ALL)" in out
    assert "judgement pairs      5" in out
    assert "note: TOY.REL numbers queries by position" in out
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
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 2 and all(name.endswith(".npz") for name in files)   # no .tmp left
    assert any(name.startswith("sentence-transformers-all-MiniLM-L6-v2-") for name in files)
    with np.load(cache.path_for(minilm), allow_pickle=False) as saved:
        assert saved["keys"].shape == (3,) and saved["vectors"].shape == (3, 384)
        assert saved["keys"][0] == rc.text_key(TEXTS[0])


def test_unreadable_cache_file_is_rebuilt(minilm, tmp_path, capsys):
    cache = EmbeddingCache(tmp_path)
    tmp_path.joinpath(cache.path_for(minilm).name).write_bytes(b"not a numpy file")
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
