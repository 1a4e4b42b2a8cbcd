"""ragkit/generators.py: language models that write the answer, offline or on your own server.

    python rag_from_scratch.py --question "How much time off do new fathers get?" --generator local
    python -m rageval.generation --serve    # a model as an OpenAI-compatible server on 127.0.0.1
    python rag_from_scratch.py --question "..." --generator openai --llm-url http://127.0.0.1:PORT/v1

Every generator is a small type with the fields of Generator below; its answer(prompt) reads a
grounded prompt (ragkit/answering.py's GroundedPrompt) and returns the reply. The models are also
the lesson's llm_fn: model(prompt_text, system_prompt) -> str, as rag_answer takes. Built with
stream=True, they return an iterator of text pieces instead; make_generator (--stream) wraps
that in Streaming, which prints the pieces as they arrive and returns the text:
  extractive  no model: the retrieved sentences that answer (ragkit/extractive.py)
  local       a GGUF model on llama.cpp, in this process, greedy, on the cores no other process
              is using: Qwen2.5-Coder-1.5B where its parts are installed, else SmolLM2-135M,
              or --local-model FILE (ragkit/llama.py finds it, ragkit/llama.py loads it)
  openai      any OpenAI-compatible /v1/chat/completions server (Ollama, llama.cpp, vLLM, ...),
              over HTTP with Python's own urllib (ragkit/generators.py: nothing to install)
  bedrock     Amazon Bedrock through the lesson (billed; ragkit/generators.py)
"""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import rag_from_scratch as rag
from ragkit.answering import GroundedPrompt, Guarded
from ragkit.llama import (context_for, free_cores, llama_chunks, load_guarded, PROGRESS, rate, shown,
                          start_llama, THREADS)
from ragkit.support import (bounded, items_with_deadline, one_line, parse_json, plural, printable,
                            with_deadline)


# == An OpenAI-compatible server over HTTP (--generator openai) ====================================
# talking to an OpenAI-compatible chat server over HTTP, with Python's own
# urllib, every read bounded in size and time.
#
#     reply = ask(endpoint, body, key, timeout, deadline)             # {"choices": [...]}
#     for event in stream(endpoint, body | {"stream": True}, ...):    # one dict per event
#         ...
#
# A server may be broken or hostile and send anything, so each limit is explicit:
#   - time: each read waits at most `timeout` (no byte for that long: the server stopped), and
#     the whole reply must end within `deadline` (ragkit/support.py), so a server that
#     trickles bytes or sends keep-alive comments for ever cannot stretch it;
#   - size: a reply is read up to MAX_REPLY_BYTES, an error reply up to MAX_ERROR_BYTES, a line
#     of a stream up to MAX_LINE_BYTES and an event up to MAX_EVENT_BYTES; each is read in
#     bounded pieces and refused as soon as it is too long, never gathered whole first;
#   - shape: a reply or a stream event must be a JSON object.
# Whatever goes wrong is one line that names the server.
#
# A streamed reply is text/event-stream: "data:" lines, an empty line after each event, lines
# starting with ":" are comments (keep-alives), and "data: [DONE]" ends it:
#
#     data: {"choices": [{"delta": {"content": "Every"}, "finish_reason": null}]}
#
#     : ping
#     data: [DONE]


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


# == Amazon Bedrock (--generator bedrock, --generate) ==============================================
# Amazon Bedrock for the command line, with advice instead of tracebacks.
#
# rag_from_scratch.generate_with_bedrock is the lesson: one Converse call. This companion
# wraps it for `--generate` so a learner's first run fails kindly and never hangs:
#   - before any work: the placeholder model id, boto3 missing, a profile that does not
#     exist, or no credentials at all, each one line that says what to set up;
#   - during the call: one overall deadline (botocore's own timeouts apply per attempt and
#     its retries multiply them), said on stderr before waiting; a streamed answer's events
#     all arrive within it too, and a stall or damaged bytes in mid-stream are one line;
#   - every Converse error code: one line of advice a learner can act on.


