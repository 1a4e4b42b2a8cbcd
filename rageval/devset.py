"""
rageval/devset.py: the --docs path scored on the development sets: what the reader made of the
pages, whether retrieval finds the right file, whether the k passages hold the answer at all,
and what the generators answer.

    python -m rageval.devset                        # every set that is here, MiniLM
    python -m rageval.devset --sets black,pip       # some of them
    python -m rageval.devset --generators extractive,local
    python -m rageval.devset --show-answers         # each set's worst answers, verbatim
    python -m rageval.devset --docs my_docs/ --questions my_questions.jsonl

The sets (rageval/devsets.py, data/devsets/README.md): five projects' docs, each with 30 or more
questions in users' words, the files and the facts that answer them, and 8 the pages cannot
answer. An answer is right when it states every fact in its first 50 words and cites a file
that answers; partial when it states some of them (or all, citing another file); wrong when it
states none; unanswerable questions should be refused. Offline; MiniLM runs on this machine.
"""

import argparse
import hashlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import rag_from_scratch as rag
from rageval import devsets
from rageval import generation as gen
from rageval.embedding_cache import EmbeddingCache
from rageval.generation import KEPT_SEED
from ragkit import chunking, documents, support, answering, llama, generators, retrieval
from rageval.arguments import add_backend
from ragkit.folder_index import CACHE_DIR, CachedEmbedder
from ragkit.support import CODE, printable

K = 5                       # hit@5 and MRR@5 by file
PROMPT_K = documents.K      # the passages an answer is written from, as --docs gives them
VERDICTS = ("right", "partial", "wrong", "refused (wrong)", "refused (right)", "answered (wrong)")
WORST_FIRST = ("answered (wrong)", "wrong", "refused (wrong)", "partial", "refused (right)", "right")

# What markup left in a chunk's prose looks like (code is left out of the count).
ARTEFACTS = {
    "heading attribute {#id}": r"\{:?\s*[#.][^{}\n]*\}",
    "admonition or tab marker": r"(?m)^\s*(?:!!!|\?\?\?|///|:::|===)",
    "HTML tag or comment": r"<!--|</?[A-Za-z][\w-]*(?:\s[^<>]*)?/?>",
    "include or template directive": r"\{\*|\{%|\{\{",
    "block quote marker": r"(?m)^\s*>",
    "link target or URL in brackets": r"(?m)\]\([^)\s]*\)|^\s*\[[^\]]+\]:\s",
}


