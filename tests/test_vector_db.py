"""rag_vector_db.py: NumPy, FAISS and Chroma return the tutorial's figures; Chroma on disk and
on a real `chroma run` server reuses a matching collection and rebuilds a mismatched one."""
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from conftest import HANG_S, LATE_S, next_line, output_lines

import rag_from_scratch as rag
import rag_vector_db as vdb
from ragkit import folder_index

# The lesson's defaults, read from its function signatures (one source of truth).
BACKEND = rag.defaults(rag.Embedder)["backend"]
MODEL_NAME = rag.defaults(rag.Embedder)["model"]

ROOT = Path(__file__).resolve().parent.parent
QUESTION = "My laptop was stolen at the airport. What should I do?"

# The tutorial's "same index in FAISS or Chroma" output, figure for figure.
TUTORIAL_BLOCK = [
    "== NumPy (from scratch) ==",
    "  0.504  IT-02#0",
    "  0.252  IT-01#0",
    "  0.190  FIN-01#0",
    "== FAISS IndexFlatIP (exact inner product, which is the cosine for unit vectors) ==",
    "  0.504  IT-02#0",
    "  0.252  IT-01#0",
    "  0.190  FIN-01#0",
]
CHROMA_LINES = [
    "  distance=0.496  similarity=0.504  IT-02#0",
    "  distance=0.748  similarity=0.252  IT-01#0",
    "  distance=0.810  similarity=0.190  FIN-01#0",
    "== Chroma with a metadata filter (only FIN-01, FIN-02) ==",
    "   ['FIN-01#0', 'FIN-02#0']",
]


