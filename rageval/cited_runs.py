"""
rageval/cited_runs.py: the cited answer (rageval/citations.py) on the development sets: how many
passages and sentences a prompt gets, chosen by leaving one project out, then a local model's
replies kept and scored.

    python -m rageval.cited_runs --context               # answer in context against prompt size
    python -m rageval.cited_runs --collect --questions 12  # ask the model (kept: reruns ask only what is new)
    python -m rageval.cited_runs                         # score the kept replies, leaving one project out

The context step needs no model: a prompt's size against whether its sentences hold every fact
of the answer. For each project the setting is chosen on the other four: the most answer in
context among the settings whose median prompt is at most TOKEN_BUDGET tokens (estimated at
CHARS_PER_TOKEN; the collected runs report llama.cpp's own count). The replies are asked with
llama.cpp's grammar for each prompt, so every reply cites only sentences the prompt has.

Score: right +1, partial 0, refused 0, wrong -2; a question the pages cannot answer: refused +1,
answered -2.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from rageval import devset, devsets
from rageval import generation as gen
from rageval.embedding_cache import EmbeddingCache
from rageval import answer_variants, citations
from ragkit import documents, support
from ragkit.folder_index import CACHE_DIR, CachedEmbedder

SEED = "devset"                 # the markers' tag is fixed per question, so a rerun asks the same
FOUND = 8                       # passages retrieved per question, as --docs gives them
# (passages, sentences kept per passage: None for all): the prompt sizes compared
CONTEXTS = [(k, s) for k in (3, 4, 5, 6, 8) for s in (None, 2, 3, 4)]
TOKEN_BUDGET = 800
CHARS_PER_TOKEN = 4.0           # English prose and Markdown with a BPE tokenizer, about
SYSTEM_TOKENS = 90              # the system prompt and the chat template's own tokens, about
MIN_TOPICS = [0.0, 0.1, 0.2, 0.3, 0.4]
SCORE = {"right": 1, "partial": 0, "refused (wrong)": 0, "wrong": -2,
         "refused (right)": 1, "answered (wrong)": -2}
MAX_TOKENS = 120


def prompt_for(question: str, found: list[dict], k: int, keep: int | None) -> citations.CitedPrompt:
    """The cited prompt of the best k passages, each cut to its best sentences."""
    return citations.cited_prompt(question, found[:k], answer_variants.fence_tag(question, SEED), keep)


def retrieved(names: list[str], embedder, cache) -> dict:
    """{set: [(gold item, its FOUND passages)]}: every question retrieved as --docs does."""
    out = {}
    for name in names:
        chunks, vectors = devset.build(devsets.pages(name), embedder, cache, True)
        retrieve = devset.retriever(chunks, vectors, embedder, True)
        gold = gen.load_gold(devsets.questions(name))
        out[name] = [(item, retrieve(item["question"], FOUND)) for item in gold]
        print(f"{name}: {len(gold)} questions retrieved", file=sys.stderr, flush=True)
    return out


def context_table(found: dict) -> dict:
    """{(k, keep): {set: (answer in context, median estimated prompt tokens)}}."""
    table = {}
    for k, keep in CONTEXTS:
        for name, rows in found.items():
            held, tokens = [], []
            for item, passages in rows:
                cited = prompt_for(item["question"], passages, k, keep)
                tokens.append(SYSTEM_TOKENS + len(cited.text) / CHARS_PER_TOKEN)
                if item["answerable"]:
                    kept = [{"title": s, "text": t} for s, t in cited.sentences.values()]
                    held.append(documents.holds_every_fact(kept, item))
            table.setdefault((k, keep), {})[name] = (sum(held) / len(held), statistics.median(tokens))
    return table


def choose_context(table: dict, others: list[str]):
    """The setting with the most answer in context on `others` among those whose median prompt
    there is at most TOKEN_BUDGET tokens (ties: the smaller prompt)."""
    fits = [c for c in table if max(table[c][n][1] for n in others) <= TOKEN_BUDGET] or list(table)
    mean = lambda c, i: statistics.mean(table[c][n][i] for n in others)
    return max(fits, key=lambda c: (round(mean(c, 0), 4), -mean(c, 1)))


def print_context(table: dict, names: list[str]) -> dict:
    """The table, then each held-out project's choice; returns {held out: choice}."""
    print("passages  sentences  " + "  ".join(f"{n:>14}" for n in names) + "   (answer in context, tokens)")
    for (k, keep), row in table.items():
        cells = "  ".join(f"{row[n][0]:>6.0%} {row[n][1]:>6.0f}" for n in names)
        print(f"{k:>8}  {str(keep or 'all'):>9}  {cells}")
    chosen = {}
    for held in names:
        chosen[held] = choose_context(table, [n for n in names if n != held] or [held])   # one set: itself
        ctx, tokens = table[chosen[held]][held]
        print(f"held out {held}: chosen on the others {chosen[held]}; on {held}: {ctx:.0%} in context, "
              f"median {tokens:.0f} tokens")
    return chosen


# == Asking the model ========================================================================
def kept_path(model_path, folder) -> Path:
    """The JSON Lines file of one model's kept replies."""
    return Path(folder) / f"cited-{Path(model_path).stem}.jsonl"


def request_key(model_path, prompt: str) -> str:
    """The SHA-256 that names one request to one model (rageval/devset.py's)."""
    return devset.request_key(str(model_path), citations.SYSTEM_PROMPT, prompt, MAX_TOKENS)


def interleaved(found: dict, questions: int | None) -> list[tuple[str, int, dict, list]]:
    """(set, number, item, passages) spread over each set, taken from the sets in turn."""
    return devset.in_turn([[(name, i, item, found[name][i][1])
                            for i, item in devset.spread([r[0] for r in rows], questions)]
                           for name, rows in found.items()])


