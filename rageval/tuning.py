"""
rageval/tuning.py: the --docs settings, chosen on the development sets by leaving one project out.

    python -m rageval.tuning                   # retrieval, then the extractive answer
    python -m rageval.tuning --part retrieval  # chunk size, --context and the BM25 share only

For each of the five projects, each setting is chosen on the other four and the held-out
project is scored with it: its figure is what a folder nobody tuned on gets. The kit ships
the settings chosen on all five. Retrieval is chosen by answer in context (the share of
answerable questions whose K passages hold every gold fact; ties go to the first in the grid:
fewer words, no context, less BM25). The extractive answer's sentence-scoring weights are a
logistic regression of "this sentence states every gold fact" on its features; its refusal
threshold refuses the lowest-scoring tenth of the answerable questions (the most that still
keeps nine in ten answered).
MiniLM; the chunk vectors are cached in .rag_cache, so a second run takes a fraction of the first.
"""

import itertools
import sys

import numpy as np

from rageval import devsets
from rageval import generation as gen
from ragkit import chunking, documents, extractive, plumbing, retrieval
from ragkit.embeddings import CachedEmbedder, EmbeddingCache

K = 5                                          # the passages --docs gives a generator
WORDS = [60, 100, 150]                         # words of text per chunk at most
CONTEXTS = [False, True]                       # titles in front when embedding
HYBRIDS = [0.0, 0.2, 0.3, 0.5]                 # BM25's share of the fused score
FEATURES = ("meaning", "words", "names", "code", "asks", "rank")   # extractive.scores()' features


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


def in_context(gold, retrieve) -> float:
    """The share of answerable questions whose K passages hold every gold fact."""
    answerable = [g for g in gold if g["answerable"]]
    return float(np.mean([documents.holds_every_fact(retrieve(g["question"], K), g) for g in answerable]))


def retrieval_table(names, embedder, cache) -> dict:
    """{(words, context, hybrid): {set: answer in context}} over the whole grid."""
    table, store = {}, {}
    for name in names:
        gold = gen.load_gold(devsets.questions(name))
        for words, context in itertools.product(WORDS, CONTEXTS):
            print(f"{name}: chunks of {words} words, context {context} ...", file=sys.stderr, flush=True)
            chunks, vectors = indexed(name, words, context, embedder, cache, store)
            for hybrid in HYBRIDS:
                retrieve = retriever(chunks, vectors, embedder, context, hybrid)
                table.setdefault((words, context, hybrid), {})[name] = in_context(gold, retrieve)
    return table


def choose(table: dict, names: list[str]):
    """The setting with the best mean over `names`; ties go to the first in the grid."""
    return max(table, key=lambda setting: np.mean([table[setting][n] for n in names]))


def leave_one_out(table: dict, names: list[str]) -> dict:
    """{held-out set: (the setting chosen on the others, its score on the held-out set)}."""
    chosen = {held: choose(table, [n for n in names if n != held]) for held in names}
    return {held: (setting, table[setting][held]) for held, setting in chosen.items()}


# == The extractive answer ===================================================================
def answer_cases(name: str, setting, embedder, cache, store) -> list[dict]:
    """Each question of a set with its prompt (K passages, as --docs builds it) and the
    features of every candidate sentence, computed once for the whole weight grid."""
    import rag_from_scratch as rag
    words, context, hybrid = setting
    chunks, vectors = indexed(name, words, context, embedder, cache, store)
    retrieve = retriever(chunks, vectors, embedder, context, hybrid)
    stop = extractive.stop_words()
    cases = []
    for item in gen.load_gold(devsets.questions(name)):
        prompt = rag.rag_answer(item["question"], None, chunks, None, K, retrieve=retrieve,
                                prompt_fn=documents.build_fenced_prompt)["prompt"]
        question, passages = extractive.read_prompt(prompt)
        candidates = extractive.candidate_sentences(passages, stop)
        idf = extractive.idf_weights([c["words"] for c in candidates])
        features = extractive.scores(question, candidates, idf, stop, embedder.encode)
        cases.append({"item": item, "candidates": candidates, "features": features})
    return cases