ATTEMPTS = 3                 # botocore standard retry mode: the first try included
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 20          # per attempt; a RAG answer of 300 tokens takes a few seconds
DEADLINE_S = 45              # for the whole call, retries included

# What a learner should do about each Bedrock error code (the Converse API's nine, plus
# the two that bad keys give).
ADVICE = {
    "AccessDeniedException": "access denied to model {model_id}: enable access to it in the "
                             "Bedrock console (Model access) for {region} and allow "
                             "bedrock:InvokeModel for your IAM identity",
    "ValidationException": "Bedrock rejected the request for {model_id}: check that --model-id "
                           "is a model or inference-profile id offered in {region}",
    "ResourceNotFoundException": "model {model_id} was not found in {region}: copy the id from "
                                 "the Bedrock model catalog, or try another --region",
    "ThrottlingException": "Bedrock is throttling requests (gave up after {attempts} attempts): "
                           "wait a minute and retry, or ask for a higher quota",
    "ModelTimeoutException": "model {model_id} took too long to answer: retry, or ask for a "
                             "shorter answer with a smaller --k",
    "ModelNotReadyException": "model {model_id} is not ready yet (it may be starting up): "
                              "wait a minute and retry",
    "ServiceUnavailableException": "Bedrock in {region} is unavailable right now: retry later "
                                   "or try another --region",
    "InternalServerException": "Bedrock had an internal error: retry; if it persists, check "
                               "the AWS Health Dashboard for {region}",
    "ModelErrorException": "model {model_id} failed while answering: retry, or try another model",
    "UnrecognizedClientException": "AWS does not recognise your access key: check "
                                   "AWS_ACCESS_KEY_ID or run `aws configure` again",
    "ExpiredTokenException": "your AWS session token has expired: refresh your credentials "
                             "(e.g. `aws sso login`) and retry",
}


def aws_session(region: str = "us-east-1"):
    """A boto3 session that has credentials, or one clear error: boto3 missing, a profile
    that does not exist, no credentials at all. No client is made and nothing is sent."""
    try:
        import boto3
        from botocore.exceptions import ProfileNotFound
    except ImportError:
        raise RuntimeError("boto3 is not installed: run `.venv/bin/pip install boto3`") from None
    if os.environ.get("AWS_PROFILE") == "":
        raise RuntimeError("AWS_PROFILE is set but empty: unset it or name a profile")
    try:
        session = boto3.Session(region_name=region)
        credentials = session.get_credentials()
    except ProfileNotFound as exc:
        raise RuntimeError(f"{exc}: check AWS_PROFILE or run `aws configure --profile NAME`") from None
    if credentials is None:
        raise RuntimeError("no AWS credentials found: run `aws configure` (or set AWS_PROFILE, "
                           "or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) before --generate")
    return session


def bedrock_client(region: str = "us-east-1", attempts: int = ATTEMPTS):
    """A bedrock-runtime client with bounded timeouts and retries, or one clear error."""
    from botocore.config import Config
    config = Config(connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S,
                    retries={"mode": "standard", "total_max_attempts": attempts})
    return aws_session(region).client("bedrock-runtime", config=config)


def check_model_id(model_id: str) -> None:
    """ValueError for the placeholder model id (or none)."""
    if not model_id or model_id.startswith("<"):
        raise ValueError("Amazon Bedrock needs a real --model-id (a model or inference-profile "
                         "id enabled in your account), not the placeholder")


def check_setup(model_id: str, region: str) -> None:
    """Before any slow work: the model id is not the placeholder and credentials exist, so a
    first run fails in a second with what to set up."""
    check_model_id(model_id)
    aws_session(region)


