"""ragkit/retrieval.py's command-line side: --hybrid, --rerank, --source, --tag, --context, --compare
and the MiniLM truncation count, for the demo corpus and for --docs.

The reranker is a tiny cross-encoder made here (random weights, MiniLM's tokenizer), so the
real loading and re-ordering code runs with no download; its scores are checked against
the same weights run through transformers directly.
"""
import os

import numpy as np
import pytest
from conftest import CISI

import rag_from_scratch as rag
from ragkit import chunking, documents, folder_index, retrieval

FATHERS = "How much time off do new fathers get?"


def run_main(capsys, *argv):
    """rag_from_scratch.main in this process: (exit status, stdout, stderr lines)."""
    status = rag.main(list(argv))
    out = capsys.readouterr()
    return status, out.out, [line for line in out.err.splitlines() if line.strip()]


@pytest.fixture(scope="session")
def tiny_reranker(tmp_path_factory):
    """A folder holding a cross-encoder with random weights (hidden size 8, one layer)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification
    folder = tmp_path_factory.mktemp("tiny-cross-encoder")
    tokenizer = AutoTokenizer.from_pretrained(folder_index.model_folder())
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=8, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=16, num_labels=1,
                        initializer_range=0.5)       # wide weights: scores that differ
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture()
def notes(tmp_path):
    """Three files: two tagged in their front matter, one under another folder with none."""
    (tmp_path / "ops").mkdir()
    (tmp_path / "hr").mkdir()
    (tmp_path / "ops" / "db.md").write_text(
        "---\ntags: [database, oncall]\n---\n# Restart\nRestart the database with the "
        "runbook script and check replication lag afterwards.\n", encoding="utf-8")
    (tmp_path / "ops" / "net.md").write_text(
        "---\ntags:\n  - network\n---\n# VPN\nThe VPN gateway restarts itself every night at "
        "two; connections drop for a minute.\n", encoding="utf-8")
    (tmp_path / "hr" / "leave.txt").write_text(
        "Annual leave is 24 days. Apply in the portal; restart requests after a rejection "
        "go to your manager.\n", encoding="utf-8")
    return tmp_path


# == --hybrid ==============================================================================
def test_hybrid_rrf_is_reciprocal_rank_fusion_of_bm25_and_cosine(chunks, tfidf_setup):
    embedder, index = tfidf_setup
    got = retrieval.make_retriever(chunks, index, embedder, hybrid="rrf")(FATHERS, 5)
    # By hand: rank each chunk under BM25 and under cosine, add 1 / (60 + rank).
    vectorizer, weights = retrieval.bm25_matrix([c["text"] for c in chunks])
    keyword = retrieval.bm25_scores([FATHERS], vectorizer, weights)[0]
    dense = index @ embedder.encode([FATHERS])[0]
    rank = lambda s: np.argsort(np.argsort(-s, kind="stable"), kind="stable") + 1
    fused = 1 / (60 + rank(keyword)) + 1 / (60 + rank(dense))
    best = np.argsort(-fused, kind="stable")[:5]
    assert [r["chunk_id"] for r in got] == [chunks[i]["chunk_id"] for i in best]
    np.testing.assert_allclose([r["score"] for r in got], fused[best])


def test_hybrid_weight_0_is_plain_search_and_1_is_bm25(chunks, tfidf_setup):
    embedder, index = tfidf_setup
    plain = rag.search(FATHERS, index, chunks, embedder, k=4)
    dense_only = retrieval.make_retriever(chunks, index, embedder, hybrid=0.0)(FATHERS, 4)
    assert [r["chunk_id"] for r in dense_only] == [r["chunk_id"] for r in plain]
    vectorizer, weights = retrieval.bm25_matrix([c["text"] for c in chunks])
    keyword = retrieval.bm25_scores([FATHERS], vectorizer, weights)[0]
    bm25_only = retrieval.make_retriever(chunks, index, embedder, hybrid=1.0)(FATHERS, 4)
    assert [r["chunk_id"] for r in bm25_only] == [chunks[i]["chunk_id"] for i in rag.top_k(keyword, 4)]
    assert bm25_only[0]["score"] == 1.0 and bm25_only[-1]["score"] < 1.0       # min-max: best is 1


@pytest.mark.parametrize("value", ["1.5", "-0.1", "half"])
def test_a_bad_hybrid_weight_is_one_line_and_exit_1(capsys, value):
    status, out, err = run_main(capsys, "--backend", "tfidf", f"--hybrid={value}", "--question", "x")
    assert status == 1 and out == ""
    assert err == [f"error: --hybrid takes rrf or a BM25 weight between 0 and 1 (e.g. 0.3), got {value!r}"]


def test_hybrid_answers_a_question_on_the_demo_corpus(capsys):
    status, out, err = run_main(capsys, "--backend", "tfidf", "--hybrid", "0.5", "--question", FATHERS)
    assert status == 0, err
    # "new" (joiner) pulls the laptop policy up under BM25 and TF-IDF alike: fusing two
    # keyword views does not fix the tutorial's failure; MiniLM does (see --compare).
    assert ("ranked by 0.5 x BM25 + 0.5 x cosine, each rescaled to 0..1 over all chunks" in out
            and "  cosine 0.087  BM25   2.27  IT-02#0   Laptops and devices\n"
                "  cosine 0.070  BM25   2.11  HR-04#0   Parental leave" in out)


# == --rerank ==============================================================================
def test_rerank_keeps_the_k_best_of_4k_candidates_by_the_cross_encoder(chunks, tfidf_setup, tiny_reranker):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    embedder, index = tfidf_setup
    reranker = retrieval.load_reranker(tiny_reranker)
    got = retrieval.make_retriever(chunks, index, embedder, reranker=reranker)(FATHERS, 2)
    candidates = rag.search(FATHERS, index, chunks, embedder, k=8)          # 4 x k, plain order
    # The reference: the same weights run through transformers, sigmoid of the one logit.
    model = AutoModelForSequenceClassification.from_pretrained(tiny_reranker).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_reranker)
    batch = tokenizer([FATHERS] * 8, [c["text"] for c in candidates], padding=True,
                      truncation=True, return_tensors="pt")
    with torch.no_grad():
        expected = torch.sigmoid(model(**batch).logits[:, 0]).numpy()
    order = np.argsort(-expected, kind="stable")[:2]
    assert [r["chunk_id"] for r in got] == [candidates[i]["chunk_id"] for i in order]
    np.testing.assert_allclose([r["score"] for r in got], expected[order], rtol=1e-5)
    assert len(set(np.round(expected, 4))) == 8          # the tiny model does tell them apart


def test_a_local_reranker_folder_loads_without_asking_the_hub(tiny_reranker, monkeypatch, capsys):
    """A hub address that would be probed if asked: a local folder never reaches it."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    reranker = retrieval.load_reranker(tiny_reranker)
    assert reranker.predict([("a question", "a passage")]).shape == (1,)
    err = capsys.readouterr().err
    assert "waiting for" not in err and err.startswith("loading ")