def run_main(capsys, *argv):
    """Run the script in-process; return (exit code, stdout lines, stderr)."""
    code = vdb.main(list(argv))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def chroma_lines(lines):
    """The lines from the Chroma section header on, without its storage notes."""
    start = next(i for i, line in enumerate(lines) if line.startswith("== Chroma ("))
    return [line for line in lines[start + 1:] if not line.startswith("  (")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------
# The engines against each other, on the tutorial's 17 MiniLM vectors
# ---------------------------------------------------------------------------
def test_faiss_flat_ip_returns_numpys_scores_and_order(minilm, minilm_index, chunks):
    q = minilm.encode([QUESTION])[0]
    scores, rows = vdb.faiss_search(np.ascontiguousarray(minilm_index), q, 3)
    expected = rag.search(QUESTION, minilm_index, chunks, minilm, k=3)
    assert [chunks[i]["chunk_id"] for i in rows] == [r["chunk_id"] for r in expected]
    assert np.allclose(scores, [r["score"] for r in expected], atol=1e-5)
    assert [round(float(s), 3) for s in scores] == [0.504, 0.252, 0.190]


@pytest.mark.slow      # a second or more
def test_chroma_cosine_distance_is_one_minus_numpys_score(minilm, minilm_index, chunks):
    client = vdb.chroma_client()
    fp = vdb.index_fingerprint(rag.CORPUS, minilm, 50, 10)
    collection, notes = vdb.open_collection(client, "test_cosine", chunks,
                                            np.ascontiguousarray(minilm_index), fp, fresh=True)
    assert notes == ["added 17 chunks to collection test_cosine"]
    q = minilm.encode([QUESTION])[0]
    ids, distances = vdb.chroma_search(collection, q, 3)
    expected = rag.search(QUESTION, minilm_index, chunks, minilm, k=3)
    assert ids == ["IT-02#0", "IT-01#0", "FIN-01#0"] == [r["chunk_id"] for r in expected]
    assert np.allclose(1 - np.array(distances), [r["score"] for r in expected], atol=1e-5)
    assert [round(d, 3) for d in distances] == [0.496, 0.748, 0.810]
    ids, _ = vdb.chroma_search(collection, q, 2, where={"doc_id": {"$in": ["FIN-01", "FIN-02"]}})
    assert ids == ["FIN-01#0", "FIN-02#0"]
    assert collection.configuration_json["hnsw"]["space"] == "cosine"


@pytest.mark.slow      # a second or more
def test_script_prints_the_tutorial_figures_and_agreement(shared_minilm, capsys):
    code, lines, err = run_main(capsys, "--backend", "minilm")
    assert code == 0, err
    start = lines.index("== NumPy (from scratch) ==")
    assert lines[start:start + 8] == TUTORIAL_BLOCK
    assert lines[start + 8] == "== Chroma (in-memory client, cosine space, our own embeddings) =="
    assert lines[start + 9] == "  (added 17 chunks to collection kestrelwood_policies)"
    assert lines[start + 10:start + 15] == CHROMA_LINES
    assert lines[-1] == "Same ranking from NumPy, FAISS, Chroma: yes"


def test_agreement_check_allows_ties_but_catches_a_wrong_order():
    chunks = [{"chunk_id": c} for c in ("a", "b", "c", "d")]
    scores = np.array([0.9, 0.0, 0.0, 0.5])
    best = [0.9, 0.5, 0.0]
    assert vdb.same_ranking(["a", "d", "b"], scores, chunks, best)
    assert vdb.same_ranking(["a", "d", "c"], scores, chunks, best)     # b and c are tied
    assert not vdb.same_ranking(["d", "a", "b"], scores, chunks, best)
    assert not vdb.same_ranking(["a", "d"], scores, chunks, best)


# ---------------------------------------------------------------------------
# TF-IDF (no model) and missing packages
# ---------------------------------------------------------------------------
def test_tfidf_backend_needs_no_model(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)   # any import of it fails
    code, lines, err = run_main(capsys, "--backend", "tfidf")
    assert code == 0, err
    assert "backend=tfidf  17 chunks  vectors (17, 525)" in lines
    assert lines[lines.index("== NumPy (from scratch) ==") + 1] == "  0.307  IT-02#0"
    assert "  distance=0.693  similarity=0.307  IT-02#0" in lines
    assert lines[-1].startswith("Same ranking from NumPy, FAISS, Chroma: yes")
    # No FIN chunk shares a word with the laptop question: the filtered order is said to mean nothing.
    filtered = lines.index("== Chroma with a metadata filter (only FIN-01, FIN-02) ==")
    assert lines[filtered + 2].startswith("   (similarity 0.000: none of these shares a word")


@pytest.mark.slow
def test_cli_runs_as_a_command_with_tfidf():
    done = subprocess.run([sys.executable, "rag_vector_db.py", "--backend", "tfidf", "--k", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"Q: {QUESTION}"
    assert lines.count("  0.307  IT-02#0") == 2                      # NumPy and FAISS
    assert "  distance=0.693  similarity=0.307  IT-02#0" in lines
    assert lines[-1] == "Same ranking from NumPy, FAISS, Chroma: yes"


def test_missing_faiss_names_the_package_and_chroma_still_runs(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "faiss", None)
    code, lines, err = run_main(capsys, "--backend", "tfidf")
    assert code == 0, err
    assert "  skipped: faiss is not installed: .venv/bin/pip install faiss-cpu" in lines
    assert "  distance=0.693  similarity=0.307  IT-02#0" in lines
    assert lines[-1].startswith("Same ranking from NumPy, Chroma: yes")
    assert lines[-1].endswith("  [FAISS skipped]")


def test_missing_chromadb_names_the_package_and_faiss_still_runs(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "chromadb", None)
    code, lines, err = run_main(capsys, "--backend", "tfidf")
    assert code == 0, err
    assert "  skipped: chromadb is not installed: .venv/bin/pip install chromadb" in lines
    assert lines.count("  0.307  IT-02#0") == 2
    assert lines[-1].startswith("Same ranking from NumPy, FAISS: yes")
    assert lines[-1].endswith("  [Chroma skipped]")


def test_with_neither_package_numpy_still_answers(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "faiss", None)
    monkeypatch.setitem(sys.modules, "chromadb", None)
    code, lines, _ = run_main(capsys, "--backend", "tfidf", "--k", "1")
    assert code == 0
    assert lines[-1] == "Same ranking from NumPy: yes  [Chroma and FAISS skipped]"


@pytest.mark.parametrize("argv, message", [
    (["--k", "18"], "--k must be between 1 and the number of chunks (17), got 18"),
    (["--only", "FIN-01,XX-9"], "--only needs known document ids, got ['XX-9']"),
    (["--only", ","], "--only needs known document ids, got []"),
    (["--persist", "/dev/null/db"], "cannot write to --persist /dev/null/db"),
    (["--collection", "k"], "Chroma failed: Validation error: name"),
    (["--question", "  "], "the question is empty"),
    (["--overlap", "50"], "overlap must be at least 0 and smaller than the chunk size"),
    (["--question", "zzzz qqqq"], "no word of the question is in the corpus vocabulary"),
])
def test_bad_input_is_one_line_on_stderr(capsys, argv, message):
    code, _, err = run_main(capsys, "--backend", "tfidf", *argv)
    assert code == 1
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


# ---------------------------------------------------------------------------
# --persist: reuse a matching collection, rebuild a mismatched one
# ---------------------------------------------------------------------------
def test_second_persistent_run_reuses_the_collection_without_adding(tmp_path, capsys,
                                                                    monkeypatch):
    db = str(tmp_path / "db")
    code, first, _ = run_main(capsys, "--backend", "tfidf", "--persist", db)
    assert code == 0
    assert "  (added 17 chunks to collection kestrelwood_policies)" in first

    from chromadb.api.models.Collection import Collection

    def refuse_add(self, *args, **kwargs):
        raise AssertionError("the second run added chunks again")
    monkeypatch.setattr(Collection, "add", refuse_add)
    code, second, err = run_main(capsys, "--backend", "tfidf", "--persist", db)
    assert code == 0, err
    assert "  (reused 17 chunks already in collection kestrelwood_policies)" in second
    assert chroma_lines(second) == chroma_lines(first)
    assert (tmp_path / "db" / "chroma.sqlite3").is_file()


def test_persistent_collection_from_another_backend_is_rebuilt(tmp_path, capsys, shared_minilm):
    db = str(tmp_path / "db")
    assert run_main(capsys, "--backend", "tfidf", "--persist", db)[0] == 0
    code, lines, err = run_main(capsys, "--backend", "minilm", "--persist", db)
    assert code == 0, err
    # the model is named with a hash of its weight files, as a saved --index names it
    assert any(re.fullmatch(r"  \(rebuilding collection kestrelwood_policies: it was built with a "
                            r"different backend tfidf, now minilm; model tfidf, now "
                            r"sentence-transformers/all-MiniLM-L6-v2@[0-9a-f]{12}\)", line)
               for line in lines), lines
    assert chroma_lines(lines)[:5] == CHROMA_LINES           # MiniLM figures, not TF-IDF ones
    code, lines, _ = run_main(capsys, "--backend", "minilm", "--persist", db)
    assert "  (reused 17 chunks already in collection kestrelwood_policies)" in lines


def test_persistent_collection_with_other_chunking_is_rebuilt(tmp_path, capsys):
    db = str(tmp_path / "db")
    assert run_main(capsys, "--backend", "tfidf", "--persist", db)[0] == 0
    code, lines, _ = run_main(capsys, "--backend", "tfidf", "--persist", db, "--chunk-size", "30")
    assert code == 0
    assert ("  (rebuilding collection kestrelwood_policies: it was built with a different "
            "chunk_size 50, now 30)") in lines
    n = len(rag.build_chunks(rag.CORPUS, 30, 10))
    assert f"  (added {n} chunks to collection kestrelwood_policies)" in lines


def test_persistent_collection_from_another_corpus_is_rebuilt(tmp_path, capsys, monkeypatch):
    db = str(tmp_path / "db")
    assert run_main(capsys, "--backend", "tfidf", "--persist", db)[0] == 0
    original = rag.CORPUS
    edited = [dict(d) for d in original]
    edited[0]["text"] = edited[0]["text"].replace("24 days", "26 days")
    monkeypatch.setattr(rag, "CORPUS", edited)
    code, lines, _ = run_main(capsys, "--backend", "tfidf", "--persist", db)
    assert code == 0
    before, after = folder_index.fingerprint(original), folder_index.fingerprint(edited)
    assert before != after
    assert ("  (rebuilding collection kestrelwood_policies: it was built with a different "
            f"corpus {before}, now {after})") in lines


def test_foreign_chroma_collection_is_refused_and_left_untouched(tmp_path, capsys):
    import chromadb
    db = str(tmp_path / "db")
    client = chromadb.PersistentClient(path=db)
    foreign = client.create_collection("kestrelwood_policies", metadata={"team": "search"},
                                       embedding_function=None)
    foreign.add(ids=["x"], embeddings=[[1.0, 0.0]], documents=["someone else's data"])
    before = {p.name: p.read_bytes() for p in (tmp_path / "db").iterdir() if p.is_file()}
    code, lines, err = run_main(capsys, "--backend", "tfidf", "--persist", db)
    assert code == 1 and err.count("\n") == 1          # another tool's Chroma folder: not ours
    assert err == (f"error: --persist {db} holds files the kit did not create; it will not touch "
                   f"them: choose a new or empty folder\n")
    assert {p.name: p.read_bytes() for p in (tmp_path / "db").iterdir() if p.is_file()} == before
    kept = chromadb.PersistentClient(path=db).get_collection("kestrelwood_policies",
                                                             embedding_function=None)
    assert kept.get()["documents"] == ["someone else's data"]
    assert kept.metadata == {"team": "search"}


def test_new_chroma_collection_carries_the_mark(tmp_path, capsys):
    import chromadb
    db = str(tmp_path / "db")
    assert run_main(capsys, "--backend", "tfidf", "--persist", db)[0] == 0
    meta = chromadb.PersistentClient(path=db).get_collection("kestrelwood_policies").metadata
    assert meta["created_by"] == "rag_from_scratch" and meta["backend"] == "tfidf"


def test_a_collection_with_the_default_l2_space_is_rebuilt(tmp_path, capsys, monkeypatch):
    import chromadb
    db = str(tmp_path / "db")
    assert run_main(capsys, "--backend", "tfidf", "--persist", db)[0] == 0
    client = chromadb.PersistentClient(path=db)
    labelled = client.get_collection("kestrelwood_policies", embedding_function=None).metadata
    client.delete_collection("kestrelwood_policies")     # our mark and label, Chroma's default metric
    l2 = client.create_collection("kestrelwood_policies", metadata=labelled, embedding_function=None)
    l2.add(ids=[str(i) for i in range(17)], embeddings=np.eye(17, 525).tolist())
    code, lines, _ = run_main(capsys, "--backend", "tfidf", "--persist", db)
    assert code == 0
    assert ("  (rebuilding collection kestrelwood_policies: it was built with a different "
            "space l2, now cosine)") in lines


def test_a_partly_filled_collection_is_rebuilt():
    fp = {"backend": "tfidf"}
    ours = {"created_by": "rag_from_scratch", **fp}
    assert vdb.rebuild_notes("Chroma collection", "c", "here", ours, fp, 10, 17) == [
        "rebuilding collection c: it was built with a different 10 chunks stored, now 17"]
    assert vdb.rebuild_notes("Chroma collection", "c", "here", ours, fp, 17, 17) == []


# ---------------------------------------------------------------------------
# A real Chroma server (`chroma run`) on a free local port
# ---------------------------------------------------------------------------
def heartbeat(port: int) -> None:
    """Chroma's heartbeat, answered: the server prints its "listening" line a moment before the
    port accepts, so a refused connection is tried again (within HANG_S, a last resort)."""
    give_up = time.monotonic() + HANG_S
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=LATE_S)
            return
        except urllib.error.URLError as exc:
            if not isinstance(exc.reason, ConnectionRefusedError) or time.monotonic() > give_up:
                raise
            time.sleep(0.1)


@pytest.fixture()
def chroma_server(tmp_path):
    """Start `chroma run` on 127.0.0.1, wait for the line it prints once it listens, and stop it
    by PID afterwards."""
    chroma = Path(sys.executable).parent / "chroma"
    if not chroma.exists():
        pytest.skip(f"the chroma command is not installed next to {sys.executable}")
    port = free_port()
    env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
    server = subprocess.Popen([str(chroma), "run", "--host", "127.0.0.1", "--port", str(port),
                               "--path", str(tmp_path / "server_db")], text=True, errors="replace",
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    lines, seen = output_lines(server), []       # read on to the end: the pipe never fills
    try:
        while not seen or "listening on address" not in seen[-1]:
            line = next_line(lines, seen, "chroma run's line 'Frontend server listening on address'")
            if line is None:
                pytest.fail(f"chroma run exited with {server.wait()}: {''.join(seen)[-2000:]}")
            seen.append(line)
        heartbeat(port)
        yield port
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=HANG_S)               # a last resort: it stops on SIGTERM
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.mark.slow
def test_script_against_a_real_chroma_server(chroma_server, capsys, shared_minilm):
    port = str(chroma_server)
    cmd = [sys.executable, "rag_vector_db.py", "--backend", "tfidf",
           "--host", "127.0.0.1", "--port", port]
    first = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert f"== Chroma (server at 127.0.0.1:{port}, cosine space, our own embeddings) ==" in lines
    assert "  (added 17 chunks to collection kestrelwood_policies)" in lines
    assert "  distance=0.693  similarity=0.307  IT-02#0" in lines

    second = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert "  (reused 17 chunks already in collection kestrelwood_policies)" in \
        second.stdout.splitlines()

    # Another learner, with MiniLM, against the same server: rebuilt, and the tutorial's figures.
    code, lines, err = run_main(capsys, "--backend", "minilm", "--host", "127.0.0.1", "--port", port)
    assert code == 0, err
    assert any(line.startswith("  (rebuilding collection kestrelwood_policies: it was built "
                               "with a different backend tfidf, now minilm") for line in lines)
    assert chroma_lines(lines)[:5] == CHROMA_LINES
    assert lines[-1] == "Same ranking from NumPy, FAISS, Chroma: yes"

    # A classmate's own collection on the shared server is refused, never deleted.
    import chromadb
    server = chromadb.HttpClient(host="127.0.0.1", port=chroma_server)
    theirs = server.create_collection("their_notes", embedding_function=None)
    theirs.add(ids=["n1"], embeddings=[[0.0, 1.0]], documents=["a classmate's note"])
    code, lines, err = run_main(capsys, "--backend", "tfidf", "--host", "127.0.0.1",
                                "--port", port, "--collection", "their_notes")
    assert code == 1
    assert err.splitlines()[-1] == (
        f"error: Chroma collection 'their_notes' in the Chroma server at 127.0.0.1:{port} was "
        f"not created by this kit; it will not replace or delete it: choose another name")
    assert server.get_collection("their_notes").get()["documents"] == ["a classmate's note"]


def test_persist_and_host_together_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        vdb.main(["--persist", "db", "--host", "127.0.0.1"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err == "error: argument --host: not allowed with argument --persist (see --help)\n"


def test_no_server_listening_is_one_line_with_the_start_command(capsys):
    port = free_port()
    code, lines, err = run_main(capsys, "--backend", "tfidf", "--host", "127.0.0.1",
                                "--port", str(port))
    assert code == 1 and lines == []                   # it checks the server before any work
    waiting, error = err.splitlines()
    assert waiting == f"waiting for the Chroma server at 127.0.0.1:{port} (up to 10 s) ..."
    assert error.startswith(f"error: no Chroma server answers at 127.0.0.1:{port}")
    assert f"chroma run --host 127.0.0.1 --port {port}" in error


@pytest.mark.slow
def test_silent_chroma_server_gives_up_at_the_deadline(silent_server, capsys, monkeypatch):
    monkeypatch.setattr(vdb, "CONNECT_S", 1.5)
    start = time.monotonic()
    code, lines, err = run_main(capsys, "--backend", "tfidf", "--host", "127.0.0.1",
                                "--port", str(silent_server))
    elapsed = time.monotonic() - start
    assert code == 1 and lines == [] and elapsed < 1.5 + LATE_S   # without a deadline: 280 s
    waiting, error = err.splitlines()
    assert waiting == f"waiting for the Chroma server at 127.0.0.1:{silent_server} (up to 1.5 s) ..."
    assert error.startswith(f"error: the Chroma server at 127.0.0.1:{silent_server} did not "
                            f"answer within 1.5 s: is it a Chroma server? start one with")


# What `chroma run` (chromadb 1.5.9) answers to a client's first requests, recorded.
CHROMA_FIRST_REPLIES = {
    "/api/v2/auth/identity": {"user_id": "", "tenant": "default_tenant",
                              "databases": ["default_database"]},
    "/api/v2/tenants/default_tenant": {"name": "default_tenant", "resource_name": None},
    "/api/v2/tenants/default_tenant/databases/default_database": {
        "id": "00000000-0000-0000-0000-000000000000", "name": "default_database",
        "tenant": "default_tenant"},
}


@pytest.mark.slow
def test_a_chroma_server_that_stalls_after_the_first_requests_is_one_line(stalling_http, capsys,
                                                                          monkeypatch):
    monkeypatch.setattr(vdb, "CONNECT_S", 1.5)
    port = stalling_http(CHROMA_FIRST_REPLIES)
    start = time.monotonic()
    code, lines, err = run_main(capsys, "--backend", "tfidf", "--host", "127.0.0.1",
                                "--port", str(port))
    assert code == 1 and time.monotonic() - start < 1.5 + LATE_S   # without a deadline: never
    assert lines[-1].startswith("== Chroma (server at")           # it stalled on get_collection
    assert err.splitlines()[-1] == (f"error: the Chroma server at 127.0.0.1:{port} stopped "
                                    f"answering mid-run (timed out): check that it still runs "
                                    f"and is not overloaded")
