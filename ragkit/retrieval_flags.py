"""
ragkit/retrieval_flags.py: the retrieval flags beyond the tutorial, from the command line to
a retriever, and --compare.

    python rag_from_scratch.py --hybrid rrf --question "How much time off do new fathers get?"
    python rag_from_scratch.py --docs notes/ --hybrid 0.3 --rerank auto --question "..."
    python rag_from_scratch.py --docs notes/ --source ops/ --tag database --question "..."
    python rag_from_scratch.py --context --compare     # plain, hybrid, rerank, context: one table

settings(args, chunks) turns --hybrid, --rerank, --source, --tag and --context into the settings
of one Retriever (ragkit/retrieval.py's make_retriever); print_evaluation scores what it found
for labelled questions, and print_compare (--compare) prints every variant side by side, with
bootstrap intervals, so a difference can be told from noise.
"""

from __future__ import annotations

import sys

import numpy as np

import rag_from_scratch as rag
from ragkit import documents, embeddings
from ragkit.exits import refuse_empty
from ragkit.text import plural
from ragkit.retrieval import (GET_RERANKER, RERANK_DEPTH, RERANKER, bootstrap_ci, check_filters,
                              in_filters, load_reranker, make_retriever, paired_bootstrap,
                              per_question, evaluate_retriever)


def hybrid_setting(value: str):
    """--hybrid's value: "rrf", or the BM25 share of a weighted sum as a float in [0, 1]."""
    if value.strip().lower() == "rrf":
        return "rrf"
    try:
        if 0 <= float(value) <= 1:
            return float(value)
    except ValueError:
        pass
    raise ValueError(f"--hybrid takes rrf or a BM25 weight between 0 and 1 (e.g. 0.3), got {value!r}")


def variant_name(hybrid=None, reranker=None, context: bool = False) -> str:
    """A row label: "plain", "hybrid rrf", "hybrid 0.3 + rerank + context", ..."""
    parts = ([f"hybrid {hybrid}"] if hybrid is not None else []) + (["rerank"] if reranker else []) \
        + (["context"] if context else [])
    return " + ".join(parts) or "plain"


def compare_variants(eval_set, chunks, index, embedder, k, hybrid="rrf", reranker=None, allowed=None,
                     context_vectors=None):
    """{name: metrics} for plain, hybrid, rerank (if a reranker is given), context, and all."""
    settings = [{}, {"hybrid": hybrid}] + ([{"reranker": reranker}] if reranker else []) \
        + [{"context": True}, {"hybrid": hybrid, "reranker": reranker, "context": True}]
    rows = {}
    for chosen in settings:
        retrieve = make_retriever(chunks, index, embedder, allowed=allowed, **chosen,
                                  context_vectors=context_vectors)
        metrics = evaluate_retriever(eval_set, retrieve, k)
        rows[variant_name(**chosen)] = {**metrics, "timing": retrieve.timing}
    return rows


def print_comparison(rows: dict, k: int) -> None:
    """One line per variant: hit@1, hit/recall/MRR/nDCG at k, nDCG's interval and its gain over plain."""
    width = max(len(name) for name in rows) + 2
    print(f"{'variant':<{width}}hit@1  hit@{k}  recall@{k}  mrr@{k}  ndcg@{k}  "
          f"ndcg 95% CI    ndcg - plain [95% CI]")
    plain = per_question(rows["plain"], "ndcg")
    for name, m in rows.items():
        low, high = bootstrap_ci(per_question(m, "ndcg"))
        line = (f"{name:<{width}}{m['hit1']:.2f}   {m['hit_rate']:.2f}   {m['recall']:.2f}      "
                f"{m['mrr']:.2f}   {m['ndcg']:.2f}    [{low:.2f}, {high:.2f}]")
        if name != "plain":
            diff, low, high = paired_bootstrap(plain, per_question(m, "ndcg"))
            line += f"   {diff:+.2f} [{low:+.2f}, {high:+.2f}]"
        print(line)
    timed = [m["timing"] for m in rows.values() if m["timing"]["queries"]]
    if timed:
        ms = 1000 * timed[0]["seconds"] / timed[0]["queries"]
        print(f"reranking added {ms:.1f} ms per query ({RERANK_DEPTH * k} candidates, 1 thread, "
              f"this machine and this reranker)")


