"""
rageval/answer_tuning.py: the grounded answer's settings, chosen on the development sets by
leaving one project out: the prompt's last lines, passages per prompt, how strictly a quote is
checked, and what an answer with no checked quote becomes.

    python -m rageval.answer_tuning --collect              # ask the model every prompt (hours)
    python -m rageval.answer_tuning                        # choose, from the answers kept

--collect asks Qwen2.5-Coder-1.5B (or --local-model) every question of every set, with the
instructions (rageval/answer_variants.py) and numbers of passages in PLAN, and keeps each reply in
a JSON Lines file under .rag_cache keyed by the model and the exact request: a rerun asks only
what is not there yet, so it can be stopped and started again. The prompts of one question
begin alike (the passages come first, the biggest k first), so llama.cpp reuses what it
computed for the last one: a question costs one long read and several short ones.

Choosing costs no model: every setting's verdicts come from the kept replies. For each project,
the setting with the best score on the other four is scored on it; that figure is what a folder
nobody tuned on gets. Score: right +1, partial 0, refused 0, wrong -2, and for a question the
pages cannot answer, refused +1, answered -2: a wrong answer costs twice what a right one earns.
"""

from __future__ import annotations

import itertools
import json
import sys
import time

from rageval import answer_variants, devset, devsets
from rageval import generation as gen
from rageval.devset import kept_file, read_kept, request_key
from rageval.embedding_cache import EmbeddingCache
from rageval.generation import KEPT_SEED as SEED
from ragkit import support, answering, generators
from ragkit.support import printable
from ragkit.folder_index import CACHE_DIR, CachedEmbedder

# The prompts asked for each question, in this order: the biggest first, so the others reuse
# its start (see above). Both instructions at 8 passages; the better one (on the first 30
# MkDocs questions, where every pair was asked: docs/generation.md) at 5 and 3 too.
PLAN = [(8, "quote-two"), (8, "quote-two-sentences"), (5, "quote-two"), (3, "quote-two")]
# The kit's own prompt alone (--plan kit): the quote check's settings need no other, and it
# costs a quarter of the model's time; the prompts were compared on MkDocs with the whole PLAN.
# sizes: the prompt's passages alone (8, 5, 3), smallest first, to choose a shorter default prompt.
# trim: the same, and 8 passages each trimmed to the sentences nearest the question
# (rageval/answer_variants.py's trimmed()): a prompt about half as long.
SIZES = [(3, "quote-two"), (5, "quote-two"), (8, "quote-two")]
PLANS = {"all": PLAN, "kit": PLAN[:1], "sizes": SIZES, "trim": SIZES + [(8, "quote-two, trimmed")]}
UNCHECKED = ["refuse", "flag"]
MIN_TOPICS = [0.0, 0.2, 0.3, 0.4, 0.5]        # the share of the question the quotes must speak to
MAX_TOKENS = generators.MAX_TOKENS          # as the kit asks: kept replies are then the kit's own
SCORE = {"right": 1, "partial": 0, "refused (wrong)": 0, "wrong": -2,
         "refused (right)": 1, "answered (wrong)": -2}


# == Asking ==================================================================================
def prompts_of(name: str, embedder, cache, questions: int | None = None, plan=PLAN) -> list[dict]:
    """Every prompt of one set (or of `questions` spread over it): each question's 8
    passages found as --docs finds them, then for each (k, instruction) of the plan, its
    grounded prompt."""
    chunks, vectors = devset.build(devsets.pages(name), embedder, cache, True)
    retrieve = devset.retriever(chunks, vectors, embedder, True)
    out = []
    for i, item in devset.spread(gen.load_gold(devsets.questions(name)), questions):
        found = retrieve(item["question"], max(k for k, _ in plan))
        for k, instruction in plan:
            passages = found[:k]
            if instruction in answer_variants.TRIMMED:
                passages = [{**c, "text": answer_variants.trimmed(c["text"], item["question"])}
                            for c in passages]
            out.append({"set": name, "item": i, "k": k, "instruction": instruction,
                        "prompt": answering.grounded_prompt(
                            item["question"], passages, answer_variants.INSTRUCTIONS[instruction],
                            answer_variants.fence_tag(item["question"], SEED))})
    return out