def collect(found: dict, context, model: str | None, threads: int, questions: int | None, folder) -> None:
    """Ask the model every prompt not kept yet (with its grammar), keeping each reply at once."""
    from ragkit import llama, generators
    path, name = llama.model_file(model)
    server = llama.start_llama(path, threads, n_ctx=4096)
    out_path = kept_path(path, folder)
    kept = devset.read_kept(out_path)
    todo = [row for row in interleaved(found, questions)
            if request_key(path, prompt_for(row[2]["question"], row[3], *context[row[0]]).text) not in kept]
    print(f"{len(todo)} prompts to ask {name} on {threads} thread(s)", file=sys.stderr, flush=True)
    with open(out_path, "a", encoding="utf-8") as out:
        for n, (set_name, i, item, passages) in enumerate(todo, 1):
            cited = prompt_for(item["question"], passages, *context[set_name])
            request = generators.chat_request(cited.text, citations.SYSTEM_PROMPT, MAX_TOKENS)
            start = time.perf_counter()
            reply = server.handle_chat_completions(request | {"grammar": cited.grammar})
            text, _ = generators.reply_text(reply, "llama.cpp")
            timings = reply.get("timings", {})
            out.write(json.dumps({"key": request_key(path, cited.text), "set": set_name, "item": i,
                                  "reply": text, "seconds": round(time.perf_counter() - start, 2),
                                  "prompt_tokens": timings.get("prompt_n"),
                                  "prompt_per_second": timings.get("prompt_per_second"),
                                  "tokens": timings.get("predicted_n"),
                                  "tokens_per_second": timings.get("predicted_per_second"),
                                  "threads": threads}) + "\n")
            out.flush()
            print(f"{n} of {len(todo)}: {set_name} #{i} {time.perf_counter() - start:.0f} s, "
                  f"{timings.get('prompt_n')} prompt tokens", file=sys.stderr, flush=True)


# == Scoring the kept replies ================================================================
def verdicts(found: dict, context, kept: dict, model_path, min_topic: float) -> dict:
    """{set: [(verdict, item, shown answer)]} for every question whose reply is kept."""
    out = {}
    for name, rows in found.items():
        out[name] = []
        for item, passages in rows:
            cited = prompt_for(item["question"], passages, *context[name])
            record = kept.get(request_key(model_path, cited.text))
            if record is None:
                continue
            answer = citations.shown(citations.check(record["reply"], cited, min_topic))
            out[name].append((devset.verdict(answer, item, citations.REFUSAL), item, answer))
    return out


def score(rows) -> int:
    """The rows' score: SCORE of each verdict, added up."""
    return sum(SCORE[v] for v, _, _ in rows)


def print_scores(found: dict, context: dict, model_path, folder) -> None:
    """Leaving one project out: the share of the question the check asks for, chosen on the
    other four, then each held-out project's verdicts, and the three worst answers."""
    kept = devset.read_kept(kept_path(model_path, folder))
    by_topic = {t: verdicts(found, context, kept, model_path, t) for t in MIN_TOPICS}
    names = [n for n in found if by_topic[MIN_TOPICS[0]][n]]
    print(f"{'held out':<10} {'topic':>5} {'asked':>5} {'right':>6} {'partial':>7} {'wrong':>6} "
          f"{'refused':>7}  unanswerable refused")
    worst = []
    for held in names:
        t = max(MIN_TOPICS, key=lambda t: sum(score(by_topic[t][n]) for n in names if n != held))
        rows = by_topic[t][held]
        count = lambda v: sum(r[0] == v for r in rows)
        answerable = sum(r[1]["answerable"] for r in rows)
        print(f"{held:<10} {t:>5} {len(rows):>5} {count('right'):>6} {count('partial'):>7} "
              f"{count('wrong'):>6} {count('refused (wrong)'):>7}  "
              f"{count('refused (right)')} of {len(rows) - answerable}   (of {answerable} answerable)")
        worst += [r for r in rows if r[0] in ("wrong", "answered (wrong)")]
    for v, item, answer in worst[:3]:
        print(f"\n[{v}] {item['question']}\n{answer}")


def parse_args(argv=None):
    """The flags of `python -m rageval.cited_runs`."""
    p = support.OneLineParser(description="The cited answer on the development sets.")
    p.add_argument("--context", action="store_true", help="print answer in context against prompt size")
    p.add_argument("--collect", action="store_true", help="ask the model the prompts not kept yet")
    p.add_argument("--questions", type=support.bounded(int, 1, 1000), help="spread over each set")
    p.add_argument("--threads", type=support.bounded(int, 1, 64), default=1)
    p.add_argument("--local-model", help="qwen (default), smollm2 or a .gguf file")
    p.add_argument("--sets", default=",".join(devsets.SETS), help="development sets, by name (default: all)")
    p.add_argument("--cache", default=str(CACHE_DIR),
                   help=f"where vectors and replies are kept (default: {CACHE_DIR})")
    return p.parse_args(argv)


def run(args) -> None:
    """The context table, the collected replies if --collect, then the scores unless --context."""
    names = [devsets.pages(n) and n for n in args.sets.split(",")]     # one line if not fetched
    embedder = CachedEmbedder("minilm")
    found = retrieved(names, embedder, EmbeddingCache(args.cache))
    context = print_context(context_table(found), names)
    if args.collect:
        collect(found, context, args.local_model, args.threads, args.questions, args.cache)
    if not args.context:
        from ragkit import llama
        print_scores(found, context, llama.model_file(args.local_model)[0], args.cache)


main = support.main_for(run, parse_args)     # bad input: one line on stderr, exit status 1


if __name__ == "__main__":
    support.leave(main())
