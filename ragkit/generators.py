"""ragkit/generators.py: language models that write the answer, offline or on your own server.

    python rag_from_scratch.py --question "How much time off do new fathers get?" --generator local
    python -m rageval.generation --serve    # a model as an OpenAI-compatible server on 127.0.0.1
    python rag_from_scratch.py --question "..." --generator openai --llm-url http://127.0.0.1:PORT/v1

Every generator is a small type with the fields of Generator below: a name, whether its answer
is printed as it comes (--stream), and answer(prompt), which reads a grounded prompt
(ragkit/answering.py's GroundedPrompt) and returns the reply's pieces; the caller joins them, or
prints them as they come. make_generator builds the one --generator names:
  extractive  no model: the retrieved sentences that answer (below)
  local       a GGUF model on llama.cpp, in this process, greedy, on the cores no other process
              is using: Qwen2.5-Coder-1.5B where its parts are installed, else SmolLM2-135M,
              or --local-model FILE (ragkit/llama.py finds and loads it)
  openai      any OpenAI-compatible /v1/chat/completions server (Ollama, llama.cpp, vLLM, ...),
              over HTTP with Python's own urllib: nothing to install
  bedrock     Amazon Bedrock through the lesson (billed)
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Protocol

import rag_from_scratch as rag
from ragkit.answering import (content_words, GroundedPrompt, guarded, idf_weights, REFUSAL, stop_words,
                              supported_share)
from ragkit.llama import (context_for, free_cores, llama_chunks, load_guarded, PROGRESS, shown,
                          start_llama, THREADS)
from ragkit.support import (bounded, closed, in_prose, items_with_deadline, one_line, parse_json, plural,
                            printable, split_sentences,
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
# rag_from_scratch.generate_with_bedrock is the lesson: one Converse call. This section wraps it
# for --generator bedrock (and --generate beside a kit flag), so a learner's first run fails
# kindly and never hangs:
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
    """Amazon Bedrock as a generator (Generator below), bounded in time, with advice on errors."""
    model_id: str
    region: str
    client: object              # bedrock-runtime, with bounded timeouts and retries
    deadline_s: float = DEADLINE_S
    stream: bool = False        # ConverseStream, its pieces as they come; else Converse, whole
    name: str = "Amazon Bedrock, billed"

    @property
    def attempts(self) -> int:
        """The tries botocore makes of one call, the first included."""
        return (self.client.meta.config.retries or {}).get("total_max_attempts", ATTEMPTS)

    def reply(self, prompt: str, system_prompt: str):
        """Bedrock's own reply, unguarded: its pieces as they come (stream), else one piece."""
        if self.stream:
            return self.pieces(prompt, system_prompt)
        return iter([self.converse(prompt, system_prompt)])

    def answer(self, prompt: GroundedPrompt):
        """The answer's pieces to a grounded prompt (ragkit/answering.py), guarded."""
        return guarded(self.reply(prompt.text, prompt.system), prompt)

    def converse(self, prompt: str, system_prompt: str) -> str:
        """The lesson's generate_with_bedrock, within deadline_s: the whole reply."""
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
    """The Bedrock generator (the placeholder model id refused now); stream=True: ConverseStream,
    its pieces as they arrive (else Converse: the whole reply as one piece)."""
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
    """What the kit reads of every generator: Extractive, LocalModel, OpenAIModel and Bedrock
    here (and the evaluation's rageval/devset.py's Keeping)."""
    name: str          # shown above the answer: "local: SmolLM2-135M-Instruct Q4_1, ..."
    stream: bool       # the caller prints the pieces as they come (--stream)

    def answer(self, prompt: GroundedPrompt) -> Iterator[str]:
        """The reply to a grounded prompt, in pieces as they are written: "".join() them for
        the whole reply. A model's pieces have passed ragkit/answering.py's guarded()."""


