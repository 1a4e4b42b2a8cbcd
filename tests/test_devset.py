"""The development sets (data/devsets): their questions and facts; what the --docs path makes
of MkDocs' pages, as rageval/devset.py prints it; and how rageval/tuning.py chooses by leaving
one project out."""
import json
import re

import pytest

from rageval import devset, devsets, tuning
from ragkit import chunking, documents, generators, answering

FETCH = "the fetched development sets are missing: run `python -m rageval.downloads`"


@pytest.mark.parametrize("name", list(devsets.SETS))
def test_each_set_has_30_answerable_and_8_unanswerable_questions_and_its_pages_hold_the_facts(name):
    """Every fact matches a relevant page as the kit reads it (its chunks), so a fact the
    reader loses (markup it keeps, text it drops) fails here, not in a figure."""
    if name not in devsets.available():
        pytest.skip(FETCH)
    items = [json.loads(line) for line in devsets.questions(name).read_text().splitlines()]
    answerable = [q for q in items if q.get("answerable", True)]
    unanswerable = [q for q in items if q.get("answerable") is False]
    assert len(answerable) >= 30 and len(unanswerable) == 8 and len(items) == len(answerable) + 8
    assert all(set(q) == {"question", "answerable"} for q in unanswerable)
    chunks = chunking.document_chunks(documents.load_documents(devsets.pages(name)))
    read = {}
    for c in chunks:
        read[c["doc_id"]] = read.get(c["doc_id"], "") + "\n" + c["text"]
    for q in answerable:
        assert 1 <= len(q["answer"]) <= 3 and q["relevant"], q["question"]
        assert all(page in read for page in q["relevant"]), q["relevant"]
        for fact in q["answer"]:
            assert any(re.search(fact, documents.fact_text(read[page]), re.I)
                       for page in q["relevant"]), (q["question"], fact)


@pytest.mark.slow      # a second or more
def test_the_questions_are_not_the_pages_headings():
    """Users' words: no question repeats a heading of the page that answers it."""
    for name in devsets.available():
        chunks = chunking.document_chunks(documents.load_documents(devsets.pages(name)))
        headings = {c["title"].split(" > ")[-1].strip().lower() for c in chunks}
        for line in devsets.questions(name).read_text().splitlines():
            assert json.loads(line)["question"].strip(" ?").lower() not in headings


@pytest.mark.slow      # MiniLM builds of MkDocs' pages
def test_mkdocs_figures_as_devset_prints_them(capsys, monkeypatch, minilm):
    real = devset.CachedEmbedder                # the session's MiniLM, not a second load
    monkeypatch.setattr(devset, "CachedEmbedder", lambda backend: minilm if backend == "minilm" else real(backend))
    assert devset.main(["--sets", "mkdocs"]) == 0
    out = capsys.readouterr().out
    assert ("\n== mkdocs: 38 answerable and 8 unanswerable questions ==\n"
            "chunks: 463, median 79 words; 0 longer than the model reads, 11 ending in a colon, "
            "0 with markup left, 6 of ten words or fewer\n"
            "retrieval by file: hit@1 0.68  hit@5 1.00  mrr@5 0.83\n"
            "answer in context (every gold fact in the 8 passages): 0.95\n"
            "extractive: right 14, partial 7, wrong 9, refused 8 of 38 answerable; "
            "refused 4 of 8 unanswerable; 54 of 56 quotes found in the passages") in out


def test_artefacts_are_counted_in_prose_not_in_code():
    chunks = [{"text": "Set it:\n```html\n<div>{{ x }}</div>\n```", "title": "a.md", "doc_id": "a.md"},
              {"text": "Use <b>bold</b>, not `<i>`.", "title": "b.md", "doc_id": "b.md"}]
    counts = devset.artefact_counts(chunks, lambda text: True)
    assert counts["HTML tag or comment"] == 1 and counts["include or template directive"] == 0
    assert counts["ending in a colon"] == 0 and counts["code block on one line"] == 0


def test_a_verdict_needs_every_fact_early_and_only_relevant_citations():
    item = {"answerable": True, "answer": [re.compile("workers", re.I), re.compile("--jobs")],
            "relevant": {"usage.md"}}
    refusal = "I don't know."
    assert devset.verdict("Use --jobs 4 and more workers. [usage.md > Speed]", item, refusal) == "right"
    assert devset.verdict("Use --jobs 4 and more workers. [faq.md]", item, refusal) == "partial"
    assert devset.verdict("More workers help. [usage.md]", item, refusal) == "partial"
    assert devset.verdict(" ".join(["word"] * 50) + " --jobs workers [usage.md]", item, refusal) == "wrong"
    assert devset.verdict("I don't know.", item, refusal) == "refused (wrong)"
    assert devset.verdict("I don't know.", {"answerable": False}, refusal) == "refused (right)"
    assert devset.verdict("Yes. [usage.md]", {"answerable": False}, refusal) == "answered (wrong)"