def collect(names, model: str | None, threads: int, questions: int | None = None,
            folder=CACHE_DIR, plan=PLAN) -> None:
    """Ask every prompt not kept yet, keeping each reply as it comes (in `folder`)."""
    from ragkit import llama
    llama.find_model(model)                 # a missing model file: one line, now
    embedder = CachedEmbedder("minilm")
    cache = EmbeddingCache(folder)                # marks the folder as the kit's first
    local = generators.local_generator(model, threads, MAX_TOKENS)
    path = kept_file(local.path, folder)
    kept = read_kept(path)
    key = lambda prompt: request_key(str(local.path), prompt.system, prompt.text, MAX_TOKENS)
    def questions_of(name):          # each question's prompts together: they share their start
        asked = [p for p in prompts_of(name, embedder, cache, questions, plan)
                 if key(p["prompt"]) not in kept]
        return [list(group) for _, group in itertools.groupby(asked, key=lambda p: p["item"])]
    todo = [p for group in devset.in_turn([questions_of(name) for name in names]) for p in group]
    print(f"{len(todo)} prompts to ask", file=sys.stderr, flush=True)
    with open(path, "a", encoding="utf-8") as out:
        for n, p in enumerate(todo, 1):
            start = time.perf_counter()
            chunks = list(local.chunks(p["prompt"].text, p["prompt"].system))   # usage comes last
            reply = printable("".join(generators.stream_text(iter(chunks), "llama.cpp", MAX_TOKENS)).strip())
            usage = next((c["usage"] for c in reversed(chunks) if c.get("usage")), {})
            out.write(json.dumps({"key": key(p["prompt"]), "set": p["set"], "item": p["item"], "k": p["k"],
                                  "instruction": p["instruction"], "reply": reply,
                                  "seconds": round(time.perf_counter() - start, 2),
                                  "prompt_tokens": usage.get("prompt_tokens"),
                                  "reused_tokens":
                                      usage.get("prompt_tokens_details", {}).get("cached_tokens"),
                                  "tokens": usage.get("completion_tokens"),
                                  "threads": threads}) + "\n")
            out.flush()
            if n % 10 == 0:
                print(f"{n} of {len(todo)}", file=sys.stderr, flush=True)


# == Choosing =================================================================================
def kept_answers(names, model_path, embedder, cache, questions=None, folder=CACHE_DIR,
                 plan=PLAN) -> dict:
    """{set: [(gold item, {(k, instruction): (prompt, reply)})]} for every question whose
    replies are all kept; questions not asked yet are left out (and counted on stderr)."""
    kept = read_kept(kept_file(model_path, folder))
    out = {}
    for name in names:
        gold = dict(devset.spread(gen.load_gold(devsets.questions(name)), questions))
        asked = {}
        for p in prompts_of(name, embedder, cache, questions, plan):
            record = kept.get(request_key(str(model_path), p["prompt"].system, p["prompt"].text,
                                          MAX_TOKENS))
            if record is not None:
                asked.setdefault(p["item"], {})[p["k"], p["instruction"]] = (p["prompt"], record["reply"])
        whole = [i for i, replies in asked.items() if len(replies) == len(plan)]
        out[name] = [(gold[i], asked[i]) for i in sorted(whole)]
        if len(whole) < len(gold):
            print(f"{name}: {len(whole)} of {len(gold)} questions have every reply kept", file=sys.stderr)
    return out


def settings(plan=PLAN) -> list[tuple]:
    """Every (instruction, k, strictness, unchecked, topic) to score, in the order ties go."""
    return [(instruction, k, strictness, unchecked, topic) for k, instruction in plan
            for strictness, unchecked, topic
            in itertools.product(answer_variants.STRICTNESS, UNCHECKED, MIN_TOPICS)]


def verdicts(answers: dict, setting) -> dict:
    """{set: [verdict of each question]} under one setting (instruction, k, strictness, unchecked),
    and the share of the model's quotes that were found in the passages."""
    from ragkit.answering import guarded_reply
    instruction, k, strictness, unchecked, topic = setting
    out, quotes, found = {}, 0, 0
    for name, questions in answers.items():
        out[name] = []
        for item, replies in questions:
            prompt, reply = replies[k, instruction]          # as the kit shows it: guarded first
            checked, shown = answer_variants.checked_answer(guarded_reply(reply, prompt), prompt, strictness,
                                                            unchecked, topic)
            out[name].append(devset.verdict(shown, item, answering.REFUSAL))
            quotes += len(checked["checked"]) + len(checked["failed"])
            found += len(checked["checked"])
    return {"verdicts": out, "quotes_found": found / quotes if quotes else None}


def score(verdict_list: list[str]) -> int:
    """Right +1, wrong -2, a refusal of an answerable question 0; unanswerable: refused +1,
    answered -2 (see the top of this file)."""
    return sum(SCORE[v] for v in verdict_list)


def leave_one_project_out(table: dict, names) -> dict:
    """{held-out set: the setting with the best score on the other sets} (ties: the first in
    settings(): the first instruction, more passages, stricter, refusing)."""
    return {held: max(table, key=lambda s: sum(score(table[s]["verdicts"][n]) for n in names if n != held))
            for held in names}


def summary(verdict_list: list[str]) -> str:
    """right, partial, wrong, refused of the answerable; refused of the unanswerable."""
    c = {v: verdict_list.count(v) for v in SCORE}
    answerable = c["right"] + c["partial"] + c["wrong"] + c["refused (wrong)"]
    unanswerable = c["refused (right)"] + c["answered (wrong)"]
    share = lambda n, d: f"{n / d:.0%}" if d else "-"
    return (f"right {c['right']:2}, partial {c['partial']:2}, wrong {c['wrong']:2}, refused "
            f"{c['refused (wrong)']:2} of {answerable} ({share(c['right'], answerable)} right, "
            f"{share(c['wrong'], answerable)} wrong); refused {c['refused (right)']} of {unanswerable} "
            f"unanswerable ({share(c['refused (right)'], unanswerable)})")