# == The extractive generator: no model, the retrieved sentences that answer, quoted ==========
#
#     python rag_from_scratch.py --question "How much time off do new fathers get?" --generator extractive
#
# extractive_generator() returns an Extractive generator: its answer(prompt) stands where a
# language model's would, and it reads only what a model is given: the grounded prompt's question
# and passages (ragkit/answering.py's GroundedPrompt, the passages kept beside its text). It picks
# sentences of the passages and replies in the form a model is asked for, each sentence a Quote
# line with its passage's number, or with the refusal; the kit then checks and shows the reply
# like any model's. How it picks:
#   - with MiniLM (your own pages, --docs): by meaning (the cosine of question and sentence) and
#     the question's rare words the sentence shares, more for a sentence that names an option,
#     command or path or holds code, less for one that is a question itself or comes from a
#     lower-ranked passage. It refuses when the best sentence's meaning and words fall below a
#     threshold, a higher one when the question has a word no page uses ("conda", "Sentry":
#     often what the pages lack);
#   - otherwise (the tutorial's ten policies, TF-IDF, no model): by the rare words it shares
#     with the question, refusing when too little of the question is supported.
# The weights and thresholds are chosen on the development sets by leaving one project out,
# counting a wrong answer against a refusal (`python -m rageval.tuning`; the figures and the
# history are in docs/generation.md). A heading alone, a lead-in with nothing after it or a list
# of links is never an answer; a sentence that points back ("This ...", "Outside those hours")
# brings the one before it.

MIN_SUPPORT = 0.25    # words alone: refuse below this share of the question supported
# WEIGHTS and the two REFUSE_BELOW scores were fitted by rageval/tuning.py when it cut refusals
# at a share of the answerable questions (8%). Refitted as the project now scores (a wrong
# answer -2, a right one +1, after the kit's quote check; `python -m rageval.tuning --part
# answer`), every held-out project refuses 26 to 29 of its 30 to 38 answerable questions and
# every question of the tutorial's sample: the support score does not tell a right sentence
# from a wrong one well enough to answer at that price. These are kept, and the answer is
# labelled "often wrong" where it is offered (docs/generation.md has both fits' figures).
WEIGHTS = {"meaning": 0.7, "words": 0.8, "names": 1.03, "code": 0.52, "asks": -0.05, "rank": -0.22}
REFUSE_BELOW = -0.46             # with MiniLM: refuse below this support ...
REFUSE_BELOW_NEW_WORD = 0.41     # ... or this one, when the question has a word no page uses
ANSWER_WORDS = 50          # more sentences from the best one's file join it up to this many words


def question_parts(question: str, stop: frozenset) -> list[str]:
    """A question joined by "and" has two parts when each side has content words of its own."""
    parts = [p for p in re.split(r"\band\b", question, maxsplit=1)]
    if len(parts) == 2 and all(len(content_words(p, stop)) >= 2 for p in parts):
        return parts
    return [question]


def best_sentence(part_words: set, candidates: list[dict], idf: dict, skip: set) -> dict | None:
    """The candidate whose words shared with the question weigh most (sum of IDF).

    Ties go to the earlier sentence: the retriever's order, as a reader would start
    with the first passage. (Dividing by sentence length lost 1 fact of 10: it favours
    short sentences that share one common word.)
    """
    def score(c):
        return sum(idf.get(w, idf[None]) for w in part_words & c["words"])
    scored = [(score(c), -i, c) for i, c in enumerate(candidates) if c["text"] not in skip]
    if not scored:
        return None
    best = max(scored, key=lambda t: (t[0], t[1]))
    return best[2] if best[0] > 0 else None


def support(question_words: set, chosen: list[dict], idf: dict) -> float:
    """IDF-weighted share of the question's content words found in the chosen sentences."""
    answer_words = set().union(*(c["words"] for c in chosen)) if chosen else set()
    return supported_share(question_words, answer_words, idf)


LIST_OR_TABLE = re.compile(r"(?:[-*+]|\d+[.)])\s|\|")     # "- item", "1. step", "| a | b |"