def explain(exc: Exception, model_id: str, region: str, attempts: int = ATTEMPTS) -> Exception:
    """A botocore error turned into a RuntimeError (or ValueError) with advice."""
    from botocore.eventstream import ParserError
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, ParamValidationError
    from urllib3.exceptions import HTTPError as ReadError     # botocore reads a stream with urllib3
    if isinstance(exc, NoCredentialsError):
        return RuntimeError("no AWS credentials found: run `aws configure` before --generate")
    if isinstance(exc, ParamValidationError):          # our request broke the Converse schema
        return ValueError(f"invalid Converse request: {exc}")
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code, message = error.get("Code", ""), error.get("Message", "")
        advice = ADVICE.get(code, "Bedrock returned {code}: {message}")
        return RuntimeError(advice.format(model_id=model_id, region=region, attempts=attempts,
                                          code=code, message=message))
    if isinstance(exc, BotoCoreError):
        return RuntimeError(f"could not reach Bedrock in {region}: {exc}")
    if isinstance(exc, ParserError):                  # ConverseStream's bytes, damaged on the way
        return RuntimeError(f"Amazon Bedrock in {region} sent a reply stream that cannot be read "
                            f"({type(exc).__name__}: {exc}): retry; if it persists, a proxy or "
                            f"firewall may be changing replies")
    if isinstance(exc, ReadError):                    # a stall or a broken connection, mid-stream
        return RuntimeError(f"Amazon Bedrock in {region} stopped answering in mid-reply ({exc}): "
                            f"check your network and retry")
    return exc


@dataclass
class Bedrock:
    """Amazon Bedrock as a generator: bedrock(prompt, system_prompt) -> str, the lesson's llm_fn,
    bounded in time, with advice on errors; with streams, an iterator of the answer's pieces."""
    model_id: str
    region: str
    client: object              # bedrock-runtime, with bounded timeouts and retries
    deadline_s: float = DEADLINE_S
    streams: bool = False
    runtime: str = "Amazon Bedrock, billed"
    truncated: bool = False     # Converse's stop reason is not read: never known to be cut
    usage: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The name shown above the answer."""
        return self.runtime

    @property
    def attempts(self) -> int:
        """The tries botocore makes of one call, the first included."""
        return (self.client.meta.config.retries or {}).get("total_max_attempts", ATTEMPTS)

    def answer(self, prompt):
        """The answer to a grounded prompt (ragkit/answering.py): its text and system prompt."""
        return self(prompt.text, prompt.system)

    def __call__(self, prompt: str, system_prompt: str):
        if self.streams:
            return self.pieces(prompt, system_prompt)
        where = f"Amazon Bedrock in {self.region}"
        ask = lambda: rag.generate_with_bedrock(prompt, system_prompt, self.model_id, self.region,
                                                client=self.client)
        try:
            return printable(with_deadline(where, self.deadline_s, ask, f"check your network and "
                                           f"that {self.region} is the right --region"))
        except Exception as exc:
            raise explain(exc, self.model_id, self.region, self.attempts) from None

    def events(self, prompt: str, system_prompt: str):
        """ConverseStream's events, read by botocore as they arrive."""
        request = rag.converse_request(prompt, system_prompt, self.model_id)   # generate_with_bedrock's
        yield from self.client.converse_stream(**request)["stream"]

    def pieces(self, prompt: str, system_prompt: str):
        """The answer's text deltas, the request and every event within deadline_s; each read
        within botocore's READ_TIMEOUT_S; every error one line of advice."""
        try:
            for event in items_with_deadline(f"Amazon Bedrock in {self.region}", self.deadline_s,
                                             self.events(prompt, system_prompt), "check your network"):
                text = event.get("contentBlockDelta", {}).get("delta", {}).get("text")
                if text:                  # reasoning deltas and metadata events: skipped
                    yield printable(text)
        except Exception as exc:
            raise explain(exc, self.model_id, self.region, self.attempts) from None


def bedrock_generator(model_id: str, region: str = "us-east-1", client=None,
                      deadline_s: float = DEADLINE_S, stream: bool = False) -> Bedrock:
    """The Bedrock generator (the placeholder model id refused now); stream=True: its answer
    comes as an iterator of text pieces (converse_stream)."""
    check_model_id(model_id)
    return Bedrock(model_id, region, client or bedrock_client(region), deadline_s, stream)

