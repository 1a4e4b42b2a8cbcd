"""Shared test setup: nothing here may reach the network, and the model loads once."""
import contextlib
import os
import sys
from pathlib import Path

import pytest

# Set before boto3, huggingface_hub or chromadb are imported by any test.
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"   # boto3 must not probe the metadata address
os.environ["ANONYMIZED_TELEMETRY"] = "False"       # chromadb must not phone home
os.environ.setdefault("HF_HUB_OFFLINE", "1")       # the model comes from a local copy only
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
# How late a busy laptop may be past a deadline under test. Without their deadlines, the
# waits these tests bound last minutes or for ever, so the check still means something.
LATE_S = 15
sys.path.insert(0, str(ROOT))

import rag_from_scratch as rag  # noqa: E402
from rageval.ir_collection import DEFAULT_COLLECTION  # noqa: E402

# CISI as the repository carries it (data/cisi); until that copy is merged, the shared one
# beside the checkout. Tests only: the scripts themselves default to data/cisi.
CISI = DEFAULT_COLLECTION          # data/cisi, shipped with the repository


@pytest.fixture(scope="session")
def minilm():
    """The real all-MiniLM-L6-v2 model, loaded once for the whole test run, as the kit runs it
    (ragkit/folder_index.py: each text encoded once, a question on one thread)."""
    from ragkit.folder_index import CachedEmbedder
    return CachedEmbedder("minilm")


@pytest.fixture(scope="session")
def chunks():
    """The tutorial's 17 chunks (50 words, overlap 10)."""
    return rag.build_chunks(rag.CORPUS, 50, 10)


@pytest.fixture(scope="session")
def minilm_index(minilm, chunks):
    return rag.build_index(chunks, minilm)


@pytest.fixture()
def shared_minilm(monkeypatch, minilm):
    """Let the script's Embedder("minilm") reuse the session's model instead of loading another."""
    real = rag.Embedder

    def embedder(backend="auto", model="sentence-transformers/all-MiniLM-L6-v2", **kwargs):
        return minilm if backend in ("minilm", "auto") else real(backend, model, **kwargs)

    monkeypatch.setattr(rag, "Embedder", embedder)


@pytest.fixture()
def tfidf_setup(chunks):
    """A fresh TF-IDF embedder fitted on the tutorial chunks, with its index."""
    embedder = rag.Embedder("tfidf")
    return embedder, rag.build_index(chunks, embedder)


@pytest.fixture()
def silent_server():
    """A port on 127.0.0.1 that accepts connections (the kernel's backlog) and never answers."""
    import socket
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    yield listener.getsockname()[1]
    listener.close()


PACKAGES = ("ragkit", "rageval", "ragbench")     # the kit's folders of modules


def chat_reply(text: str) -> bytes:
    """A fake OpenAI-compatible server's whole chat completion, `text` its answer."""
    import json
    return json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                    "finish_reason": "stop"}]}).encode()


def send_chat(handler, text: str) -> None:
    """chat_reply(text), sent by a BaseHTTPRequestHandler."""
    body = chat_reply(text)
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@contextlib.contextmanager
def serving(write, status=200, content_type="text/event-stream"):
    """A real HTTP server on 127.0.0.1 that answers every POST with `status`, then
    write(wfile, stop); yields its URL. `stop` is set when the test ends: a writer that would
    never end waits on it or checks it."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"              # the body ends when the connection closes

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.end_headers()
            try:
                write(self.wfile, stop)
            except OSError:                        # the client hung up: as it should
                pass

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


def command(script: str) -> list:
    """What follows `python` to run a script: a file's path ("rag_experiments.py",
    "lab/check.py"), or -m and a module ("rageval.ir_scores")."""
    return [str(ROOT / script)] if script.endswith(".py") else ["-m", script]


def entry_points() -> set:
    """Every script of the kit: the root's by file name, the packages' by module name."""
    scripts = {p.name for p in ROOT.glob("*.py") if 'if __name__ == "__main__"' in p.read_text()}
    return scripts | {f"{p.parent.name}.{p.stem}" for package in PACKAGES
                      for p in (ROOT / package).glob("*.py")
                      if 'if __name__ == "__main__"' in p.read_text()}


@pytest.fixture()
def stalling_http():
    """start(replies): an HTTP server on 127.0.0.1 that answers GET paths in `replies` with
    their JSON, and holds every other request unanswered until the test ends; returns its port."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    release, servers = threading.Event(), []

    def start(replies: dict) -> int:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path in replies:
                    body = json.dumps(replies[self.path]).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                else:
                    release.wait()                 # the stall: no reply until the test ends
            do_POST = do_DELETE = do_PUT = do_GET

            def log_message(self, *args):
                pass
        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server.server_address[1]
    yield start
    release.set()
    for server in servers:
        server.shutdown()
        server.server_close()