def test_rerank_with_no_reranker_is_one_line_that_says_how_to_get_one(capsys):
    status, out, err = run_main(capsys, "--backend", "tfidf", "--rerank", "example/no-such-reranker",
                                "--question", FATHERS)
    assert status == 1 and "Your question" not in out
    assert len(err) == 1
    assert err[0].startswith("error: no local copy of the reranker example/no-such-reranker")
    assert "hf download" in err[0] and "--rerank auto" in err[0]


def test_rerank_with_a_missing_folder_is_one_line(capsys, tmp_path):
    status, _, err = run_main(capsys, "--backend", "tfidf", "--rerank", str(tmp_path / "nothing"),
                              "--question", FATHERS)
    assert status == 1 and err == [f"error: model folder not found: {tmp_path / 'nothing'} "
                                   f"(give a folder holding config.json)"]


def test_rerank_auto_goes_on_without_reranking(capsys):
    if folder_index.model_folder(retrieval.RERANKER):
        pytest.skip(f"a copy of {retrieval.RERANKER} is cached here, so auto finds one")
    status, out, err = run_main(capsys, "--backend", "tfidf", "--rerank", "auto", "--question", FATHERS)
    assert status == 0
    assert err[0].startswith("[info] --rerank auto: going on without reranking (no local copy of "
                             "the reranker cross-encoder/ms-marco-MiniLM-L6-v2")
    assert "  cosine 0.087  IT-02#0   Laptops and devices\n  cosine 0.070  HR-04#0   Parental leave" in out