# The longest answer the local and OpenAI-compatible generators may write: a quote or two and
# a short answer. Qwen's replies to the development sets' grounded prompts had a median of 59
# tokens; 4 of 47 needed more than 128 (rageval/answer_tuning.py asks with this limit).
MAX_TOKENS = 200
MAX_TOKENS_LIMIT = 32_768  # --max-tokens at most: far more than a RAG answer needs
LLM_TIMEOUT_S = 60.0      # an OpenAI-compatible server silent this long (connecting, or any one
                          # read of its reply) has stopped
REPLY_DEADLINE_S = 120.0  # its whole answer, streamed or not: 128 tokens take 3-6 s here, a long
                          # answer of a big model on a slow CPU a minute; keep-alives do not extend it
STREAMED = {"stream": True, "stream_options": {"include_usage": True}}   # token counts at the end


class Generator(Protocol):
    """What the kit reads of every generator: LocalModel, OpenAIModel and Streaming here,
    ragkit/extractive.py's Extractive, ragkit/generators.py's Bedrock, ragkit/answering.py's Guarded
    (and the evaluation's rageval/devset.py's Keeping)."""
    name: str          # shown above the answer: "local: SmolLM2-135M-Instruct Q4_1, ..."
    runtime: str       # what runs it: the model, its runtime and threads, or its server
    streams: bool      # answer() returns the pieces as they are written
    truncated: bool    # the last reply stopped at the token limit
    usage: dict        # the last reply's token counts, when the model sent them

    def answer(self, prompt: GroundedPrompt):
        """The reply to a grounded prompt: a string, or its pieces when it streams."""


# ---------------------------------------------------------------------------
# The local generator: a GGUF model on llama.cpp, in this process (ragkit/llama.py finds it)
# ---------------------------------------------------------------------------
def chat_request(prompt: str, system_prompt: str, max_tokens: int) -> dict:
    """An OpenAI chat-completions request: greedy (temperature 0), bounded length."""
    return {"messages": [{"role": "system", "content": system_prompt},
                         {"role": "user", "content": prompt}],
            "temperature": 0.0, "max_tokens": max_tokens, "seed": 0}


def reply_text(reply, where: str) -> tuple[str, bool]:
    """(answer text, whether it stopped at the token limit) from a chat-completions reply."""
    try:
        choice = reply["choices"][0]
        text = choice["message"]["content"]
        if not isinstance(text, str):
            raise TypeError
    except (KeyError, IndexError, TypeError):
        detail = reply.get("error", reply) if isinstance(reply, dict) else reply
        raise RuntimeError(f"{where} sent a reply that is not a chat completion: "
                           f"{json.dumps(detail)[:200]}") from None
    return printable(text.strip()), choice.get("finish_reason") == "length"


CHARS_PER_TOKEN_AT_MOST = 32     # a token of a run of spaces or of a long word: more is no reply


def too_long(size: int, max_tokens: int, where: str) -> None:
    """RuntimeError when a reply holds more text than max_tokens tokens can: the check that
    follows is then bounded by what a reply can honestly be, before it starts."""
    if size > CHARS_PER_TOKEN_AT_MOST * max_tokens:
        raise RuntimeError(f"{where} sent over {CHARS_PER_TOKEN_AT_MOST * max_tokens:,} bytes, more than "
                           f"{max_tokens} tokens can hold: not a reply to this request (--max-tokens)")