# == rageval/tuning.py: choosing by leaving one project out ================================
def test_each_held_out_project_gets_the_setting_best_on_the_others_ties_to_the_first():
    table = {"a": {"p": 0.9, "q": 0.1, "r": 0.1}, "b": {"p": 0.1, "q": 0.5, "r": 0.5},
             "c": {"p": 0.5, "q": 0.5, "r": 0.2}}
    assert tuning.choose(table, ["p", "q", "r"]) == "c"           # means 0.37, 0.37, 0.40
    assert tuning.leave_one_out(table, ["p", "q", "r"]) == {
        "p": ("b", 0.1),          # q and r alone prefer b: p is scored with it, not with a
        "q": ("a", 0.1),          # p and r: a 0.5, b 0.3, c 0.35
        "r": ("a", 0.1)}          # p and q: a and c tie at 0.5; the first in the grid wins


def case(answerable: bool, rows: list[tuple[float, float, bool]], new_word: bool = False):
    """A tuning case: candidates with (meaning, words) features; True marks the one stating the
    fact. Its prompt holds them all in one passage, so the kit's quote check finds each."""
    texts = ["where the fact stands" if right else f"other fact number {i}" for i, (_, _, r) in
             enumerate(rows) for right in [r]]
    prompt = answering.grounded_prompt("where is the fact", [{"doc_id": "a.md", "title": "a.md",
                                                             "text": ". ".join(texts) + "."}])
    candidates = [{"text": t, "source": "a.md", "rank": 0, "number": 1, "quote": [t]} for t in texts]
    features = [[{"meaning": m, "words": w, "names": 0.0, "code": 0.0, "asks": 0.0, "rank": 0.0}
                 for m, w, _ in rows]]
    item = {"answerable": answerable, "question": "where is the fact", "relevant": {"a.md"},
            "answer": [re.compile("the fact stands")] if answerable else []}
    return {"item": item, "prompt": prompt, "candidates": candidates, "features": features,
            "new_word": new_word}


def test_fitted_weights_favour_the_answering_sentence_and_the_gate_refuses_what_costs_more():
    answerable = [case(True, [(0.8 - i / 100, 0.2, True), (0.3, 0.6, False), (0.2, 0.1, False)],
                       new_word=i % 5 == 0) for i in range(25)]
    unanswerable = [case(False, [(0.45 + i / 100, 0.3, False)], new_word=True) for i in range(10)]
    weights, (refuse, refuse_new) = tuning.fit_answer(answerable + unanswerable)
    assert weights["meaning"] > 0 and weights["meaning"] > weights["words"]
    counts = tuning.verdicts(answerable + unanswerable, weights, (refuse, refuse_new))
    assert counts["refused (right)"] == 10 and counts["right"] == 25    # the gate separates them
    assert refuse_new > max(generators.support_of(c["features"][0][0], weights) for c in unanswerable)


def test_the_gate_threshold_counts_a_wrong_answer_against_a_refusal():
    # supports with the verdict each question would get if answered
    cases = [(0.9, "right"), (0.8, "right"), (0.5, "wrong"), (0.4, "wrong"), (0.3, "right"),
             (0.2, "answered (wrong)")]
    t = tuning.best_threshold(cases)
    assert 0.3 < t <= 0.8        # refuses 0.5 and below: +2 right, 0 for the refused right one,
                                 # 0 + 0 for the two wrong ones refused, +1 for the unanswerable
    # a wrong answer costs two right ones: answering all three scores 1 - 2 + 1 = 0, refusing
    # the last two 1 + 0 + 0 (at -1 a wrong, the two would tie and the lower threshold win)
    assert 0.5 < tuning.best_threshold([(0.9, "right"), (0.5, "wrong"), (0.4, "right")]) <= 0.9
    assert tuning.best_threshold([]) == float("-inf")

def test_a_sample_of_ten_spreads_over_a_set_and_takes_its_unanswerable_share():
    from rageval import generation as gen
    gold = gen.load_gold(devsets.questions("pip"))
    picked = devset.spread(gold, 10)
    assert [n for n, _ in picked] == [0, 3, 7, 11, 15, 19, 22, 26, 30, 34]
    assert sum(not item["answerable"] for _, item in picked) == 2       # 8 of 38 in the set
    assert devset.spread(gold, None) == devset.spread(gold, 100) == list(enumerate(gold))