def test_rerank_in_the_cli_prints_the_time_it_adds(capsys, tiny_reranker):
    status, out, err = run_main(capsys, "--backend", "tfidf", "--rerank", tiny_reranker,
                                "--question", FATHERS)
    assert status == 0, err
    assert any(line.startswith("reranked 12 candidates in ") and line.endswith(" ms") for line in err)
    assert out.count("Q: " + FATHERS) == 1 and "== Your question (k=3; ranked by a cross-encoder" in out
    assert "  cross-encoder " in out.split("== Your question")[1]


# == --source and --tag ====================================================================
def test_filters_pick_chunks_before_the_cut(capsys, notes):
    status, out, _ = run_main(capsys, "--backend", "tfidf", "--docs", str(notes), "--source", "hr/",
                              "--question", "How do I restart the database?")
    assert status == 0
    assert "searching 1 of 3 chunks (--source hr/)" in out
    listed = [line.split()[4] for line in out.split("== Your question")[1].splitlines()
              if line.startswith("  cosine ")]          # cosine 0.xxx  BM25 y.yy  file > heading
    assert listed == ["hr/leave.txt"]                         # the database note is left out


def test_tag_reads_front_matter_lists_of_both_forms(capsys, notes):
    for tag, want, other in (("database", "ops/db.md", "ops/net.md"), ("NETWORK", "ops/net.md", "ops/db.md")):
        status, out, _ = run_main(capsys, "--backend", "tfidf", "--docs", str(notes), "--tag", tag,
                                  "--question", "database gateway")
        assert status == 0 and f"searching 1 of 3 chunks (--tag {tag})" in out
        found = out.split("== Your question")[1].split("-- the prompt")[0]
        assert f"  {want} > " in found and other not in found and "hr/" not in found


def test_tag_with_no_tags_in_any_file_is_one_line(capsys):
    status, out, err = run_main(capsys, "--backend", "tfidf", "--tag", "hr", "--question", FATHERS)
    assert status == 1 and out == ""
    assert err == ["error: --tag hr: no file has tags; add `tags: [a, b]` to the front matter "
                   "(a '---' block at the top of a .md file)"]


@pytest.mark.parametrize("flags, message", [
    (["--source", "legal/"], "--source legal/ matches no document"),
    (["--tag", "payroll"], "--tag payroll matches no document"),
    (["--source", "hr/", "--tag", "database"], "--source hr/ and --tag database matches no document"),
])
def test_a_filter_that_matches_nothing_is_one_line(capsys, notes, flags, message):
    status, out, err = run_main(capsys, "--backend", "tfidf", "--docs", str(notes), *flags, "--question", "x")
    assert status == 1 and "files ->" not in out                 # read, but nothing indexed
    assert err[-1].startswith("error: " + message) and sum(line.startswith("error") for line in err) == 1


def test_a_tag_that_matches_nothing_names_the_tags_there_are(capsys, notes):
    status, _, err = run_main(capsys, "--backend", "tfidf", "--docs", str(notes), "--tag", "payroll",
                              "--question", "x")
    assert status == 1 and "(tags in these files: " in err[-1]


def test_source_works_on_the_demo_corpus(capsys):
    status, out, _ = run_main(capsys, "--backend", "tfidf", "--source", "IT-", "--question", FATHERS)
    assert status == 0 and "searching 3 of 17 chunks (--source IT-)" in out
    assert "HR-04" not in out.split("== Your question")[1]