REFERS_BACK = re.compile(r"(?:this|that|these|those|it|they|such|there|then|otherwise|outside "
                         r"(?:of )?(?:this|that|these|those))\b", flags=re.I)   # "Outside those hours, ..."


def passage_units(text: str) -> list[dict]:
    """A passage's sentences, each {"text": what is scored, "quote": the pieces of the passage
    it quotes, word for word}. A line break ends a sentence too. A fenced code block stays with
    the sentence before it ("Install it:" and the commands), and so do the list items after a
    sentence that ends with a colon ("The options are:" and the options). A table row comes
    with the table's header row, which says what its cells mean (quoted apart: shown once). A
    sentence that points back ("This ...", "Outside those hours, ...") brings the one before it.
    A short title line ("Version pin") is scored with the sentence after it, not quoted."""
    units, lines, i, title, introduces, header = [], text.split("\n"), 0, "", False, ""
    while i < len(lines):
        line = lines[i].strip()
        if 0 < len(line.split()) <= 6 and not line.endswith((".", "!", "?", ":")) \
                and i + 1 < len(lines) and not line.startswith("```") \
                and not LIST_OR_TABLE.match(line):
            title, i = f"{title}{line}: ", i + 1          # a title line ("Version pin") leads
            continue                                     # into the sentence after it
        if lines[i].startswith("```"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j] == "```"), len(lines) - 1)
            block = "\n".join(lines[i:end + 1])
            if units:
                units[-1]["text"] += "\n" + block
                units[-1]["quote"][-1] += "\n" + block
            else:
                units.append({"text": block, "quote": [block]})
            i = end + 1
            continue
        if introduces and LIST_OR_TABLE.match(line):
            units[-1]["text"] += "\n" + line
            units[-1]["quote"][-1] += "\n" + line
        elif line.startswith("|"):                       # a table row keeps its header row
            first = i == 0 or not lines[i - 1].strip().startswith("|")
            header = line if first else header
            last = i + 1 == len(lines) or not lines[i + 1].strip().startswith("|")
            if not first or last:                        # a header alone only if it is all
                units.append({"text": line if first else f"{header}\n{line}",
                              "quote": [line] if first else [header, line]})
        else:
            sentences = split_sentences(lines[i])
            for n, sentence in enumerate(sentences):
                quote = sentence
                if n and REFERS_BACK.match(sentence):      # its subject is in the one before
                    quote = f"{sentences[n - 1]} {sentence}"
                units.append({"text": (title if n == 0 else "") + sentence, "quote": [quote]})
            title = "" if sentences else title
            introduces = bool(sentences) and sentences[-1].endswith(":")
        i += 1
    return units


# `x`, --flag, a/b, a_b
NAMES = re.compile(r"`[^`\n]+`|(?<![\w-])--?[a-z][\w-]+|\b\w+/\w+|\b[a-z]+_[a-z_]+\b")
# #123, 1.2.0, URLs, hashes
LINKISH = re.compile(r"#\d+|\bv?\d+(?:\.\d+)+\b|https?://\S+|\b[0-9a-f]{7,40}\b")


def answers_nothing(sentence: str) -> bool:
    """A heading alone, a lead-in with nothing after it, or a line of links and version numbers
    (a changelog's): never an answer."""
    words = sentence.split()
    ends = sentence.rstrip()
    if ends.endswith(":") or (len(words) <= 6 and not ends.endswith((".", "!", "?", "```"))):
        return True
    return len(LINKISH.findall(sentence)) * 2 >= len(words)


def candidate_sentences(passages, stop: frozenset) -> list[dict]:
    """Every distinct sentence that could answer, in retrieval order, with its passage's number
    and source, its words, its passage's rank and whether it names an option, command or API.
    Square brackets in the scored text become round ones (they are no citations); the quote
    keeps the passage's own words."""
    seen, out = set(), []
    for rank, passage in enumerate(passages):           # answering.Passage, in retrieval order
        number, source = passage.number, passage.source
        for unit in passage_units(passage.text):
            sentence = in_prose(unit["text"], lambda t: t.replace("[", "(").replace("]", ")"))
            if sentence not in seen and not answers_nothing(sentence):
                seen.add(sentence)
                out.append({"number": number, "source": source, "text": sentence, "rank": rank,
                            "quote": unit["quote"], "words": set(content_words(sentence, stop)),
                            "names": bool(NAMES.search(sentence)), "code": "```" in sentence,
                            "asks": sentence.rstrip().endswith("?")})
    return out


