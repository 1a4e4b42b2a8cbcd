"""
rageval/tuning.py: the --docs settings, chosen on the development sets by leaving one project out.

    python -m rageval.tuning                   # retrieval, then the extractive answer
    python -m rageval.tuning --part retrieval  # chunk size, --context and the BM25 share only
    python -m rageval.tuning --part answer     # the extractive answer alone, at the kit's retrieval

For each of the five projects, each setting is chosen on the other four and the held-out
project is scored with it: its figure is what a folder nobody tuned on gets. The kit ships
the settings chosen on all five.
  - Retrieval (chunk size, --context, BM25's share) by answer in context: the share of
    answerable questions whose 5 passages hold every gold fact (ties go to the first in the
    grid: fewer words, no context, less BM25).
  - How many passages a prompt holds (--k with --docs): the fewest whose answer in context
    reaches IN_CONTEXT_GOAL on average; more passages make a longer prompt to read.
  - The extractive answer: its sentence-scoring weights are a logistic regression of "this
    sentence states every gold fact" on its features, its strength (C) chosen by leaving one
    more project out; its two refusal thresholds (below which support it refuses, for a question
    with a word no page uses and for one without) are the ones that score best: a right answer
    +1, a wrong one -1, a refusal 0, and for a question the pages cannot answer, refusing +1
    and answering -1. A wrong answer costs a user more than "I don't know".
MiniLM; the chunk vectors are cached in .rag_cache, so a second run takes a fraction of the first.
"""

import itertools
import math
import sys

import numpy as np

from rageval import devsets
from rageval import generation as gen
from rageval.embedding_cache import EmbeddingCache
from ragkit import answering, chunking, documents, support, generators, retrieval
from ragkit.folder_index import CachedEmbedder

K = 5                                          # passages scored when choosing retrieval
KS = [3, 5, 8]                                 # how many passages a prompt may hold
IN_CONTEXT_GOAL = 0.9                          # ... the fewest that reach this
WORDS = [60, 100, 150, 200]                    # words of text per chunk at most
CONTEXTS = [False, True]                       # titles in front when embedding
HYBRIDS = [0.0, 0.2, 0.3, 0.5]                 # BM25's share of the fused score
FEATURES = ("meaning", "words", "names", "code", "asks", "rank")   # generators.features()' names
STRENGTHS = [0.01, 0.1, 1.0]                   # the weights' fit: C, less is smoother


# == Retrieval ===============================================================================
def indexed(name: str, words: int, context: bool, embedder, cache, store: dict):
    """(chunks, vectors) of one set at one chunk size and context, made once per run."""
    if (name, words) not in store:
        docs = documents.load_documents(devsets.pages(name))
        store[name, words] = chunking.document_chunks(docs, words, chunking.model_fits(embedder))
    chunks = store[name, words]
    texts = chunking.with_context(chunks) if context else [c["text"] for c in chunks]
    return chunks, np.asfortranarray(cache.encode(embedder, texts, "chunks"))


def retriever(chunks, vectors, embedder, context: bool, hybrid: float):
    """The kit's retrieval over these vectors, BM25 fused in at `hybrid`."""
    return retrieval.make_retriever(chunks, None if context else vectors, embedder,
                                    hybrid=hybrid or None, context=context,
                                    context_vectors=vectors if context else None)


def in_context(gold, retrieve, k: int = K) -> float:
    """The share of answerable questions whose k passages hold every gold fact."""
    answerable = [g for g in gold if g["answerable"]]
    return float(np.mean([documents.holds_every_fact(retrieve(g["question"], k), g) for g in answerable]))


def retrieval_table(names, embedder, cache, words_grid=WORDS) -> dict:
    """{(words, context, hybrid): {set: answer in context}} over the whole grid."""
    table, store = {}, {}
    for name in names:
        gold = gen.load_gold(devsets.questions(name))
        for words, context in itertools.product(words_grid, CONTEXTS):
            print(f"{name}: chunks of {words} words, context {context} ...", file=sys.stderr, flush=True)
            chunks, vectors = indexed(name, words, context, embedder, cache, store)
            for hybrid in HYBRIDS:
                retrieve = retriever(chunks, vectors, embedder, context, hybrid)
                table.setdefault((words, context, hybrid), {})[name] = in_context(gold, retrieve)
    return table


def k_table(names, setting, embedder, cache) -> dict:
    """{k: {set: answer in context}} at one retrieval setting."""
    words, context, hybrid = setting
    table, store = {}, {}
    for name in names:
        gold = gen.load_gold(devsets.questions(name))
        retrieve = retriever(*indexed(name, words, context, embedder, cache, store), embedder, context,
                             hybrid)
        for k in KS:
            table.setdefault(k, {})[name] = in_context(gold, retrieve, k)
    return table


def choose_k(table: dict, names: list[str]) -> int:
    """The fewest passages whose mean answer in context over `names` reaches IN_CONTEXT_GOAL
    (else the most)."""
    return next((k for k in KS if np.mean([table[k][n] for n in names]) >= IN_CONTEXT_GOAL), KS[-1])