# == --context =============================================================================
def test_context_embeds_the_title_in_front_of_each_chunk(chunks, minilm, minilm_index):
    got = retrieval.make_retriever(chunks, minilm_index, minilm, context=True)(FATHERS, 3)
    vectors = minilm.encode([f"{c['title']}\n{c['text']}" for c in chunks])
    scores = vectors @ minilm.encode([FATHERS])[0]
    best = rag.top_k(scores, 3)
    assert [r["chunk_id"] for r in got] == [chunks[i]["chunk_id"] for i in best]
    np.testing.assert_allclose([r["score"] for r in got], scores[best], rtol=1e-5)
    assert got[0]["text"] == chunks[best[0]]["text"]          # the prompt still gets the plain text


def test_context_of_a_docs_chunk_is_file_and_heading(notes):
    chunks = chunking.document_chunks(documents.load_documents(notes))
    assert chunking.with_context(chunks)[0] == ("hr/leave.txt\nAnnual leave is 24 days. Apply in the portal; "
                                          "restart requests after a rejection go to your manager.")
    assert chunking.with_context(chunks)[1].startswith("ops/db.md > Restart\nRestart\nRestart the database")


def test_context_with_tfidf_leaves_the_plain_index_usable(chunks, tfidf_setup):
    embedder, index = tfidf_setup
    before = rag.search(FATHERS, index, chunks, embedder, k=3)
    retrieval.make_retriever(chunks, index, embedder, context=True)(FATHERS, 3)
    assert rag.search(FATHERS, index, chunks, embedder, k=3) == before   # its own vocabulary


# == --compare and the variant's evaluation ================================================
def test_compare_table_on_the_demo_corpus_with_tfidf(capsys):
    status, out, err = run_main(capsys, "--backend", "tfidf", "--compare", "--hybrid", "0.3")
    assert status == 0, err
    table = out.split("== Retrieval variants side by side (10 questions, k=3, backend=tfidf) ==\n")[1]
    assert table.splitlines()[:5] == [
        "variant               hit@1  hit@3  recall@3  mrr@3  ndcg@3  ndcg 95% CI    ndcg - plain [95% CI]",
        "plain                 0.90   1.00   1.00      0.95   0.96    [0.88, 1.00]",
        "hybrid 0.3            0.90   1.00   1.00      0.95   0.96    [0.88, 1.00]   +0.00 [+0.00, +0.00]",
        "context               0.90   1.00   1.00      0.95   0.96    [0.88, 1.00]   +0.00 [+0.00, +0.00]",
        "hybrid 0.3 + context  0.90   1.00   1.00      0.95   0.96    [0.88, 1.00]   +0.00 [+0.00, +0.00]",
    ]


def test_compare_with_minilm_and_the_tiny_reranker(chunks, minilm, minilm_index, tiny_reranker, capsys):
    rows = retrieval.compare_variants(rag.EVAL_SET, chunks, minilm_index, minilm, 3,
                               reranker=retrieval.load_reranker(tiny_reranker))
    assert list(rows) == ["plain", "hybrid rrf", "rerank", "context", "hybrid rrf + rerank + context"]
    plain = rag.evaluate_retrieval(rag.EVAL_SET, minilm_index, chunks, minilm, k=3)
    assert rows["plain"]["ndcg"] == pytest.approx(plain["ndcg"]) and rows["plain"]["hit_rate"] == 1.0
    assert rows["rerank"]["timing"]["queries"] == 10 and rows["plain"]["timing"]["queries"] == 0
    # The README's MiniLM table: the title costs the ChatGPT question its first place.
    assert rows["hybrid rrf"]["ndcg"] == rows["hybrid rrf"]["hit1"] == 1.0
    assert (rows["context"]["hit1"], round(rows["context"]["ndcg"], 2)) == (0.9, 0.96)
    retrieval.print_comparison(rows, 3)
    out = capsys.readouterr().out
    assert out.splitlines()[-1].startswith("reranking added ")
    assert "ms per query (12 candidates, 1 thread, this machine and this reranker)" in out