def extract_answer(prompt: GroundedPrompt, min_support: float = MIN_SUPPORT, encode=None,
                   weights: dict = WEIGHTS, refuse_below: tuple = (REFUSE_BELOW, REFUSE_BELOW_NEW_WORD),
                   known_words: set | None = None) -> str:
    """A reply in the grounded form (ragkit/answering.py): the best retrieved sentences, each a
    Quote line with its passage's number, or the refusal. encode(texts) -> unit vectors
    (MiniLM's) scores by meaning too, refusing below refuse_below[0], or [1] when the question
    has a word not in `known_words` (the pages'); without encode, by words alone, refusing below
    `min_support` of the question."""
    stop = stop_words()
    question = prompt.question.strip()
    candidates = candidate_sentences(prompt.passages, stop)
    idf = idf_weights([c["words"] for c in candidates])
    if encode is not None:
        new_word = known_words is not None and not set(content_words(question, stop)) <= known_words
        chosen = pick(candidates, features(question, candidates, idf, stop, encode), weights,
                      refuse_below[new_word])
    else:
        chosen = []
        for part in question_parts(question, stop):
            found = best_sentence(set(content_words(part, stop)), candidates, idf,
                                 {c["text"] for c in chosen})
            if found is not None:
                chosen.append(found)
        if chosen and support(set(content_words(question, stop)), chosen, idf) < min_support:
            chosen = []
    if not chosen:
        return REFUSAL
    return "\n".join(f'Quote: "{piece}" [{c["number"]}]' for c in chosen for piece in c["quote"])


def features(question: str, candidates: list[dict], idf: dict, stop, encode) -> list[list[dict]]:
    """For each part of the question, every candidate's features: meaning (the cosine of the
    part and the sentence with its source in front, as --context embeds chunks), words
    (share of the part's rare words), names (an option, command or path), code, asks (a
    question itself, as FAQ headings are), rank (of its passage)."""
    parts = question_parts(question, stop)
    titled = [f"{c['source'].replace('_', ' ').replace('`', ' ')}: {c['text']}"    # file > headings: ...
              for c in candidates]
    vectors = encode(parts + titled) if candidates else []
    out = []
    for p, part in enumerate(parts):
        words = set(content_words(part, stop))
        total = sum(idf.get(w, idf[None]) for w in words) or 1.0
        out.append([{"meaning": float(vectors[p] @ vectors[len(parts) + i]),
                     "words": sum(idf.get(w, idf[None]) for w in words & c["words"]) / total,
                     "names": float(c["names"]), "code": float(c["code"]),
                     "asks": float(c["asks"]), "rank": float(c["rank"])}
                    for i, c in enumerate(candidates)])
    return out


def support_of(features: dict, weights: dict) -> float:
    """How well a sentence answers, in meaning and rare words alone: what refusing compares
    with REFUSE_BELOW (options, code and rank help choose a sentence, not decide to answer)."""
    return weights["meaning"] * features["meaning"] + weights["words"] * features["words"]