def choose(table: dict, names: list[str]):
    """The setting with the best mean over `names`; ties go to the first in the grid."""
    return max(table, key=lambda setting: np.mean([table[setting][n] for n in names]))


def leave_one_out(table: dict, names: list[str]) -> dict:
    """{held-out set: (the setting chosen on the others, its score on the held-out set)}."""
    chosen = {held: choose(table, [n for n in names if n != held]) for held in names}
    return {held: (setting, table[setting][held]) for held, setting in chosen.items()}


# == The extractive answer ===================================================================
def answer_cases(name: str, setting, k: int, embedder, cache, store) -> list[dict]:
    """Each question of a set with its prompt (k passages, as --docs builds it), the features
    of every candidate sentence, computed once for every fit, and whether the question has a
    word no page uses."""
    words, context, hybrid = setting
    chunks, vectors = indexed(name, words, context, embedder, cache, store)
    retrieve = retriever(chunks, vectors, embedder, context, hybrid)
    stop, known = answering.stop_words(), generators.known_words(chunks)
    cases = []
    for item in gen.load_gold(devsets.questions(name)):
        prompt = answering.grounded_prompt(item["question"], retrieve(item["question"], k))
        question = prompt.question
        candidates = generators.candidate_sentences(prompt.passages, stop)
        idf = answering.idf_weights([c["words"] for c in candidates])
        features = generators.features(question, candidates, idf, stop, embedder.encode)
        cases.append({"item": item, "prompt": prompt, "candidates": candidates, "features": features,
                      "new_word": not set(answering.content_words(question, stop)) <= known})
    return cases


def best_support(case: dict, weights: dict) -> float:
    """The support of the sentence the answer starts with (0 when there is none)."""
    part = case["features"][0] if case["features"] else []
    if not part:
        return 0.0
    best = max(range(len(part)), key=lambda i: (sum(weights[f] * part[i][f] for f in FEATURES), -i))
    return generators.support_of(part[best], weights)


def fit_answer(cases: list[dict], strength: float = 1.0):
    """(weights, (refuse below, refuse below with a new word)) for the extractive answer, from
    these questions: a logistic regression of "this sentence states every gold fact" on the
    sentences' features (C=strength); then the two refusal thresholds that score best on
    these questions (gate_score: a wrong answer costs what a right one earns)."""
    from sklearn.linear_model import LogisticRegression
    rows, labels = [], []
    for case in cases:
        if case["item"]["answerable"]:
            for candidate, features in zip(case["candidates"], case["features"][0]):
                rows.append([features[f] for f in FEATURES])
                text = documents.fact_text(candidate["text"])
                labels.append(all(p.search(text) for p in case["item"]["answer"]))
    model = LogisticRegression(class_weight="balanced", max_iter=5000, C=strength)
    model.fit(np.array(rows), np.array(labels))
    weights = {f: round(float(w), 2) for f, w in zip(FEATURES, model.coef_[0])}
    answered = [(best_support(c, weights), c["new_word"], answered_verdict(c, weights)) for c in cases]
    return weights, tuple(best_threshold([(s, v) for s, new, v in answered if new == group])
                          for group in (False, True))


# answered (the check may still refuse it)
GATE_SCORE = {"right": 1, "partial": 0, "wrong": -2, "answered (wrong)": -2, "refused (right)": 1}
REFUSED_SCORE = {True: 0, False: 1}          # refused: an answerable question 0, an unanswerable +1


def answered_verdict(case: dict, weights: dict) -> str:
    """The verdict of the extractive answer to this question if it is not refused."""
    return verdicts([case], weights, (-math.inf, -math.inf), each=True)[0]


def best_threshold(cases: list[tuple[float, str]]) -> float:
    """The refusal threshold on support with the best score over (support, verdict if
    answered) pairs: refusing below it; ties go to the lower one (answering more); two
    decimals, rounded down."""
    if not cases:
        return -math.inf
    candidates = sorted({-math.inf} | {math.floor(s * 100) / 100 for s, _ in cases} |
                        {math.floor(s * 100) / 100 + 0.01 for s, _ in cases})
    def total(t):
        return sum(REFUSED_SCORE[v != "answered (wrong)"] if s < t else GATE_SCORE.get(v, 0)
                   for s, v in cases)
    return max(candidates, key=lambda t: (total(t), -t))


def choose_strength(cases_by_set: dict) -> float:
    """The fit's strength with the most right answers when each of these sets is answered with
    weights fitted on the others (ties: the smoother)."""
    def right(strength):
        return sum(verdicts(cases, *fit_answer([c for m, cs in cases_by_set.items() if m != n for c in cs],
                                               strength))["right"] for n, cases in cases_by_set.items())
    return max(STRENGTHS, key=right)


