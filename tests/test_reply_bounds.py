"""Replies bounded where they enter: a model's reply longer than --max-tokens can hold is one
error before any check reads it; the development runs' kept replies (rageval/devset.py), damaged,
are one line naming the file and the line (a last line cut short by a kill is skipped)."""
import json

import pytest

from rageval import devset


def write(tmp_path, *lines):
    path = tmp_path / "answers-model.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_kept_replies_are_read_and_a_last_line_cut_short_is_skipped(tmp_path):
    good = json.dumps({"key": "a", "reply": "Sentences: [1.1]\nAnswer: yes."})
    assert set(devset.read_kept(write(tmp_path, good, '{"key": "b", "rep'))) == {"a"}


@pytest.mark.parametrize("record, said", [
    ({"key": "a", "reply": 42}, 'line 1 is not a kept reply'),
    ({"key": "a", "reply": ["x"]}, 'line 1 is not a kept reply'),
    ({"key": ["a"], "reply": "x"}, 'line 1 is not a kept reply'),
    (["a", "x"], 'line 1 is not a kept reply'),
])
def test_a_record_that_is_no_reply_is_one_error_naming_the_file_and_line(tmp_path, record, said):
    path = write(tmp_path, json.dumps(record), json.dumps({"key": "b", "reply": "x"}))
    with pytest.raises(ValueError, match=said) as error:
        devset.read_kept(path)
    assert str(error.value).startswith(f"{path}: line 1 ")


def test_a_broken_line_before_the_last_and_an_oversized_line_are_named(tmp_path):
    with pytest.raises(ValueError, match="line 1 is not JSON"):
        devset.read_kept(write(tmp_path, "{not json", json.dumps({"key": "b", "reply": "x"})))
    huge = json.dumps({"key": "c", "reply": "x" * (devset.MAX_KEPT_LINE + 1)})
    with pytest.raises(ValueError, match=r"line 2 is 1,048,\d+ characters, not a kept reply"):
        devset.read_kept(write(tmp_path, json.dumps({"key": "b", "reply": "x"}), huge))


# --- a reply is bounded by what --max-tokens allows, before any check reads it --------------
@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True])
def test_a_reply_longer_than_max_tokens_can_hold_is_one_error_before_any_check(stream):
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from ragkit import generators
    quote = 'Quote: "Backups run every night at 02:00." [1]\n'
    text = quote * (7_700_000 // len(quote))                  # 7.7 MB of valid-looking quotes

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.end_headers()
            try:
                if not stream:
                    self.wfile.write(json.dumps({"choices": [{"message": {"content": text},
                                                              "finish_reason": "stop"}]}).encode())
                for n in range(0, len(text), 4096) if stream else ():
                    event = {"choices": [{"index": 0, "delta": {"content": text[n:n + 4096]},
                                          "finish_reason": None}]}
                    self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            except OSError:
                pass                                    # the client hung up: as it should

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        model = generators.openai_generator(f"http://127.0.0.1:{server.server_port}/v1", "m", stream=stream)
        with pytest.raises(RuntimeError, match=r"sent over 6,400 bytes, more than 200 tokens can hold"):
            "".join(model.reply("prompt", "system"))
    finally:
        server.shutdown()
        server.server_close()