# == Indexing a set as --docs does ===========================================================
def spread(gold: list, questions: int | None) -> list[tuple[int, dict]]:
    """(number, item) of `questions` items spread evenly over the set, so the ones the pages
    cannot answer (each set's last) come in their share; None: every one."""
    if questions is None or questions >= len(gold):
        return list(enumerate(gold))
    return [(i * len(gold) // questions, gold[i * len(gold) // questions]) for i in range(questions)]


def in_turn(lists: list[list]) -> list:
    """The items of several lists taken from each in turn, so that a run stopped early has
    asked every set alike: in_turn([[a1, a2, a3], [b1]]) -> [a1, b1, a2, a3]."""
    return [row for group in zip(*lists) for row in group] + \
        [row for rows in lists for row in rows[min(map(len, lists), default=0):]]


def build(folder, embedder, cache=None, context: bool = True):
    """(chunks, vectors of the variant in use): the folder read and chunked as --docs does it,
    each chunk embedded once (through the disk cache when one is given)."""
    docs = documents.load_documents(folder)
    chunks = chunking.document_chunks(docs, fits=chunking.model_fits(embedder))
    texts = chunking.with_context(chunks) if context else [c["text"] for c in chunks]
    if embedder.backend == "minilm" and cache is not None:
        vectors = np.asfortranarray(cache.encode(embedder, texts, "chunks"))
    else:
        vectors = rag.build_index([{"text": t} for t in texts], embedder)
    return chunks, vectors


def retriever(chunks, vectors, embedder, context: bool, hybrid=retrieval.DOCS_HYBRID):
    """fn(question, k): the kit's --docs retrieval over vectors already made for `context`."""
    return retrieval.make_retriever(chunks, None if context else vectors, embedder,
                                    hybrid=hybrid or None, context=context,
                                    context_vectors=vectors if context else None)


# == Replies kept on disk ====================================================================
# A local model's reply to a request can be kept in a JSON Lines file, one a model, under the
# request's SHA-256: the development sets' runs (rageval/answer_tuning.py, this file) take
# hours, and a rerun asks only what is not there yet. Their prompts' markers get a fixed tag
# (rageval/generation.py's KEPT_SEED), so the same question and passages give the same request.


def request_key(model: str, system: str, prompt: str, max_tokens: int) -> str:
    """The SHA-256 that names one request to one model."""
    return hashlib.sha256(json.dumps([model, system, prompt, max_tokens]).encode()).hexdigest()


MAX_KEPT_LINE = 1 << 20      # characters: a kept reply of at most 32,768 tokens is far shorter


def read_kept(path: Path) -> dict:
    """key -> record, from the JSON Lines file. A last line cut short (a run killed while
    writing) is skipped; any other line that is not {"key": str, "reply": str, ...}, or is
    longer than MAX_KEPT_LINE, is one ValueError naming the file and the line."""
    kept = {}
    if not path.is_file():
        return kept
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    for n, line in enumerate(lines, 1):
        if len(line) > MAX_KEPT_LINE:
            raise ValueError(f"{path}: line {n} is {len(line):,} characters, not a kept reply: "
                             f"remove the line (or the file, to ask again)")
        try:
            record = json.loads(line)
        except ValueError:
            if n == len(lines):
                continue
            raise ValueError(f"{path}: line {n} is not JSON: remove the line (or the file)") from None
        if not (isinstance(record, dict) and isinstance(record.get("key"), str)
                and isinstance(record.get("reply"), str)):
            raise ValueError(f"{path}: line {n} is not a kept reply (a \"key\" and a \"reply\", "
                             f"both text): remove the line (or the file)")
        kept[record["key"]] = record
    return kept


def kept_file(model_path, folder) -> Path:
    """The JSON Lines file of one model's replies: .rag_cache/answers-<file name>.jsonl."""
    return Path(folder) / f"answers-{Path(model_path).stem}.jsonl"


@dataclass
class Keeping:
    """A local model whose replies are kept (a Generator of ragkit/generators.py): a request
    answered before is read from the kept file, any other asked of the model and its reply kept;
    either is guarded as the model's own answer() guards it."""
    model: generators.LocalModel
    folder: Path
    kept: dict = field(default_factory=dict, repr=False)      # key -> record, read at the start
    name: str = field(init=False)
    stream: bool = False

    def __post_init__(self):
        self.kept = read_kept(kept_file(self.model.path, self.folder))
        self.name = self.model.name

    def answer(self, prompt: answering.GroundedPrompt):
        """The kept reply to the prompt, or the model's, kept now; guarded."""
        key = request_key(str(self.model.path), prompt.system, prompt.text, self.model.max_tokens)
        if key not in self.kept:
            reply = printable("".join(self.model.reply(prompt.text, prompt.system)).strip())
            self.kept[key] = {"key": key, "reply": reply}
            with open(kept_file(self.model.path, self.folder), "a", encoding="utf-8") as out:
                out.write(json.dumps(self.kept[key]) + "\n")
        return answering.guarded([self.kept[key]["reply"]], prompt)


# == Scores =================================================================================
def verdict(answer: str, item: dict, refusal: str) -> str:
    """right / partial / wrong / refused (wrong) for an answerable question (facts in the first
    50 words, a relevant file cited); refused (right) / answered (wrong) for the others."""
    refused = answer.strip() == refusal
    if not item["answerable"]:
        return "refused (right)" if refused else "answered (wrong)"
    if refused:
        return "refused (wrong)"
    head = gen.fact_head(answer)
    found = [bool(p.search(head)) for p in item["answer"]]
    if all(found) and gen.cites_relevant(answer, item["relevant"]):
        return "right"
    return "partial" if any(found) else "wrong"


def artefact_counts(chunks: list[dict], fits, context: bool = True) -> dict:
    """How many chunks show each kind of left-over markup, and the other faults of a chunk:
    too long for the model (with the title in front under --context), a lead-in with nothing
    after it, ten words or fewer."""
    prose = [CODE.sub("", c["text"]) for c in chunks]         # code blocks and `spans` left out
    counts = {name: sum(bool(re.search(p, text)) for text in prose) for name, p in ARTEFACTS.items()}
    code = [c for c in chunks if "```" in c["text"]]
    counts["code block on one line"] = sum("\n" not in c["text"] for c in code)
    texts = chunking.with_context(chunks) if context else [c["text"] for c in chunks]
    counts["longer than the model reads"] = sum(not fits(t) for t in texts)
    counts["ending in a colon"] = sum(c["text"].rstrip().endswith(":") for c in chunks)
    counts["ten words or fewer"] = sum(len(c["text"].split()) <= 10 for c in chunks)
    return counts


def score(gold: list[dict], chunks, vectors, embedder, generators: dict, context: bool = True) -> dict:
    """Retrieval by file, answer in context, and each generator's verdicts, for one set."""
    retrieve = retriever(chunks, vectors, embedder, context)
    answerable = [g for g in gold if g["answerable"]]
    m = retrieval.evaluate_retriever(answerable, retrieve, K)
    in_context = [documents.holds_every_fact(retrieve(g["question"], PROMPT_K), g) for g in answerable]
    results = gen.evaluate_generation(gold, generators, retrieve, k=PROMPT_K, seed=KEPT_SEED)
    answers = {name: [{**row, "verdict": verdict(row["answer"], item, answering.REFUSAL)}
                      for row, item in zip(r["rows"], gold)] for name, r in results.items()}
    return {"hit1": m["hit1"], "hit5": m["hit_rate"], "mrr": m["mrr"], "answerable": len(answerable),
            "unanswerable": len(gold) - len(answerable), "in_context": float(np.mean(in_context)),
            "answers": answers, "chunks": len(chunks),
            "median_words": float(np.median([len(c["text"].split()) for c in chunks])),
            "faults": artefact_counts(chunks, chunking.model_fits(embedder), context)}


def counts(rows: list[dict]) -> dict:
    """verdict -> how many answers got it."""
    return {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}


# == Printing ===============================================================================
def print_scores(name: str, s: dict, show: int) -> None:
    """One set's figures: retrieval, answer in context, each generator's verdicts."""
    n = s["answerable"]
    print(f"\n== {name}: {n} answerable and {s['unanswerable']} unanswerable questions ==")
    f = s["faults"]
    markup = sum(f[name] for name in ARTEFACTS) + f["code block on one line"]
    print(f"chunks: {s['chunks']}, median {s['median_words']:.0f} words; {f['longer than the model reads']} "
          f"longer than the model reads, {f['ending in a colon']} ending in a colon, {markup} with "
          f"markup left, {f['ten words or fewer']} of ten words or fewer")
    print(f"retrieval by file: hit@1 {s['hit1']:.2f}  hit@{K} {s['hit5']:.2f}  mrr@{K} {s['mrr']:.2f}")
    print(f"answer in context (every gold fact in the {PROMPT_K} passages): {s['in_context']:.2f}")
    for generator, rows in s["answers"].items():
        c = counts(rows)
        quotes, found = sum(r["quotes"] for r in rows), sum(r["checked"] for r in rows)
        print(f"{generator}: right {c['right']}, partial {c['partial']}, wrong {c['wrong']}, "
              f"refused {c['refused (wrong)']} of {n} answerable; refused {c['refused (right)']} "
              f"of {s['unanswerable']} unanswerable; {found} of {quotes} quotes found in the "
              f"passages")
        for row in sorted(rows, key=lambda r: WORST_FIRST.index(r["verdict"]))[:show]:
            print(f"  [{row['verdict']}] {row['question']}\n    {' '.join(row['answer'].split())[:400]}")


def generator(spec: str, args):
    """A generator named as --generators names it: "local" (the default model), "local:MODEL"
    (qwen, smollm2 or a .gguf file), or any other generator's name. A local model's replies
    are kept in --cache (a rerun, or the same request in rageval/answer_tuning.py, is not
    asked again), then guarded as a model's own answer() guards it."""
    name, _, model = spec.partition(":")
    models = gen.models_from(args, model or None)
    if name != "local":
        return gen.make_generator(name, models)
    local = generators.local_generator(models.local_model, models.threads or llama.free_cores(), models.max_tokens)
    return Keeping(local, Path(args.cache or CACHE_DIR))


def run(args) -> None:
    """Index each set, then print its figures."""
    if args.docs:
        if not Path(args.docs).is_dir():
            raise FileNotFoundError(f"document folder not found: {args.docs}")
        sets = {args.docs: (args.docs, args.questions)}
    else:
        names = args.sets.split(",") if args.sets else devsets.available()
        sets = {name: (devsets.pages(name), devsets.questions(name)) for name in names}
    embedder = CachedEmbedder(args.backend)
    cache = EmbeddingCache(args.cache) if embedder.backend == "minilm" else None
    names = args.generators.split(",")
    models = {name: generator(name, args) for name in names if name != "extractive"}
    for name, (folder, questions) in sets.items():
        gold = [item for _, item in spread(gen.load_gold(questions), args.sample)]
        chunks, vectors = build(folder, embedder, cache, args.context)
        generators = {g: models.get(g) or gen.make_generator(g, gen.models_from(args), embedder=embedder, chunks=chunks)
                      for g in names}        # the extractive one learns each set's words
        print(f"\n{name}: {len(chunks)} chunks, backend={embedder.backend}", file=sys.stderr)
        print_scores(name, score(gold, chunks, vectors, embedder, generators, args.context),
                     args.show_answers)


def parse_args(argv=None):
    """Which sets, which generators, how many answers to show."""
    from ragkit.generators import add_model_arguments
    p = support.OneLineParser(description="Score the --docs path on the development sets.")
    p.add_argument("--sets",
                   help=f"comma-separated, from {', '.join(devsets.SETS)} (default: every one here)")
    p.add_argument("--docs", metavar="FOLDER", help="your own folder instead (give --questions too)")
    p.add_argument("--questions", help="with --docs: JSON Lines of questions, files and facts")
    add_backend(p, "minilm", auto=False)
    p.add_argument("--generators", default="extractive",
                   help="comma-separated: extractive, local (the default model), local:qwen, "
                        "local:smollm2, local:FILE.gguf, openai, bedrock (default: %(default)s)")
    p.add_argument("--context", action=argparse.BooleanOptionalAction, default=True,
                   help="embed each chunk with its title in front (default: on, as --docs)")
    p.add_argument("--sample", type=support.bounded(int, 1, 1000), metavar="N",
                   help="N questions of each set, spread over it (default: all)")
    p.add_argument("--show-answers", type=support.bounded(int, 0, 1000), default=0, metavar="N",
                   help="each set's N worst answers")
    p.add_argument("--cache", help="where encoded chunk vectors are kept (default: .rag_cache)")
    add_model_arguments(p)
    p.add_argument("--model-id", default=rag.defaults(rag.generate_with_bedrock)["model_id"])
    p.add_argument("--region", default=rag.defaults(rag.generate_with_bedrock)["region"])
    args = p.parse_args(argv)
    if bool(args.docs) != bool(args.questions):
        raise ValueError("--docs and --questions go together")
    return args


main = support.main_for(run, parse_args)


if __name__ == "__main__":
    support.leave(main())