def stream_text(chunks, where: str, model):
    """Yield the text of OpenAI-style stream chunks ({"choices": [{"delta": {"content": ...}}]}),
    within MAX_REPLY_BYTES (ragkit/generators.py); then set the model's truncated and usage
    (token counts, if the server sent them). Breaks are one line."""
    size, reason, usage = 0, None, None
    for chunk in chunks:
        try:
            choice = chunk["choices"][0] if chunk["choices"] else {"delta": {}}   # usage only
            text = choice["delta"].get("content") or ""
            reason = choice.get("finish_reason") or reason
            usage = chunk.get("usage") or usage
            size += len(text.encode())
        except (KeyError, IndexError, TypeError, AttributeError):
            detail = chunk.get("error", chunk) if isinstance(chunk, dict) else chunk
            raise RuntimeError(f"{where} sent a stream event that is not a chat completion "
                               f"chunk: {json.dumps(detail)[:200]}") from None
        if size > MAX_REPLY_BYTES:
            raise RuntimeError(f"{where} sent more than {MAX_REPLY_BYTES // 2**20} MB of "
                               f"text: not a chat answer of {MAX_TOKENS} tokens")
        too_long(size, model.max_tokens, where)
        if text:
            yield printable(text)
    if reason is None:            # every server ends a whole answer with a finish_reason
        raise RuntimeError(f"{where} stopped in mid-answer (no finish_reason before the end)")
    model.truncated, model.usage = reason == "length", usage or {}


def print_stream(pieces) -> str:
    """Print an answer piece by piece as it arrives; then, on stderr, the wait for the first piece
    (prefill: the model reads the whole prompt) and pieces/s after it (decode: one token each)."""
    start, first, text = time.perf_counter(), None, []
    try:
        for piece in pieces:
            first = first or time.perf_counter()
            text.append(piece)
            print(piece, end="", flush=True)
    finally:                        # Ctrl-C or a broken stream: what came stays, on its own line
        print(flush=True)
    end = time.perf_counter()
    if first is None:                 # an empty reply: no wait to a first piece, no rate
        said = "no piece came"
    else:
        said = f"first piece after {first - start:.2f} s"
        per_second = rate(len(text) - 1, end - first, "pieces")     # the pieces after the first
        said += f", then {per_second[2:-1]}" if per_second else ""
    print(f"  [stream] {said} ({plural(len(text), 'piece')} in {end - start:.2f} s)", file=sys.stderr)
    return "".join(text)


@dataclass
class Streaming:
    """The one place an answer that arrives in pieces is shown: answer(prompt) prints the
    pieces of model.answer(prompt) as they come, then returns the text."""
    model: Generator

    name = property(lambda self: self.model.name)
    runtime = property(lambda self: self.model.runtime)
    streams = property(lambda self: True)
    truncated = property(lambda self: self.model.truncated)    # known once the stream ends
    usage = property(lambda self: self.model.usage)

    def answer(self, prompt: GroundedPrompt) -> str:
        """The answer, printed piece by piece as it is written."""
        return print_stream(self.model.answer(prompt))


@dataclass
class LocalModel:
    """A GGUF model on llama.cpp in this process, greedy, on `threads` CPU threads: the lesson's
    llm_fn, model(prompt, system_prompt). It is loaded at the first question, with a context
    sized to that prompt (a longer prompt later: loaded anew). A file of your own is loaded in a
    guarded child first (load_guarded)."""
    path: Path
    runtime: str                     # "SmolLM2-135M-Instruct Q4_1, xllamacpp ..., 1 thread"
    threads: int = THREADS
    max_tokens: int = MAX_TOKENS
    streams: bool = False
    checked: bool = True             # False for a file of your own until a child has loaded it
    truncated: bool = False
    usage: dict = field(default_factory=dict)
    loaded: dict = field(default_factory=dict, repr=False)     # n_ctx -> server: at most one

    @property
    def name(self) -> str:
        """The name shown above the answer."""
        return f"local: {self.runtime}"

    def server_for(self, prompt: str, system_prompt: str):
        """The loaded server, or one loaded now with a context this prompt fits in."""
        n_ctx = context_for(len(prompt) + len(system_prompt), self.max_tokens)
        if self.loaded and max(self.loaded) >= n_ctx:
            return self.loaded[max(self.loaded)]
        if not self.checked:
            load_guarded(self.path)
            self.checked = True
        start = time.perf_counter()
        self.loaded.clear()
        self.loaded[n_ctx] = start_llama(self.path, self.threads, n_ctx=n_ctx)
        print(f"loaded {self.runtime}, context {n_ctx:,} tokens, in "
              f"{time.perf_counter() - start:.1f} s", file=sys.stderr)
        return self.loaded[n_ctx]

    def answer(self, prompt: GroundedPrompt):
        """The reply to a grounded prompt: its text and system prompt."""
        return self(prompt.text, prompt.system)

    def __call__(self, prompt: str, system_prompt: str = rag.SYSTEM_PROMPT):
        """The reply, streamed inside so that llama.cpp's own counts show on stderr while it
        reads the prompt and writes (ragkit/llama.py). With streams, its pieces as they come."""
        server = self.server_for(prompt, system_prompt)
        request = chat_request(prompt, system_prompt, self.max_tokens) | PROGRESS
        chunks = shown(llama_chunks(server, request | STREAMED), writing=not self.streams)
        pieces = stream_text(chunks, "llama.cpp", self)          # sets truncated and usage at the end
        if self.streams:
            return pieces
        text = printable("".join(pieces).strip())
        if self.truncated:
            print("  [local] hit the token limit", file=sys.stderr)
        return text