def verdicts(cases: list[dict], weights: dict, refuse_below: tuple, each: bool = False):
    """verdict -> how many of these questions the extractive answer gets, as the user reads it
    after the kit's quote check (each=True: the list of verdicts, one a question)."""
    from rageval.devset import counts, verdict
    rows = []
    for case in cases:
        chosen = generators.pick(case["candidates"], case["features"], weights,
                                 refuse_below[case["new_word"]])
        reply = "\n".join(f'Quote: "{p}" [{c["number"]}]' for c in chosen for p in c["quote"])
        _, shown = answering.checked_answer(reply or answering.REFUSAL, case["prompt"])
        rows.append({"verdict": verdict(shown, case["item"], answering.REFUSAL)})
    return [r["verdict"] for r in rows] if each else counts(rows)


def print_answers(names: list[str], table: dict | None, embedder, cache) -> None:
    """Each held-out project answered with every setting chosen on the other four: retrieval,
    passages per prompt, weights and thresholds; then what the five together choose. table
    None: retrieval and passages as the kit ships them, only the answer chosen."""
    store, k_tables, cases = {}, {}, {}
    fixed = table is None
    if fixed:                               # the kit's retrieval: the only setting to choose from
        table = {(chunking.WORDS, True, retrieval.DOCS_HYBRID): {n: 0.0 for n in names}}
    print(f"\n== Passages per prompt and extractive answers: each project held out, everything "
          f"chosen on the other four ==")
    for held in names + [None]:
        others = [n for n in names if n != held]
        setting = choose(table, others)
        if setting not in k_tables:
            k_tables[setting] = k_table(names, setting, embedder, cache)
        k = documents.K if fixed else choose_k(k_tables[setting], others)
        if (setting, k) not in cases:
            cases[setting, k] = {n: answer_cases(n, setting, k, embedder, cache, store) for n in names}
        strength = choose_strength({n: cases[setting, k][n] for n in others})
        weights, refuse = fit_answer([c for n in others for c in cases[setting, k][n]], strength)
        if held is None:
            in_context = np.mean([k_tables[setting][k][n] for n in names])
            print(f"  all five: {setting[0]} words, context {setting[1]}, BM25 share {setting[2]}, "
                  f"k={k} (answer in context {in_context:.2f}), C={strength}\n"
                  f"  WEIGHTS = {weights}\n  REFUSE_BELOW, REFUSE_BELOW_NEW_WORD = {refuse[0]}, {refuse[1]}: "
                  f"the kit's (ragkit/generators.py)")
            continue
        c = verdicts(cases[setting, k][held], weights, refuse)
        answerable = c["right"] + c["partial"] + c["wrong"] + c["refused (wrong)"]
        print(f"  {held:<10} k={k}, C={strength}, in context {k_tables[setting][k][held]:.2f}; "
              f"right {c['right']:2}, partial {c['partial']:2}, wrong {c['wrong']:2}, "
              f"refused {c['refused (wrong)']:2} of "
              f"{answerable} answerable; refused {c['refused (right)']} of "
              f"{c['refused (right)'] + c['answered (wrong)']} unanswerable")


# == The command line ========================================================================
def print_choice(title: str, table: dict, names: list[str], labels) -> None:
    """Each held-out project's chosen setting and score, then the setting chosen on all."""
    print(f"\n== {title}: each project held out, its setting chosen on the other four ==")
    for held, (setting, score) in leave_one_out(table, names).items():
        print(f"  {held:<10} {labels(setting):<44} held-out {score:.2f}")
    best = choose(table, names)
    print(f"  {'all five':<10} {labels(best):<44} (mean {np.mean([table[best][n] for n in names]):.2f}): "
          f"the kit's setting")


def run(args) -> None:
    """Score the grid on every set, then choose by leaving one project out."""
    names = args.sets.split(",") if args.sets else devsets.available()
    for name in names:
        devsets.pages(name)                 # an unknown or missing set: one line now
    if len(names) < 3:
        raise RuntimeError(f"tuning needs at least 3 development sets here, found {len(names)}: "
                           f"run `python -m rageval.downloads` once")
    embedder, cache = CachedEmbedder("minilm"), EmbeddingCache(args.cache)
    if args.part == "answer":
        print_answers(names, None, embedder, cache)
        return
    table = retrieval_table(names, embedder, cache, args.words)
    print_choice(f"Retrieval: answer in context at k={K}", table, names,
                 lambda s: f"{s[0]} words, context {'on' if s[1] else 'off'}, BM25 share {s[2]}")
    if args.part == "retrieval":
        return
    print_answers(names, table, embedder, cache)


def parse_args(argv=None):
    """--part, --cache."""
    p = support.OneLineParser(description="Choose the --docs settings, leaving one project out.")
    p.add_argument("--part", choices=["retrieval", "answer", "all"], default="all")
    p.add_argument("--sets", help=f"comma-separated, at least 3, from {', '.join(devsets.SETS)} "
                                  f"(default: every one here)")
    p.add_argument("--words", type=support.bounded(int, 10, 2000), nargs="+", default=WORDS,
                   help="the chunk sizes to try (default: %(default)s)")
    p.add_argument("--cache", help="where encoded chunk vectors are kept (default: .rag_cache)")
    return p.parse_args(argv)


main = support.main_for(run, parse_args)


if __name__ == "__main__":
    support.leave(main())