def test_a_variant_is_scored_beside_step_6_in_the_demo(capsys):
    status, out, _ = run_main(capsys, "--backend", "tfidf", "--hybrid")
    assert status == 0
    block = out.split("== Retrieval evaluation (the sample's questions, 10 questions): hybrid rrf, "
                      "the retrieval --question uses ==\n")[1]
    assert "k=1: hit_rate=0.90  recall=0.85  precision=0.90  mrr=0.90\n" \
           "k=3: hit_rate=1.00  recall=1.00  precision=0.47  mrr=0.95" in block


def test_hybrid_weight_0_is_a_variant_too(capsys):
    status, out, _ = run_main(capsys, "--backend", "tfidf", "--hybrid", "0")
    assert status == 0 and "10 questions): hybrid 0.0, the retrieval --question uses ==" in out


def test_eval_with_docs_scores_the_retrieval_the_question_uses_in_one_named_block(capsys, notes, tmp_path):
    qa = tmp_path / "qa.jsonl"
    qa.write_text('{"question": "Who approves restart requests?", "relevant": ["hr/leave.txt"]}\n',
                  encoding="utf-8")
    status, out, err = run_main(capsys, "--backend", "tfidf", "--docs", str(notes), "--eval", str(qa),
                                "--hybrid", "--k", "1")
    assert status == 0, err
    block = out.split(f"== Retrieval evaluation ({qa}, 1 question): hybrid rrf + context, the retrieval "
                      f"--question uses ==\n")[1]
    assert block.startswith("  HIT  want=['hr/leave.txt']") and "k=1: hit_rate=1.00  recall=1.00" in block
    assert out.count("== Retrieval evaluation") == 1                  # one block, named


def test_docs_with_an_eval_file_retrieves_each_question_once_and_reads_the_file_once(capsys, notes, tmp_path,
                                                                                     monkeypatch):
    """The evaluation at k=1 and k, and the answer in context, all score the same retrieval."""
    from ragkit import documents
    qa = tmp_path / "qa.jsonl"
    qa.write_text('{"question": "Who approves restart requests?", "relevant": ["hr/leave.txt"], '
                  '"answer": ["manager"]}\n{"question": "When does the VPN drop?", "relevant": ["ops/net.md"]}\n',
                  encoding="utf-8")
    asked, reads, call, read = [], [], retrieval.Retriever.__call__, documents.read_jsonl
    monkeypatch.setattr(retrieval.Retriever, "__call__", lambda self, q, k: asked.append(q) or call(self, q, k))
    monkeypatch.setattr(documents, "read_jsonl", lambda *a: reads.append(a[0]) or read(*a))
    status, out, err = run_main(capsys, "--backend", "tfidf", "--docs", str(notes), "--eval", str(qa), "--k", "2")
    assert status == 0, err
    assert sorted(asked) == ["When does the VPN drop?", "Who approves restart requests?"] and reads == [str(qa)]
    assert "k=1: hit_rate=1.00" in out and "k=2: hit_rate=1.00" in out
    assert "answer in context: 1.00 (every fact of the answer in the k=2 passages, for 1 of 1 questions)" in out


def test_compare_with_docs_needs_an_eval_file(capsys, notes):
    status, _, err = run_main(capsys, "--backend", "tfidf", "--docs", str(notes), "--compare")
    assert status == 1 and len(err) == 1 and "--compare with --docs needs --eval FILE" in err[0]


def test_compare_on_docs_with_an_eval_file(capsys, notes, tmp_path):
    qa = tmp_path / "qa.jsonl"
    qa.write_text('{"question": "How do I restart the database?", "relevant": ["ops/db.md"]}\n'
                  '{"question": "When does the VPN drop?", "relevant": ["ops/net.md"]}\n', encoding="utf-8")
    status, out, err = run_main(capsys, "--backend", "tfidf", "--docs", str(notes), "--eval", str(qa),
                                "--compare", "--k", "1")
    assert status == 0, err
    assert "== Retrieval variants side by side (2 questions, k=1, backend=tfidf) ==" in out
    assert "plain                 1.00   1.00   1.00      1.00   1.00    [1.00, 1.00]" in out