def local_generator(model: str | None = None, threads: int = THREADS, max_tokens: int = MAX_TOKENS,
                    stream: bool = False) -> LocalModel:
    """The LocalModel for --local-model (ragkit/llama.py: qwen, smollm2 or a path; None: qwen
    when installed): Qwen's parts are joined here, the first time."""
    from importlib.metadata import version
    from ragkit import llama
    path, name = llama.model_file(model)        # the model file: Qwen, SmolLM2 or your own
    runtime = f"{printable(name, lines=False)}, xllamacpp {version('xllamacpp')}, {plural(threads, 'thread')}"
    own = model not in (None, *llama.NAMES)  # qwen and smollm2 are pinned
    return LocalModel(path, runtime, threads, max_tokens, stream, not own)


# ---------------------------------------------------------------------------
# Any OpenAI-compatible server, over HTTP (ragkit/generators.py: every read bounded)
# ---------------------------------------------------------------------------
@dataclass
class OpenAIModel:
    """Any OpenAI-compatible chat endpoint: the lesson's llm_fn, model(prompt, system_prompt).
    Each read waits at most `timeout`; the whole answer takes at most REPLY_DEADLINE_S."""
    endpoint: str              # http://HOST:PORT/v1/chat/completions
    model: str
    api_key: str = ""
    max_tokens: int = MAX_TOKENS
    timeout: float = LLM_TIMEOUT_S
    streams: bool = False
    truncated: bool = False
    usage: dict = field(default_factory=dict)

    runtime = property(lambda self: f"{self.model} at {self.endpoint}")
    name = property(lambda self: f"openai: {self.runtime}")

    def answer(self, prompt: GroundedPrompt):
        """The reply to a grounded prompt: its text and system prompt."""
        return self(prompt.text, prompt.system)

    def __call__(self, prompt: str, system_prompt: str = rag.SYSTEM_PROMPT):
        body = chat_request(prompt, system_prompt, self.max_tokens) | {"model": self.model}
        if self.streams:
            chunks = stream(self.endpoint, body | STREAMED, self.api_key, self.timeout,
                                      REPLY_DEADLINE_S)
            return stream_text(chunks, self.endpoint, self)
        reply = ask(self.endpoint, body, self.api_key, self.timeout, REPLY_DEADLINE_S)
        text, self.truncated = reply_text(reply, self.endpoint)
        too_long(len(text.encode()), self.max_tokens, self.endpoint)
        return text