def pick(candidates: list[dict], features: list[list[dict]], weights: dict,
         refuse_below: float) -> list[dict]:
    """For each part's features, the candidate with the highest weighted sum (ties: the earlier
    one), each candidate once, then the next best of the first part's from the same file while
    the answer stays within ANSWER_WORDS; nothing if the best supported is below `refuse_below`."""
    chosen, best, orders = [], float("-inf"), []
    for part in features:
        totals = [sum(weights[f] * x[f] for f in weights) for x in part]
        orders.append(sorted(range(len(totals)), key=lambda i: (-totals[i], i)))
        first = next((i for i in orders[-1] if candidates[i] not in chosen), None)
        if first is not None:
            chosen.append(candidates[first])
            best = max(best, support_of(part[first], weights))
    if best < refuse_below:
        return []
    file = chosen[0]["source"].split(" > ")[0]
    for i in orders[0][1:3]:                       # the runners-up of the first part
        more = candidates[i]
        words = sum(len(c["text"].split()) for c in chosen + [more])
        if more not in chosen and more["source"].split(" > ")[0] == file and words <= ANSWER_WORDS:
            chosen.append(more)
    return chosen


def known_words(chunks: list[dict]) -> set:
    """Every content word of the pages (titles too): a question word outside it is one the
    pages never use."""
    stop = stop_words()
    return {w for c in chunks for w in content_words(f"{c['title']} {c['text']}", stop)}


@dataclass
class Extractive:
    """The generator with no language model: it answers from a grounded prompt's own passages,
    by meaning too when `encode` is MiniLM's (and by words alone without it)."""
    encode: object = None               # texts -> unit vectors, or None
    known_words: set | None = None      # the pages' words (known_words()), or None
    min_support: float = MIN_SUPPORT
    stream: bool = False                # shown as it comes: one cited sentence a line

    @property
    def name(self) -> str:
        """The name shown above the answer: no model, and MiniLM if it scores the sentences."""
        return "extractive: no model" + (", sentences scored by MiniLM" if self.encode else "")

    def answer(self, prompt: GroundedPrompt):
        """The reply in the grounded form, one line a piece."""
        answer = extract_answer(prompt, self.min_support, self.encode, known_words=self.known_words)
        return iter(answer.splitlines(keepends=True))


def extractive_generator(min_support: float = MIN_SUPPORT, stream: bool = False, embedder=None,
                         chunks=None) -> Extractive:
    """The Extractive generator: by meaning too when `embedder` is MiniLM (the one that indexed
    `chunks`, whose words it learns), else by words alone; stream=True: the caller prints it as it
    comes, one cited sentence a piece."""
    encode = embedder.encode if embedder is not None and embedder.backend == "minilm" else None
    known = known_words(chunks) if encode and chunks else None
    return Extractive(encode, known, min_support, stream)


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


def said_cut(where: str, max_tokens: int) -> None:
    """The line on stderr for a whole reply that stopped at the token limit (a streamed one is
    seen to stop: a line there would land inside the answer the guard still holds back)."""
    print(f"  [{where}] stopped at the token limit (--max-tokens {max_tokens}): the answer may be "
          f"cut short", file=sys.stderr, flush=True)


def stream_text(chunks, where: str, max_tokens: int, printed: bool = False):
    """Yield the text of OpenAI-style stream chunks ({"choices": [{"delta": {"content": ...}}]}),
    within what max_tokens can hold; at the end, unless the pieces are printed as they come, say
    if the reply stopped at the token limit. Breaks are one line. However it ends, `chunks` is
    closed here, so llama.cpp's stream stops and says what it did before any error line."""
    size, reason = 0, None
    try:
        for chunk in chunks:
            try:
                choice = chunk["choices"][0] if chunk["choices"] else {"delta": {}}   # usage only
                text = choice["delta"].get("content") or ""
                reason = choice.get("finish_reason") or reason
                size += len(text.encode())
            except (KeyError, IndexError, TypeError, AttributeError):
                detail = chunk.get("error", chunk) if isinstance(chunk, dict) else chunk
                raise RuntimeError(f"{where} sent a stream event that is not a chat completion "
                                   f"chunk: {json.dumps(detail)[:200]}") from None
            too_long(size, max_tokens, where)
            if text:
                yield printable(text)
    finally:
        closed(chunks)                    # a generator: llama.cpp's stream, an HTTP stream
    if reason is None:            # every server ends a whole answer with a finish_reason
        raise RuntimeError(f"{where} stopped in mid-answer (no finish_reason before the end)")
    if reason == "length" and not printed:
        said_cut(where, max_tokens)