# == What MiniLM leaves unread =============================================================
def test_truncation_counts_word_pieces_past_the_limit(minilm):
    tokenizer = minilm.model.tokenizer
    report = chunking.truncation(["word " * 300, "a short one"], tokenizer, 256)
    # "word" is one piece; [CLS] and [SEP] make 302, so 46 are never read.
    assert report == {"texts": 2, "cut": 1, "limit": 256, "longest": 302, "mean_lost": 46.0,
                      "share_lost": pytest.approx(46 / (302 + 5))}
    assert chunking.truncation_line(report) == ("MiniLM reads 256 word pieces: 1 of 2 chunks are longer and "
                                          "lose their end: 46 pieces each on average, 15% of all pieces "
                                          "unread (longest 302)")


@pytest.mark.slow
def test_truncation_on_the_demo_corpus_and_cisi(minilm, chunks):
    from rageval.ir_collection import load_collection
    tokenizer, limit = minilm.model.tokenizer, minilm.model.max_seq_length
    assert limit == 256
    assert chunking.truncation([c["text"] for c in chunks], tokenizer, limit)["cut"] == 0
    docs = load_collection(CISI)["docs"]
    pieces = chunking.truncation([c["text"] for c in rag.build_chunks(docs, 50, 10)], tokenizer, limit)
    assert (pieces["texts"], pieces["cut"], pieces["longest"]) == (4966, 0, 112)
    whole = chunking.truncation([d["text"] for d in docs], tokenizer, limit)
    assert (whole["texts"], whole["cut"], whole["longest"]) == (1460, 131, 728)
    assert round(whole["mean_lost"], 1) == 65.4 and round(whole["share_lost"], 3) == 0.038


def test_the_minilm_demo_says_under_step_2_how_many_chunks_were_cut(capsys, minilm, monkeypatch):
    monkeypatch.setattr(rag, "load_minilm", lambda *args, **kwargs: minilm.model)   # loaded once
    assert rag.main(["--backend", "minilm"]) == 0
    step2 = capsys.readouterr().out.split("== Step 2")[1].split("== Step 3")[0]
    assert "\nMiniLM reads 256 word pieces: 0 of 17 chunks are longer (longest 70)\n" in step2


def test_importing_adds_no_heavy_module():
    import subprocess
    import sys
    code = ("import sys, ragkit.retrieval, ragkit.cli, ragkit.folder_index\n"
            "heavy = ('torch', 'sklearn', 'sentence_transformers', 'scipy')\n"
            "print(sorted(m for m in heavy if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))), timeout=60)
    assert out.stdout.strip() == "[]", out.stderr


def test_context_is_the_docs_default_and_no_context_turns_it_off(capsys, notes, tmp_path):
    """Titles in front won every leave-one-question-out fold on the development set (MRR@5:
    MiniLM 0.80 -> 0.87, TF-IDF 0.58 -> 0.61), so --docs uses them unless told not to."""
    qa = tmp_path / "qa.jsonl"
    qa.write_text('{"question": "Who approves restart requests?", "relevant": ["hr/leave.txt"]}\n',
                  encoding="utf-8")
    base = ["--backend", "tfidf", "--docs", str(notes), "--eval", str(qa), "--k", "1"]
    status, out, err = run_main(capsys, *base)            # the one index embeds titles in front
    assert status == 0 and "index shape=(3, " in out and "(titles in front)" in out, err
    assert "k=1: hit_rate=1.00" in out and "with context" not in out     # scored once, as used
    status, out, err = run_main(capsys, *base, "--no-context")
    assert status == 0 and "titles in front" not in out, err
    status, out, err = run_main(capsys, "--backend", "tfidf", "--question", "new fathers?")
    assert status == 0 and "with context" not in out     # the sample corpus: the tutorial's search
