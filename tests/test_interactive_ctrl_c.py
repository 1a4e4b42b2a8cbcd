"""--interactive: Ctrl-C stops the answer being written and the session goes on to the next
question; at the prompt, Ctrl-C ends the session."""
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import HANG_S, ROOT, like_a_terminal, send_chat

ANSWER = 'Quote: "Every full-time employee at Kestrelwood Systems receives 24 days of paid annual leave per calendar year." [1]\nAnswer: 24 days.'


@pytest.fixture()
def first_stalls():
    """An OpenAI-compatible server whose first request is held until the test ends, and every
    later one answered with ANSWER; yields (port, the event set when the first arrives)."""
    arrived, release, seen = threading.Event(), threading.Event(), []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(self.path)
            if len(seen) == 1:
                arrived.set()
                release.wait()             # the first answer never comes
                return
            send_chat(self, ANSWER)

        def log_message(self, *args):
            pass
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], arrived
    release.set()
    server.shutdown()
    server.server_close()


@pytest.mark.slow
def test_ctrl_c_during_an_answer_returns_to_the_next_question(first_stalls):
    port, arrived = first_stalls
    argv = [sys.executable, str(ROOT / "rag_from_scratch.py"), "--backend", "tfidf", "--generator", "openai",
            "--llm-url", f"http://127.0.0.1:{port}/v1", "--interactive"]
    child = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, preexec_fn=like_a_terminal)
    try:
        child.stdin.write("How many vacation days do I get each year?\n")
        child.stdin.flush()
        assert arrived.wait(HANG_S), "the first question never reached the server"
        child.send_signal(signal.SIGINT)          # while the kit waits on the first answer
        err = []
        for line in child.stderr:                 # the answer stopped, the session goes on
            err.append(line)
            if line.startswith("(interrupted: ask the next question"):
                break
        child.stdin.write("How many vacation days do I get each year?\n")
        child.stdin.close()
        out, rest = child.stdout.read(), child.stderr.read()     # both small: read to their end
        child.wait(HANG_S)
    finally:
        child.kill()
    assert child.returncode == 0, "".join(err) + rest
    assert out.count("== Your question") == 2 and "24 days.\n" in out.split("== Your question")[2]
    assert "Traceback" not in "".join(err) + rest