def openai_generator(url: str, model: str, api_key_env: str = "OPENAI_API_KEY",
                     max_tokens: int = MAX_TOKENS, timeout: float = LLM_TIMEOUT_S,
                     stream: bool = False) -> OpenAIModel:
    """The OpenAIModel at `url` (.../v1); the key, if any, comes from `api_key_env`."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"--llm-url must start with http:// or https://, got {url!r}")
    if not model:
        raise ValueError("--llm-model is empty: give the model name the server knows")
    endpoint = url.rstrip("/").removesuffix("/chat/completions") + "/chat/completions"
    api_key = os.environ.get(api_key_env, "") if api_key_env else ""
    return OpenAIModel(endpoint, model, api_key, max_tokens, timeout, stream)


GENERATORS = ("extractive", "local", "openai", "bedrock")


@dataclass(frozen=True)
class ModelSettings:
    """What the generators read of the flags add_model_arguments declares (and of the
    tutorial's --model-id and --region, for Bedrock)."""
    local_model: str | None = None      # qwen, smollm2 or a .gguf file; None: qwen if installed
    threads: int | None = None          # None: the cores no other process is using
    max_tokens: int = MAX_TOKENS
    llm_url: str | None = None
    llm_model: str = "local"
    api_key_env: str = "OPENAI_API_KEY"
    model_id: str | None = None
    region: str = "us-east-1"


def check_generator(name: str, models: ModelSettings) -> None:
    """What can be checked of --generator before any slow work, loading, joining and starting
    nothing: llama.cpp and the local model's file (or Qwen's parts) are there, the server's
    address is one, Bedrock has credentials."""
    if name == "local":
        from ragkit import llama
        llama.find_model(models.local_model)  # Qwen's parts are joined when the model is built
    elif name == "openai" and not models.llm_url:
        raise ValueError("the openai generator needs --llm-url http://HOST:PORT/v1 (and "
                         "--llm-model NAME if the server does not call its model 'local')")
    elif name == "openai" and not models.llm_url.startswith(("http://", "https://")):
        raise ValueError(f"--llm-url must start with http:// or https://, got {models.llm_url!r}")
    elif name == "bedrock":      # billed per token; fails now without credentials
        check_setup(models.model_id, models.region)


def make_generator(name: str, models: ModelSettings = ModelSettings(), stream: bool = False,
                   embedder=None, chunks=None) -> Generator:
    """The one place a generator is built, from the settings its name needs. stream: print the
    answer as it is written (--stream); embedder and chunks: the index's, which the extractive
    answer scores sentences with and learns the pages' words from."""
    if name == "extractive":
        from ragkit import extractive
        llm = extractive.extractive_generator(stream=stream, embedder=embedder, chunks=chunks)
    elif name == "local":
        llm = local_generator(models.local_model, models.threads or free_cores(), models.max_tokens,
                              stream)
    elif name == "openai":
        llm = openai_generator(models.llm_url, models.llm_model, models.api_key_env,
                               models.max_tokens, stream=stream)
    elif name == "bedrock":
        llm = bedrock_generator(models.model_id, models.region, stream=stream)
    else:
        raise ValueError(f"unknown generator {name!r}: choose from {', '.join(GENERATORS)}")
    if name != "extractive":               # fence markers, invented sources and loops never shown
        llm = Guarded(llm)
    return Streaming(llm) if stream else llm   # the pieces shown as they arrive, the text returned


def add_model_arguments(p) -> None:
    """The flags every generator needs: shared by rageval/generation.py and the kit's CLI."""
    p.add_argument("--llm-url", help="OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1")
    p.add_argument("--llm-model", default="local", help="model name the server knows (default: %(default)s)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY",
                   help="environment variable holding the server's key, if it needs one "
                        "(default: %(default)s)")
    p.add_argument("--max-tokens", type=bounded(int, 1, MAX_TOKENS_LIMIT), default=MAX_TOKENS,
                   help="answer length limit (default: %(default)s)")
    p.add_argument("--threads", type=bounded(int, 1, os.cpu_count() or 1),
                   help="llama.cpp threads, at most one per core (default: the cores no other "
                        "process is using when the model starts)")
    p.add_argument("--local-model", metavar="qwen|smollm2|FILE.gguf",
                   help="the model --generator local loads: qwen (Qwen2.5-Coder-1.5B, the default "
                        "once its parts are installed), smollm2 (SmolLM2-135M: small and fast, not "
                        "to be trusted) or any .gguf file (default: qwen once its parts are "
                        "installed, else smollm2)")
