"""--stream: answers printed piece by piece, from SmolLM2 in this process, llama.cpp's own
OpenAI-compatible server, Bedrock's event stream (read by botocore) and the extractive generator;
servers that break a stream off are one line within their deadline."""
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import LATE_S, ROOT, press_ctrl_c
from test_generate import needs_local

import rag_from_scratch as rag
import verify_bedrock_request as vbr
from ragkit import extractive as ext
from ragkit import llm

LOCAL_STREAM = ["rag_from_scratch.py", "--backend", "tfidf", "--question", rag.VACATION_Q,
                "--generator", "local", "--stream"]


def chunk(text: str, finish=None) -> bytes:
    """One server-sent event of an OpenAI-compatible chat stream."""
    import json
    delta = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    return b"data: " + json.dumps(delta).encode() + b"\n\n"


@pytest.mark.slow
def test_the_first_piece_is_on_screen_while_the_server_still_holds_the_rest():
    """No clock: the server sends "Every " and then waits until we have read it from the
    child's screen; only then does it send the rest. A child that waited for the whole answer
    before printing would never show the first piece (the wait is bounded: the test fails)."""
    seen = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def do_POST(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(chunk("Every "))
            self.wfile.flush()
            if seen.wait(LATE_S * 8):               # the child's screen shows "Every " by now
                self.wfile.write(chunk("employee gets 24 zebra days [HR-01]", "stop") + b"data: [DONE]\n\n")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    argv = ["rag_from_scratch.py", "--backend", "tfidf", "--question", rag.VACATION_Q, "--generator",
            "openai", "--llm-url", f"http://127.0.0.1:{server.server_port}/v1", "--stream"]
    proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        out = b""
        while b"Every " not in out.partition(b"== Step 7: the answer")[2]:
            piece = os.read(proc.stdout.fileno(), 65536)
            assert piece, f"the child ended before its first piece:\n{out.decode()}"
            out += piece
        assert b"zebra" not in out                  # the server has not sent it yet
        seen.set()
        rest, err = proc.communicate(timeout=LATE_S * 8)
        assert proc.returncode == 0, err.decode()
    finally:
        seen.set()
        proc.kill()
        server.shutdown()
        server.server_close()
    assert (out + rest).decode().endswith("Every employee gets 24 zebra days [HR-01]\nsources: Annual leave policy\n")
    assert "  [stream] first piece after " in err.decode() and "(2 pieces in" in err.decode()


@pytest.mark.slow
@needs_local
def test_local_stream_prints_many_pieces_the_first_long_before_the_last():
    """SmolLM2 in this process, by the child's own clock (a busy machine only stretches it):
    the first piece is printed before the last one is generated."""
    import re
    done = subprocess.run([sys.executable, *LOCAL_STREAM], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    timing = re.search(r"\[stream\] first piece after ([\d.]+) s, then \d+ pieces/s "
                       r"\((\d+) pieces in ([\d.]+) s\)", done.stderr)
    first, pieces, total = float(timing[1]), int(timing[2]), float(timing[3])
    assert pieces > 5 and first < total
    assert done.stdout.split("== Step 7: the answer (local")[1].split("\n", 1)[1].strip()


@pytest.mark.slow
@needs_local
def test_ctrl_c_during_a_local_stream_is_one_line_and_130():
    status, output = press_ctrl_c(LOCAL_STREAM, at="== Step 7: the answer")
    assert status == 130 and output.rstrip().endswith("interrupted")


def test_extractive_stream_prints_the_same_answer_as_without(capsys):
    argv = ["--backend", "tfidf", "--question", rag.EVAL_SET[-1]["question"],
            "--generator", "extractive"]
    assert rag.main(argv) == 0
    plain = capsys.readouterr().out
    assert rag.main([*argv, "--stream"]) == 0
    streamed, err = capsys.readouterr()
    assert streamed == plain and "[FIN-02] Claim" in plain
    assert "  [stream] first piece after " in err and "(2 pieces in" in err
    refusing = ext.extractive_generator(stream=True)(rag.build_prompt("q?", []), rag.SYSTEM_PROMPT)
    pieces = list(refusing)
    assert pieces == ["I don't know based on the company documents."]


def test_a_streamed_answer_is_shown_as_it_comes_and_returned_whole(tfidf_setup, chunks, capsys):
    from ragkit import llm
    embedder, index = tfidf_setup
    plain = ext.extractive_generator()
    streamed = llm.streaming(ext.extractive_generator(stream=True))
    asked = [rag.rag_answer(rag.VACATION_Q, index, chunks, embedder, 2, fn) for fn in (plain, streamed)]
    out, err = capsys.readouterr()
    assert asked[0]["answer"] == asked[1]["answer"] and asked[0]["answer"].endswith("[HR-01]")
    assert out == asked[1]["answer"] + "\n" and streamed.streams and "[stream] first piece" in err


# Servers that break a stream: each one line, within the deadline (plus LATE_S on a busy machine).
GOOD = b'data: {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": null}]}\n\n'
BROKEN = {
    "malformed": (GOOD + b"data: {not json\n\n", RuntimeError, "not JSON"),
    "not a chunk": (GOOD + b'data: {"answer": 42}\n\n', RuntimeError, "not a chat completion"),
    "an error event": (GOOD + b'data: {"error": {"message": "model crashed"}}\n\n', RuntimeError,
                       "stopped with an error: model crashed"),
    "hangs up mid-answer": (GOOD, RuntimeError, "stopped in mid-answer"),
    "stalls mid-answer": (GOOD, TimeoutError, "stopped answering"),
    "never ends": (GOOD, TimeoutError, "still answering after 2 s"),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", BROKEN)
def test_a_broken_stream_is_one_line_within_the_deadline(kind):
    body, error, words = BROKEN[kind]
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"              # the body ends when the connection closes

        def do_POST(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
            while kind == "never ends" and not stop.is_set():
                self.wfile.write(GOOD)
            if kind == "stalls mid-answer":
                stop.wait(LATE_S + 30)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/v1"
        remote = llm.openai_generator(url, "m", timeout=2, stream=True)
        start = time.perf_counter()
        with pytest.raises(error, match=words) as caught:
            list(remote("hi", "be brief"))
        assert time.perf_counter() - start < 2 + LATE_S
        assert "\n" not in str(caught.value)
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


def test_bedrock_stream_request_is_valid_and_only_text_deltas_are_kept(dummy_aws_env):
    names, pieces = vbr.check_stream("prompt")
    assert names == vbr.EXPECTED_PARAMS and pieces == [vbr.FAKE_TEXT[:10], vbr.FAKE_TEXT[10:]]


def test_bedrock_error_event_in_mid_stream_is_one_line_of_advice(dummy_aws_env):
    events = [*vbr.STREAM_EVENTS[:3], ("throttlingException", {"message": "slow"}, "exception")]
    with pytest.raises(RuntimeError, match=r"^Bedrock returned throttlingException: slow$"):
        vbr.check_stream("prompt", events)


@pytest.fixture()
def dummy_aws_env():
    with vbr.dummy_aws_env():
        yield


def test_rag_generate_streams_each_answer_and_scores_it_the_same(capsys):
    from rageval import generation as gen
    assert gen.main(["--generators", "extractive"]) == 0
    plain = capsys.readouterr().out
    assert gen.main(["--generators", "extractive", "--stream"]) == 0
    streamed, err = capsys.readouterr()
    assert streamed.startswith(f"[extractive] Q: {rag.VACATION_Q}\nA: Every full-time employee")
    table = lambda out: [line.split()[:1] + line.split()[2:]           # without s/answer
                         for line in out[out.index("generation on"):].splitlines()]
    assert table(streamed) == table(plain)
    assert err.count("  [stream] first piece after ") == len(gen.load_gold())