@dataclass
class LocalModel:
    """A GGUF model on llama.cpp in this process, greedy, on `threads` CPU threads. It is loaded
    at the first question, with a context sized to that prompt (a longer prompt later: loaded
    anew). A file of your own is loaded in a guarded child first (load_guarded)."""
    path: Path
    runtime: str                     # "SmolLM2-135M-Instruct Q4_1, xllamacpp ..., 1 thread"
    threads: int = THREADS
    max_tokens: int = MAX_TOKENS
    stream: bool = False
    checked: bool = True             # False for a file of your own until a child has loaded it
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

    def chunks(self, prompt: str, system_prompt: str):
        """llama.cpp's stream chunks, usage and timings included, while a bar on stderr shows it
        reading the prompt and (unless the answer itself is printed) writing (ragkit/llama.py)."""
        server = self.server_for(prompt, system_prompt)
        request = chat_request(prompt, system_prompt, self.max_tokens) | PROGRESS | STREAMED
        return shown(llama_chunks(server, request), writing=not self.stream)

    def reply(self, prompt: str, system_prompt: str):
        """The model's own reply, its pieces as they come, unguarded."""
        return stream_text(self.chunks(prompt, system_prompt), "llama.cpp", self.max_tokens, self.stream)

    def answer(self, prompt: GroundedPrompt):
        """The answer's pieces to a grounded prompt, guarded."""
        return guarded(self.reply(prompt.text, prompt.system), prompt)


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
# Any OpenAI-compatible server, over HTTP (every read bounded)
# ---------------------------------------------------------------------------
@dataclass
class OpenAIModel:
    """Any OpenAI-compatible chat endpoint. Each read waits at most `timeout`; the whole answer
    takes at most REPLY_DEADLINE_S."""
    endpoint: str              # http://HOST:PORT/v1/chat/completions
    model: str
    api_key: str = ""
    max_tokens: int = MAX_TOKENS
    timeout: float = LLM_TIMEOUT_S
    stream: bool = False

    runtime = property(lambda self: f"{self.model} at {self.endpoint}")
    name = property(lambda self: f"openai: {self.runtime}")

    def chunks(self, prompt: str, system_prompt: str):
        """The server's stream chunks, one dict an event, usage included when it sends it."""
        body = chat_request(prompt, system_prompt, self.max_tokens) | {"model": self.model}
        return stream(self.endpoint, body | STREAMED, self.api_key, self.timeout, REPLY_DEADLINE_S)

    def reply(self, prompt: str, system_prompt: str):
        """The server's own reply, unguarded: its pieces as they come (stream), else one piece."""
        if self.stream:
            return stream_text(self.chunks(prompt, system_prompt), self.endpoint, self.max_tokens, True)
        body = chat_request(prompt, system_prompt, self.max_tokens) | {"model": self.model}
        text, cut = reply_text(ask(self.endpoint, body, self.api_key, self.timeout, REPLY_DEADLINE_S),
                               self.endpoint)
        too_long(len(text.encode()), self.max_tokens, self.endpoint)
        if cut:
            said_cut(self.endpoint, self.max_tokens)
        return iter([text])

    def answer(self, prompt: GroundedPrompt):
        """The answer's pieces to a grounded prompt, guarded."""
        return guarded(self.reply(prompt.text, prompt.system), prompt)


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
        return extractive_generator(stream=stream, embedder=embedder, chunks=chunks)
    if name == "local":
        return local_generator(models.local_model, models.threads or free_cores(), models.max_tokens, stream)
    if name == "openai":
        return openai_generator(models.llm_url, models.llm_model, models.api_key_env, models.max_tokens,
                                stream=stream)
    if name == "bedrock":
        return bedrock_generator(models.model_id, models.region, stream=stream)
    raise ValueError(f"unknown generator {name!r}: choose from {', '.join(GENERATORS)}")


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
