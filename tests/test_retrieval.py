"""ragkit/retrieval.py beyond what test_experiments checks against rank_bm25, and
rageval/score_matrices.py: Rocchio feedback and neighbour smoothing against NumPy written out by
hand, and BM25 weights from counted words."""
import numpy as np
import pytest
from scipy import sparse

from rageval import ir_scores, score_matrices
from ragkit import retrieval, support

DOCS = np.array([[1.0, 0.0, 0.0], [0.6, 0.8, 0.0], [0.0, 0.6, 0.8], [0.0, 0.0, 1.0]])
QUERY = np.array([[1.0, 0.0, 0.0]])


def test_rocchio_by_hand_on_dense_vectors():
    scores = QUERY @ DOCS.T                                   # ranks docs 0, 1, then 2 and 3
    moved = score_matrices.rocchio(QUERY, DOCS, scores, a=1.0, b=0.5, m=2)
    by_hand = QUERY[0] + 0.5 * (DOCS[0] + DOCS[1]) / 2        # [1.4, 0.2, 0]
    np.testing.assert_allclose(moved[0], by_hand / np.linalg.norm(by_hand))
    # b = 0 leaves the query where it was; a larger m reaches further down the ranking.
    np.testing.assert_allclose(score_matrices.rocchio(QUERY, DOCS, scores, b=0.0), QUERY)
    far = score_matrices.rocchio(QUERY, DOCS, scores, a=1.0, b=1.0, m=4)
    assert far[0, 2] > moved[0, 2] == 0.0


def test_rocchio_on_sparse_rows_equals_dense():
    scores = QUERY @ DOCS.T
    dense = score_matrices.rocchio(QUERY, DOCS, scores, a=2.0, b=1.0, m=3)
    moved = score_matrices.rocchio(sparse.csr_matrix(QUERY), sparse.csr_matrix(DOCS), scores, 2.0, 1.0, 3)
    assert sparse.issparse(moved)
    np.testing.assert_allclose(moved.toarray(), dense)
    # Only b / a matters once the length is normalised away.
    np.testing.assert_allclose(score_matrices.rocchio(QUERY, DOCS, scores, 1.0, 0.5, 3), dense)


@pytest.mark.parametrize("a, b, m", [(-1, 1, 3), (1, -0.5, 3), (1, 1, 0)])
def test_rocchio_refuses_negative_weights_and_no_feedback_documents(a, b, m):
    with pytest.raises(ValueError, match="Rocchio needs a >= 0, b >= 0 and m >= 1"):
        score_matrices.rocchio(QUERY, DOCS, QUERY @ DOCS.T, a, b, m)


def test_top_rows_averages_each_rows_best_and_keeps_ties_in_order():
    pick = score_matrices.top_rows(np.array([[0.1, 0.9, 0.9, 0.3]]), 2)
    np.testing.assert_allclose(pick.toarray(), [[0, 0.5, 0.5, 0]])
    assert score_matrices.top_rows(np.array([[1.0, 2.0]]), 5).toarray().tolist() == [[0.5, 0.5]]   # m > docs


def test_neighbour_smoothing_by_hand_leaves_a_document_out_of_its_own_neighbours():
    smoothed = score_matrices.neighbour_smoothed(DOCS, g=0.5, neighbours=1)
    # doc 0's nearest other document is doc 1 (cosine 0.6); doc 3's is doc 2 (0.8).
    for d, nearest in [(0, 1), (3, 2)]:
        by_hand = DOCS[d] + 0.5 * DOCS[nearest]
        np.testing.assert_allclose(smoothed[d], by_hand / np.linalg.norm(by_hand))
    np.testing.assert_allclose(score_matrices.neighbour_smoothed(DOCS, g=0.0), DOCS)
    with pytest.raises(ValueError, match="need g >= 0 and neighbours >= 1"):
        score_matrices.neighbour_smoothed(DOCS, g=-1)


def test_bm25_weights_from_counts_equal_bm25_matrix_for_every_k1_and_b():
    from sklearn.feature_extraction.text import CountVectorizer
    texts = ["library catalogues and library rules", "indexing journals", "rules of indexing"]
    counts = CountVectorizer(analyzer=retrieval.word_analyzer()).fit_transform(texts)
    for k1, b in [(0.9, 0.3), (1.5, 0.75), (2.0, 1.0)]:
        _, weights = retrieval.bm25_matrix(texts, k1=k1, b=b)
        np.testing.assert_allclose(retrieval.bm25_weights(counts, k1, b).toarray(), weights.toarray())
    with pytest.raises(ValueError, match="BM25 needs k1 >= 0 and 0 <= b <= 1"):
        retrieval.bm25_weights(counts, 1.5, 1.5)


def test_stemming_each_distinct_word_once_gives_snowballs_stems():
    import snowballstemmer
    text = "Retrieving retrieval systems; libraries, librarians and library catalogues"
    words = retrieval.word_analyzer()(text)
    assert ir_scores.stemmed_analyzer()(text) == snowballstemmer.stemmer("english").stemWords(words)


def test_split_sentences_keeps_dotted_names_whole():
    assert support.split_sentences("Go to id.kestrelwood.example. Then sign in! Done?") == [
        "Go to id.kestrelwood.example.", "Then sign in!", "Done?"]
