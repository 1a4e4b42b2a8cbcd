"""
ragkit/chat_http.py: talking to an OpenAI-compatible chat server over HTTP, with Python's own
urllib, every read bounded in size and time.

    reply = ask(endpoint, body, key, timeout, deadline)             # {"choices": [...]}
    for event in stream(endpoint, body | {"stream": True}, ...):    # one dict per event
        ...

A server may be broken or hostile and send anything, so each limit is explicit:
  - time: each read waits at most `timeout` (no byte for that long: the server stopped), and
    the whole reply must end within `deadline` (ragkit/deadlines.py), so a server that
    trickles bytes or sends keep-alive comments for ever cannot stretch it;
  - size: a reply is read up to MAX_REPLY_BYTES, an error reply up to MAX_ERROR_BYTES, a line
    of a stream up to MAX_LINE_BYTES and an event up to MAX_EVENT_BYTES; each is read in
    bounded pieces and refused as soon as it is too long, never gathered whole first;
  - shape: a reply or a stream event must be a JSON object.
Whatever goes wrong is one line that names the server.

A streamed reply is text/event-stream: "data:" lines, an empty line after each event, lines
starting with ":" are comments (keep-alives), and "data: [DONE]" ends it:

    data: {"choices": [{"delta": {"content": "Every"}, "finish_reason": null}]}

    : ping
    data: [DONE]
"""

import json
import time
from contextlib import closing, contextmanager

from ragkit.deadlines import items_with_deadline, with_deadline
from ragkit.json_lines import parse_json
from ragkit.text import one_line

MAX_REPLY_BYTES = 8 << 20   # an answer's reply is kilobytes; a server sending more is cut off
MAX_ERROR_BYTES = 4096      # the start of an error reply says what went wrong (we show 300 chars)
# One event of a chat stream is a token's chunk, a few hundred bytes. The biggest a server may
# send at once is a whole answer in one event: 32,768 tokens (--max-tokens at most) of 4
# characters, JSON-escaped, is under 1 MB.
MAX_EVENT_BYTES = 1 << 20   # the data lines of one event, together
MAX_LINE_BYTES = 1 << 20    # one line: a longer one cannot be part of an event we accept
READ_BYTES = 1 << 16        # one read from the connection: what has arrived, at most this
SERVER_CHECK = "is the server running and is the model loaded?"


@contextmanager
def http_errors(endpoint: str, timeout: float):
    """What can go wrong between us and the server, each as one line that names it."""
    import http.client
    import urllib.error
    try:
        yield
    except urllib.error.HTTPError as exc:       # the server answered 4xx or 5xx
        try:
            detail = exc.read(MAX_ERROR_BYTES).decode("utf-8", "replace")   # never the whole body
        except (http.client.HTTPException, OSError):                        # cut off or too slow
            detail = ""
        finally:
            exc.close()
        raise RuntimeError(f"{endpoint} answered HTTP {exc.code}: "
                           f"{' '.join(detail.split())[:300] or 'no detail'}") from None
    except TimeoutError:                        # no byte for `timeout` seconds
        raise TimeoutError(f"{endpoint} stopped answering (nothing for {timeout:g} s)") from None
    except urllib.error.URLError as exc:        # no connection: refused, no such host, ...
        if isinstance(exc.reason, TimeoutError):
            raise TimeoutError(f"{endpoint} did not accept a connection within {timeout:g} s") from None
        raise RuntimeError(f"could not reach {endpoint}: {exc.reason} (is the server running? "
                           f"`python -m rageval.generation --serve` starts one)") from None
    except (http.client.HTTPException, OSError) as exc:   # a reply cut off or not HTTP at all
        raise RuntimeError(f"{endpoint} broke off its reply: {one_line(exc)}") from None


def open_reply(endpoint: str, body: dict, api_key: str, timeout: float):
    """POST `body` as JSON; the open reply (read it in pieces), or one line."""
    import urllib.request
    headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
    if api_key:                                 # a local server needs none
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(endpoint, json.dumps(body).encode(), headers)
    with http_errors(endpoint, timeout):
        return urllib.request.urlopen(request, timeout=timeout)