def like_a_terminal():
    """Popen(preexec_fn=...): Ctrl-C reaches the child as it would from a terminal, even when
    the test run itself was started in the background (where SIGINT is ignored and inherited)."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_alone(folder, *args, timeout=120):
    """Run rag_from_scratch.py copied alone into `folder`, as in an empty folder on a machine
    where none of the companion files exists (not even installed with `pip install -e .`)."""
    import shutil
    import subprocess
    shutil.copy(ROOT / "rag_from_scratch.py", folder)
    others = sorted([p.stem for p in ROOT.glob("*.py") if p.stem != "rag_from_scratch"]
                    + list(PACKAGES))
    code = ("import runpy, sys\n"
            "class NotHere:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            f"        if name.split('.')[0] in {others!r}:\n"
            "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
            "sys.meta_path.insert(0, NotHere())\n"
            "sys.argv = ['rag_from_scratch.py'] + sys.argv[1:]\n"
            "runpy.run_path('rag_from_scratch.py', run_name='__main__')\n")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          cwd=folder, timeout=timeout)


# A last resort only: a child that neither prints nor exits for this long hangs. The waits
# below end on the child's own lines and on its exit, so a load of 10 only makes them longer.
HANG_S = 1800


def output_lines(proc):
    """A queue that gets each line of the child's output as it is printed, then None."""
    import queue
    import threading
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout] + [lines.put(None)],
                     daemon=True).start()
    return lines


def next_line(lines, seen: list, waiting_for: str, seconds=HANG_S):
    """The child's next line (None: its output has ended); failing after `seconds`, by name."""
    import queue
    try:
        return lines.get(timeout=seconds)
    except queue.Empty:
        raise AssertionError(f"the child printed nothing for {seconds} s while the test waited for "
                             f"{waiting_for}:\n{''.join(seen)}") from None


def press_ctrl_c(argv, at=None, may_finish=False, cwd=ROOT, nth=1):
    """Run `python *argv` as a terminal would and press Ctrl-C at a defined point, never after a
    guessed sleep, so the test means the same on an idle and a busy machine.
    at=None: at the very first instant. SIGINT is held from before the interpreter starts,
    so the press waits, pending, until the script lets it in.
    at="text": the moment the child has printed a line holding `text` (stdout or stderr).
    The child is stopped there before the press, so it lands right after that line (the nth
    such line: a prompt printed before the answer may hold the same text).
    may_finish: the child may finish in the instant between printing the line and being
    stopped (the line is near its end). Exit 0, or death by SIGINT while the interpreter
    shuts down (a shell shows 130), then count as a run the press came too late for.
    Each wait ends on what the child does (a line, its output's end); HANG_S is a last resort.
    Returns the exit status and everything the child printed."""
    import signal
    import subprocess

    def as_from_a_terminal():
        signal.signal(signal.SIGINT, signal.SIG_DFL)   # background test runs ignore SIGINT
        if at is None:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})

    proc = subprocess.Popen([sys.executable, *argv], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, preexec_fn=as_from_a_terminal,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines, seen, line = output_lines(proc), [], ""
    try:
        if at is None:
            proc.send_signal(signal.SIGINT)
        while at is not None and nth and (line := next_line(lines, seen, f"a line holding {at!r}")):
            seen.append(line)
            nth -= at in line
        if nth == 0:
            for sig in (signal.SIGSTOP, signal.SIGINT, signal.SIGCONT):
                proc.send_signal(sig)
        while line is not None and (line := next_line(lines, seen, "its output to end")) is not None:
            seen.append(line)
        proc.wait()                  # its output has ended: it has exited, or is about to
    finally:
        if proc.poll() is None:
            proc.kill()
    output = "".join(seen)
    if at is not None:
        assert any(at in line for line in seen), f"the child never printed {at!r}:\n{output}"
    assert "Traceback" not in output, output
    if proc.returncode in (0, -signal.SIGINT) and may_finish:
        return 0, output
    assert proc.returncode == 130, f"exit {proc.returncode}:\n{output}"
    assert output.replace("\r", "\n").strip().splitlines()[-1] == "interrupted", output
    return proc.returncode, output


@pytest.fixture(autouse=True)
def kept_indexes_in_tmp(tmp_path_factory, monkeypatch):
    """The index --docs keeps for a folder without --index goes under the session's tmp folder,
    not the user's cache (in this process; a test that sets RAG_CACHE_DIR chooses its own)."""
    from ragkit import folder_index, support
    root = tmp_path_factory.getbasetemp() / "kit-cache"
    monkeypatch.setattr(folder_index, "cache_folder",
                        lambda: support.cache_folder() if os.environ.get("RAG_CACHE_DIR") else root)