def print_evaluation(eval_set, found: list[list[dict]], k: int, name: str, source: str,
                     timing: dict) -> None:
    """Step 6 for the retrieval --question uses, in a block that names its settings: found[i]
    holds the k chunks it retrieved for question i, and @1 scores the first of them. timing:
    the retriever's (the reranker's time)."""
    print(f"\n== Retrieval evaluation ({source}, {plural(len(eval_set), 'question')}): {name}, "
          f"the retrieval --question uses ==")
    rankings = [[r["doc_id"] for r in chunks] for chunks in found]
    for n in sorted({1, k}):                           # as the lesson's print_evaluation
        print(rag.evaluation_line(rag.score_rankings(eval_set, [r[:n] for r in rankings], n,
                                                     verbose=(n == 1))))
    if timing["queries"]:
        ms = 1000 * timing["seconds"] / timing["queries"]
        print(f"reranking added {ms:.1f} ms per query")


def check_args(args) -> None:
    """--hybrid, --rerank, --source, --tag, --context, --compare: the values, before slow work."""
    refuse_empty(args, ("source", "tag", "rerank"))
    if args.hybrid is not None:
        hybrid_setting(args.hybrid)
    if args.compare and args.docs and not args.eval:
        raise ValueError("--compare with --docs needs --eval FILE: questions labelled with the files "
                         "that answer them")
    if args.source is not None or args.tag is not None:
        docs = rag.CORPUS
        if args.docs:
            import contextlib
            import io
            with contextlib.redirect_stderr(io.StringIO()):   # its [skip] lines come later, once
                docs = documents.load_folder(args)
        check_filters(docs, args.source, args.tag)
    if args.rerank not in (None, "auto") and not embeddings.model_folder(args.rerank):
        if embeddings.looks_like_folder(args.rerank):
            raise FileNotFoundError(f"model folder not found: {args.rerank} (give a folder holding "
                                    f"config.json)")
        raise RuntimeError(f"no local copy of the reranker {args.rerank}: {GET_RERANKER}")


def reranker_for(value: str, without: str = "--rerank auto: going on without reranking"):
    """The reranker --rerank asks for; with auto, None (and one line) when none can be had."""
    if value != "auto":
        return load_reranker(value)
    try:
        return load_reranker(RERANKER)
    except (RuntimeError, OSError) as exc:
        why = str(exc).split(" (or --rerank auto")[0]
        print(f"[info] {without} ({why})", file=sys.stderr)
        return None


def allowed_rows(chunks: list[dict], source: str | None, tag: str | None):
    """Indices of the chunks the filters keep, or None without filters."""
    if source is None and tag is None:
        return None
    check_filters(chunks, source, tag)
    rows = [i for i, c in enumerate(chunks) if in_filters(c, source, tag)]
    print(f"searching {len(rows)} of {len(chunks)} chunks (" + " ".join(
        f"--{f} {v}" for f, v in (("source", source), ("tag", tag)) if v is not None) + ")")
    return np.array(rows)


def settings(args, chunks: list[dict]) -> dict:
    """make_retriever's settings from the flags: hybrid, reranker, context and the rows the
    filters allow (None: all)."""
    return {"hybrid": hybrid_setting(args.hybrid) if args.hybrid is not None else None,
            "reranker": reranker_for(args.rerank) if args.rerank else None,
            "context": args.context, "allowed": allowed_rows(chunks, args.source, args.tag)}


def print_compare(eval_set, chunks, index, embedder, k: int, chosen: dict, context_vectors=None) -> None:
    """--compare: plain, hybrid, rerank and context side by side on eval_set, with intervals."""
    reranker = chosen["reranker"] or reranker_for("auto", "--compare: no rerank rows without a reranker")
    print(f"\n== Retrieval variants side by side ({plural(len(eval_set), 'question')}, k={k}, "
          f"backend={embedder.backend}) ==")
    plain = index if context_vectors is None else None   # --docs embedded titles: made anew
    rows = compare_variants(eval_set, chunks, plain, embedder, k,
                            chosen["hybrid"] if chosen["hybrid"] is not None else "rrf", reranker,
                            chosen["allowed"], context_vectors)
    print_comparison(rows, k)
