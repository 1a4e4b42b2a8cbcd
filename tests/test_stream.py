"""--stream: answers printed piece by piece, from SmolLM2 in this process, llama.cpp's own
OpenAI-compatible server, Bedrock's event stream (read by botocore) and the extractive generator;
servers that break a stream off are one line within their deadline."""
import os
import re
import subprocess
import sys
import threading
import time
import tracemalloc
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import LATE_S, ROOT, press_ctrl_c, serving
from test_generate import needs_local

import rag_from_scratch as rag
import verify_bedrock_request as vbr
from ragkit import answering, generators

LOCAL_STREAM = ["rag_from_scratch.py", "--backend", "tfidf", "--question", rag.VACATION_Q,
                "--generator", "local", "--local-model", "smollm2", "--stream"]


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
    shown = (out + rest).decode().split("== Step 7: the answer")[1]
    assert shown.split("\n", 1)[1].startswith("Every employee gets 24 zebra days [HR-01]\n"
                                              "-- checked against the passages --\n"
                                              "I don't know based on these documents.\n")   # no quote: not shown
    assert "  [stream] first piece after " in err.decode() and "(3 pieces in" in err.decode()   # words, then the citation whole


@pytest.mark.slow
@needs_local
def test_local_stream_prints_many_pieces_the_first_long_before_the_last():
    """SmolLM2 in this process, by the child's own clock (a busy machine only stretches it):
    the first piece is printed before the last one is generated."""
    import re
    done = subprocess.run([sys.executable, *LOCAL_STREAM], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    timing = re.search(r"\[stream\] first piece after ([\d.]+) s, then [\d.,]+ pieces/s "
                       r"\((\d+) pieces in ([\d.]+) s\)", done.stderr)
    first, pieces, total = float(timing[1]), int(timing[2]), float(timing[3])
    assert pieces >= 3 and first < total          # "The answer is: 5": its words, one by one
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
    before, reply = streamed.split("== Step 7: the answer (extractive: no model) ==\n")
    raw, checked = reply.split("-- checked against the passages --\n")
    untagged = lambda text: re.sub(r"<<(BEGIN|END) \w+", r"<<\1 TAG", text)    # a new tag each prompt
    assert untagged(plain) == untagged(before + "== Step 7: the answer (extractive: no model) ==\n" + checked)
    assert raw.startswith('Quote: "Flights shorter than 6 hours') and '[FIN-02 > Business travel policy]' in checked
    assert "  [stream] first piece after " in err and "(2 pieces in" in err
    refusing = generators.extractive_generator(stream=True).answer(answering.grounded_prompt("q?", [rag.build_chunks(rag.CORPUS)[0]]))
    assert list(refusing) == [answering.REFUSAL]


def test_a_streamed_answer_is_shown_as_it_comes_and_returned_whole(tfidf_setup, chunks, capsys):
    from ragkit import generators
    embedder, index = tfidf_setup
    prompt = answering.grounded_prompt(rag.VACATION_Q, rag.search(rag.VACATION_Q, index, chunks, embedder, 2))
    plain = "".join(generators.extractive_generator().answer(prompt))
    streamed = answering.print_stream(generators.extractive_generator(stream=True).answer(prompt))
    out, err = capsys.readouterr()
    assert plain == streamed and plain.endswith("[1]")
    assert out == streamed + "\n" and "[stream] first piece" in err


# Servers that break a stream: each one line, within the deadline (plus LATE_S on a busy machine).
GOOD = b'data: {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": null}]}\n\n'
BROKEN = {
    "malformed": (GOOD + b"data: {not json\n\n", RuntimeError, "not JSON"),
    "not a chunk": (GOOD + b'data: {"answer": 42}\n\n', RuntimeError, "not a chat completion"),
    "an error event": (GOOD + b'data: {"error": {"message": "model crashed"}}\n\n', RuntimeError,
                       "stopped with an error: model crashed"),
    "hangs up mid-answer": (GOOD, RuntimeError, "stopped in mid-answer"),
    "stalls mid-answer": (GOOD, TimeoutError, "stopped answering"),
    "never ends": (GOOD, TimeoutError, "had not finished answering after 2 s"),
}


def once(body: bytes, then=None):
    """A writer that sends `body`, then `then` until the client hangs up or the test ends,
    or (then="stall") nothing more until the test ends."""
    def write(wfile, stop):
        wfile.write(body)
        wfile.flush()
        while then not in (None, "stall") and not stop.is_set():
            wfile.write(then)
        if then == "stall":
            stop.wait()
    return write


@pytest.mark.slow
@pytest.mark.parametrize("kind", BROKEN)
def test_a_broken_stream_is_one_line_within_the_deadline(kind, monkeypatch):
    body, error, words = BROKEN[kind]
    monkeypatch.setattr(generators, "REPLY_DEADLINE_S", 2 if kind == "never ends" else LATE_S)
    if kind == "never ends":        # the deadline is what this case tests, not the size bound
        monkeypatch.setattr(generators, "CHARS_PER_TOKEN_AT_MOST", 10**12)
    then = {"never ends": GOOD, "stalls mid-answer": "stall"}.get(kind)
    with serving(once(body, then)) as url:
        remote = generators.openai_generator(url + "/v1", "m", timeout=2, stream=True)
        start = time.perf_counter()
        with pytest.raises(error, match=words) as caught:
            list(remote.reply("hi", "be brief"))
        assert time.perf_counter() - start < 2 + LATE_S
        assert "\n" not in str(caught.value)


def huge_event(wfile, stop):
    """One event of 100 MB: a chat chunk whose text is 100 MB of x."""
    wfile.write(b'data: {"choices": [{"index": 0, "delta": {"content": "')
    for _ in range(1600):
        wfile.write(b"x" * 65536)
    wfile.write(b'"}, "finish_reason": "stop"}]}\n\n')


# Servers that send what no chat server should: one line each, and never read whole (peak
# memory well under 1 GB: a few times the 1 MB line and event caps).
HOSTILE = {
    "event 5": (once(GOOD + b"data: 5\n\n"), r"a stream event that is not a JSON object: 5$"),
    "event null": (once(GOOD + b"data: null\n\n"), r"not a JSON object: null$"),
    "event [1,2]": (once(GOOD + b"data: [1,2]\n\n"), r"not a JSON object: \[1, 2\]$"),
    'event "x"': (once(GOOD + b'data: "x"\n\n'), r'not a JSON object: "x"$'),
    "an endless line": (once(GOOD + b"data: ", b"x" * 65536), r"sent a line of more than 1 MB"),
    "data lines with no empty line": (once(GOOD, b"data: " + b"x" * 1000 + b"\n"),
                                      r"sent an event of more than 1 MB \(data lines with no empty"),
    "an event of 100 MB": (huge_event, r"sent a line of more than 1 MB"),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_stream_is_one_line_and_never_read_whole(kind):
    write, words = HOSTILE[kind]
    tracemalloc.start()
    try:
        with serving(write) as url:
            remote = generators.openai_generator(url + "/v1", "m", timeout=LATE_S, stream=True)
            with pytest.raises(RuntimeError, match=words) as caught:
                list(remote.reply("hi", "be brief"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "\n" not in str(caught.value) and str(caught.value).startswith(url)
    assert peak < 4 * generators.MAX_LINE_BYTES, f"{peak / 2**20:.0f} MB held at once"


@pytest.mark.slow
@pytest.mark.parametrize("then", [b": keep-alive\n\n", "stall"],
                         ids=["endless keep-alive comments", "a stall"])
def test_the_whole_answer_has_one_deadline_that_nothing_stretches(then, monkeypatch):
    """Each read waits up to LATE_S; the whole answer only REPLY_DEADLINE_S (1 s here). The
    reader of endless keep-alives stops then too, and hangs up: no thread left reading."""
    monkeypatch.setattr(generators, "REPLY_DEADLINE_S", 1)
    hung_up = threading.Event()

    def write(wfile, stop):
        try:
            once(GOOD, then)(wfile, stop)
        except OSError:
            hung_up.set()
    with serving(write) as url:
        remote = generators.openai_generator(url + "/v1", "m", timeout=LATE_S, stream=True)
        with pytest.raises(TimeoutError, match=r"^the model server at .* had not finished "
                                               r"answering after 1 s: is the server running"):
            list(remote.reply("hi", "be brief"))
        assert then == "stall" or hung_up.wait(LATE_S)


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["blocking", "streamed"])
def test_an_endless_error_reply_is_one_line_read_only_to_its_start(stream):
    tracemalloc.start()
    try:
        with serving(once(b"", b"model crashed " * 4096), 500, "text/plain") as url:
            remote = generators.openai_generator(url + "/v1", "m", timeout=LATE_S, stream=stream)
            with pytest.raises(RuntimeError, match=r"/chat/completions answered HTTP 500: "
                                                   r"model crashed model crashed") as caught:
                list(remote.reply("hi", "be brief"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(str(caught.value)) < 400 and "\n" not in str(caught.value)
    assert peak < 4 * generators.MAX_LINE_BYTES, f"{peak / 2**20:.0f} MB held at once"


@contextmanager
def bedrock_at(write):
    """Bedrock's streamed answer from a server on 127.0.0.1, read by botocore itself: the real
    bedrock-runtime client pointed there, dummy keys, a read timeout of 1 s."""
    import boto3
    from botocore.config import Config
    with serving(write, content_type="application/vnd.amazon.eventstream") as url:
        config = Config(connect_timeout=1, read_timeout=1, retries={"total_max_attempts": 1})
        client = boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url=url,
                              aws_access_key_id="TEST-NOT-A-REAL-KEY",
                              aws_secret_access_key="test", config=config)
        yield generators.bedrock_generator("x", "us-east-1", client=client, stream=True)


def flipped(message: bytes) -> bytes:
    """An event-stream message with one byte of its payload changed (its checksum no longer fits)."""
    changed = bytearray(message)
    changed[-8] ^= 0xFF
    return bytes(changed)


START, DELTA = (vbr.event_message(*event) for event in (vbr.STREAM_EVENTS[0], vbr.STREAM_EVENTS[2]))
BEDROCK_BROKEN = {
    "stalls mid-answer": (once(START + DELTA, "stall"), r"stopped answering in mid-reply"),
    "a damaged event": (once(START + flipped(DELTA)), r"sent a reply stream that cannot be read "
                                                      r"\(ChecksumMismatch"),
    "bytes that are no event stream": (once(b"<html>Service Unavailable</html>\n" * 8),
                                       r"sent a reply stream that cannot be read"),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", BEDROCK_BROKEN)
def test_a_broken_bedrock_stream_is_one_line_of_advice(kind):
    write, words = BEDROCK_BROKEN[kind]
    with bedrock_at(write) as generate:
        with pytest.raises(RuntimeError, match=r"^Amazon Bedrock in us-east-1 " + words) as caught:
            list(generate.reply("prompt", "be brief"))
    assert "\n" not in str(caught.value)


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
    assert streamed.startswith(f'[extractive] Q: {rag.VACATION_Q}\nA: Quote: "Every full-time employee')
    table = lambda out: [line.split()[:1] + line.split()[2:]           # without s/answer
                         for line in out[out.index("generation on"):].splitlines()]
    assert table(streamed) == table(plain)
    assert err.count("  [stream] first piece after ") == len(gen.load_gold())