def fit_weights(cases: list[dict]):
    """(weights, refuse below) for the extractive answer, from these questions: a logistic
    regression of "this sentence states every gold fact" on the sentences' features, and the
    score below which the lowest tenth of the answerable questions' best sentences fall."""
    from sklearn.linear_model import LogisticRegression
    rows, labels = [], []
    for case in cases:
        if case["item"]["answerable"]:
            for candidate, features in zip(case["candidates"], case["features"][0]):
                rows.append([features[f] for f in FEATURES])
                labels.append(all(p.search(candidate["text"]) for p in case["item"]["answer"]))
    model = LogisticRegression(class_weight="balanced", max_iter=5000).fit(np.array(rows), np.array(labels))
    weights = {f: round(float(w), 2) for f, w in zip(FEATURES, model.coef_[0])}
    supports = []                             # each answerable question's chosen sentence, supported
    for case in cases:
        if case["item"]["answerable"] and case["candidates"]:
            part = case["features"][0]
            chosen = max(range(len(part)), key=lambda i: (sum(weights[f] * part[i][f] for f in FEATURES), -i))
            supports.append(extractive.support_of(part[chosen], weights))
    return weights, round(float(sorted(supports)[len(supports) // 10]), 2)


def verdicts(cases: list[dict], weights: dict, refuse_below: float) -> dict:
    """verdict -> how many of these questions the extractive answer gets it."""
    from rageval.devset import counts, verdict
    refusal = gen.refusal_sentence(documents.DOCS_SYSTEM_PROMPT)
    rows = []
    for case in cases:
        chosen = extractive.pick(case["candidates"], case["features"], weights, refuse_below)
        answer = " ".join(f"{c['text']} [{c['source']}]" for c in chosen) if chosen else refusal
        rows.append({"verdict": verdict(answer, case["item"], refusal)})
    return counts(rows)


def print_answers(cases_by_set: dict) -> None:
    """Each held-out project's verdicts with weights fitted on the other four; then the fit on all."""
    print("\n== Extractive answers: each project held out, fitted on the others ==")
    for held, cases in cases_by_set.items():
        weights, refuse = fit_weights([c for n, cs in cases_by_set.items() if n != held for c in cs])
        c = verdicts(cases, weights, refuse)
        answerable = c["right"] + c["partial"] + c["wrong"] + c["refused (wrong)"]
        print(f"  {held:<10} right {c['right']:2}, partial {c['partial']:2}, wrong {c['wrong']:2}, "
              f"refused {c['refused (wrong)']:2} of {answerable} answerable; refused "
              f"{c['refused (right)']} of {c['refused (right)'] + c['answered (wrong)']} unanswerable")
    weights, refuse = fit_weights([c for cs in cases_by_set.values() for c in cs])
    print(f"  all: WEIGHTS = {weights}, REFUSE_BELOW = {refuse}: the kit's (ragkit/extractive.py)")


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
    names = devsets.available()
    if len(names) < 3:
        raise RuntimeError(f"tuning needs at least 3 development sets here, found {len(names)}: "
                           f"run `python -m rageval.downloads` once")
    embedder, cache = CachedEmbedder("minilm"), EmbeddingCache(args.cache)
    table = retrieval_table(names, embedder, cache)
    print_choice(f"Retrieval: answer in context at k={K}", table, names,
                 lambda s: f"{s[0]} words, context {'on' if s[1] else 'off'}, BM25 share {s[2]}")
    if args.part == "retrieval":
        return
    store, setting = {}, choose(table, names)
    print_answers({name: answer_cases(name, setting, embedder, cache, store) for name in names})


def parse_args(argv=None):
    """--part, --cache."""
    p = plumbing.OneLineParser(description="Choose the --docs settings, leaving one project out.")
    p.add_argument("--part", choices=["retrieval", "all"], default="all")
    p.add_argument("--cache", help="where encoded chunk vectors are kept (default: .rag_cache)")
    return p.parse_args(argv)


main = plumbing.main_for(run, parse_args)


if __name__ == "__main__":
    plumbing.leave(main())