def label(setting) -> str:
    """A setting in words."""
    instruction, k, strictness, unchecked, topic = setting
    return f"{instruction}, k={k}, {strictness}, topic {topic:.1f}, {unchecked} unchecked"


def choose(names, model: str | None, questions=None, folder=CACHE_DIR, worst: int = 0,
           plan=PLAN) -> None:
    """Every setting's verdicts from the kept replies; each project scored with the setting
    chosen on the others; then the setting chosen on all of them."""
    from ragkit import llama
    path, model_name = llama.model_file(model)
    embedder, cache = CachedEmbedder("minilm"), EmbeddingCache(folder)
    answers = kept_answers(names, path, embedder, cache, questions, folder, plan)
    if not any(answers.values()):
        raise RuntimeError(f"no question has every reply of {model_name} kept in {folder}: run "
                           f"`python -m rageval.answer_tuning --collect` first (hours)")
    table = {setting: verdicts(answers, setting) for setting in settings(plan)}
    print(f"== {model_name}: every setting on every project together ==")
    for setting in sorted(table, key=lambda s: -sum(score(table[s]["verdicts"][n]) for n in names)):
        everything = [v for n in names for v in table[setting]["verdicts"][n]]
        print(f"  score {score(everything):4}  {label(setting):<42} {summary(everything)}")
    print(f"\n== {model_name}: each project held out, the setting chosen on the others ==")
    for held, setting in leave_one_project_out(table, names).items():
        print(f"  {held:<10} {label(setting):<42} {summary(table[setting]['verdicts'][held])}")
    best = max(table, key=lambda s: sum(score(table[s]["verdicts"][n]) for n in names))
    everything = [v for n in names for v in table[best]["verdicts"][n]]
    print(f"  {'all':<10} {label(best):<42} {summary(everything)}: the kit's setting")
    found = table[best]["quotes_found"]
    print(f"  quotes found in the passages under it: {'-' if found is None else format(found, '.0%')}")
    if worst:
        print_worst(answers, table[best]["verdicts"], best, worst)


def print_worst(answers: dict, verdicts_of: dict, setting, n: int) -> None:
    """The first n answers the kit would show wrongly under the setting, verbatim: an answer
    to a question the pages cannot answer, then one stating none of the facts."""
    from ragkit.answering import guarded_reply
    instruction, k, strictness, unchecked, topic = setting
    rows = [(name, item, replies[k, instruction], v) for name, questions in answers.items()
            for (item, replies), v in zip(questions, verdicts_of[name]) if v in ("answered (wrong)", "wrong")]
    rows.sort(key=lambda row: row[3] != "answered (wrong)")
    print(f"\n== The worst answers under it, verbatim ({min(n, len(rows))} of {len(rows)}) ==")
    for name, item, (prompt, reply), v in rows[:n]:
        shown = answer_variants.checked_answer(guarded_reply(reply, prompt), prompt, strictness, unchecked,
                                               topic)[1]
        facts = ", ".join(p.pattern for p in item["answer"]) or "none: the pages cannot answer it"
        print(f"[{name}, {v}] {item['question']}\n  facts wanted: {facts}\n  shown: "
              + shown.replace("\n", "\n         "))


# == Command line ============================================================================
def parse_args(argv=None):
    """--collect (ask the model) or not (choose); which sets, model and threads."""
    p = support.OneLineParser(description="Choose the grounded answer's settings on the development sets.")
    p.add_argument("--collect", action="store_true", help="ask the model every prompt not kept yet (hours)")
    p.add_argument("--sets",
                   help=f"comma-separated, from {', '.join(devsets.SETS)} (default: every one here)")
    p.add_argument("--local-model", help="qwen (default), smollm2 or a .gguf file")
    p.add_argument("--threads", type=support.bounded(int, 1, 64), default=1,
                   help="llama.cpp threads (default: %(default)s)")
    p.add_argument("--plan", choices=sorted(PLANS), default="all",
                   help="all: every prompt of PLAN; kit: the kit's prompt only; sizes: 3, 5 and 8 "
                        "passages; trim: those and 8 trimmed passages (default: %(default)s)")
    p.add_argument("--questions", type=support.bounded(int, 1, 1000), metavar="N",
                   help="N questions of each set, spread over it (default: all)")
    p.add_argument("--worst", type=support.bounded(int, 0, 1000), default=0, metavar="N",
                   help="also print the N worst answers under the kit's setting, verbatim")
    p.add_argument("--cache", default=str(CACHE_DIR),
                   help="the folder of kept replies and chunk vectors (default: %(default)s)")
    return p.parse_args(argv)


def run(args) -> None:
    """Collect, or choose and print."""
    names = args.sets.split(",") if args.sets else devsets.available()
    for name in names:
        devsets.pages(name)                 # an unknown or missing set: one line now
    if args.collect:
        return collect(names, args.local_model, args.threads, args.questions, args.cache,
                       PLANS[args.plan])
    choose(names, args.local_model, args.questions, args.cache, args.worst, PLANS[args.plan])


main = support.main_for(run, parse_args)


if __name__ == "__main__":
    support.leave(main())