def json_object(raw: bytes, where: str, what: str) -> dict:
    """The JSON object in `raw`, or one line saying what came instead."""
    try:
        value = parse_json(raw)
    except ValueError:
        raise RuntimeError(f"{where} sent {what} that is not JSON: {raw[:80]!r}") from None
    if not isinstance(value, dict):             # 5, null, [1, 2], "x": JSON, but not a reply
        raise RuntimeError(f"{where} sent {what} that is not a JSON object: {json.dumps(value)[:80]}")
    return value


def ask(endpoint: str, body: dict, api_key: str, timeout: float, deadline: float) -> dict:
    """One chat request and its JSON reply, read up to MAX_REPLY_BYTES, all within `deadline`."""
    def work():
        with closing(open_reply(endpoint, body, api_key, timeout)) as reply, \
                http_errors(endpoint, timeout):
            raw = reply.read(MAX_REPLY_BYTES + 1)        # one byte more tells "too long"
        if len(raw) > MAX_REPLY_BYTES:
            raise RuntimeError(f"{endpoint} sent more than {MAX_REPLY_BYTES // 2**20} MB: not a "
                               f"chat answer; is --llm-url the right server?")
        return json_object(raw, endpoint, "a reply")
    return with_deadline(f"the model server at {endpoint}", deadline, work, SERVER_CHECK)


def lines(pieces, where: str):
    """The lines in a stream of byte pieces, without their line ends ("\\n" or "\\r\\n"); a line
    longer than MAX_LINE_BYTES stops the stream at once. b"da", b"ta: 1\\n\\nda" -> b"data: 1", b"" """
    line = bytearray()                           # the line being read, growing piece by piece
    for piece in pieces:
        *ends, rest = piece.split(b"\n")         # each of `ends` finishes a line
        for part in ends:
            line += part
            check_length(line, where)
            yield bytes(line).removesuffix(b"\r")
            line.clear()
        line += rest
        check_length(line, where)
    # a last line with no line end is dropped, as the event-stream standard says


def check_length(line: bytearray, where: str) -> None:
    """One line if a line of the stream is longer than MAX_LINE_BYTES."""
    if len(line) > MAX_LINE_BYTES:
        raise RuntimeError(f"{where} sent a line of more than {MAX_LINE_BYTES // 2**20} MB: "
                           f"not a chat stream")


def events(pieces, where: str):
    """The JSON object of each event of a text/event-stream, up to "data: [DONE]"."""
    data, size = [], 0                           # the data lines of the event being read
    for line in lines(pieces, where):
        field, _, value = line.partition(b":")
        if line and field == b"data":
            size += len(value)
            if size > MAX_EVENT_BYTES:
                raise RuntimeError(f"{where} sent an event of more than {MAX_EVENT_BYTES // 2**20} "
                                   f"MB (data lines with no empty line between them): not a chat stream")
            data.append(value.removeprefix(b" "))
        elif not line and data:                  # an empty line ends the event; comments and
            event, data, size = b"\n".join(data), [], 0     # other fields carry nothing we need
            if event == b"[DONE]":
                return
            chunk = json_object(event, where, "a stream event")
            if "error" in chunk:                 # a server that fails in mid-answer says so
                error = chunk["error"]
                message = error.get("message") if isinstance(error, dict) else error
                raise RuntimeError(f"{where} stopped with an error: {one_line(str(message))[:300]}")
            yield chunk


def received(reply, seconds: float):
    """What arrives on the connection, one read at a time, until it closes or `seconds` have
    passed: a reader whose answer was given up on at its deadline stops reading too."""
    ends = time.monotonic() + seconds
    while time.monotonic() < ends and (piece := reply.read1(READ_BYTES)):
        yield piece


def stream(endpoint: str, body: dict, api_key: str, timeout: float, deadline: float):
    """The events of a streamed chat reply as dicts, as they arrive; the reply opened and read
    to its end within `deadline`, each read within `timeout`."""
    def read():
        with closing(open_reply(endpoint, body, api_key, timeout)) as reply, \
                http_errors(endpoint, timeout):
            yield from events(received(reply, deadline), endpoint)
    return items_with_deadline(f"the model server at {endpoint}", deadline, read(),
                               SERVER_CHECK.replace("?", ", or is it looping?"))
