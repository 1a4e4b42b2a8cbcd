"""
ragkit/eval_file.py: your own labelled questions (--eval FILE with --docs), read and checked.

    eval_set = load_eval_file("qa.jsonl", {c["doc_id"] for c in chunks})

One question a line: {"question": "...", "relevant": ["file", ...]}, and if you like the facts a
right answer states, "answer": ["regex", ...]. Retrieval is scored on the files; "answer in
context" on the facts: can the passages a prompt gets answer the question at all?
"""

import re
import sys

from ragkit.documents import file_of
from ragkit.json_lines import read_jsonl
from ragkit.text import plural, printable


def eval_item(item) -> dict | None:
    """One --eval record: {"question": "...", "relevant": ["file", ...]} (one file: a string),
    with "answer": ["regex", ...], the facts a right answer states, if it has them; None for
    {"question": "...", "answerable": false}, which retrieval cannot be scored on."""
    if isinstance(item, dict) and item.get("answerable") is False:
        return None
    relevant = item.get("relevant") if isinstance(item, dict) else None
    relevant = [relevant] if isinstance(relevant, str) else relevant
    facts = item.get("answer", []) if isinstance(item, dict) else []
    if not (isinstance(item, dict) and isinstance(item.get("question"), str)
            and item["question"].strip() and isinstance(relevant, list) and relevant
            and all(isinstance(r, str) and r for r in relevant)
            and isinstance(facts, list) and all(isinstance(f, str) and f for f in facts)):
        raise ValueError('expected {"question": "...", "relevant": ["file", ...]} (and, if you '
                         'like, "answer": ["regex", ...])')
    try:
        patterns = [re.compile(f, flags=re.I) for f in facts]
    except re.error as exc:
        raise ValueError(f'"answer" holds a bad regular expression: {exc}') from None
    return {"question": item["question"], "relevant": set(relevant), "answer": patterns}


def fact_text(text: str) -> str:
    """Text as a fact's pattern is matched against it: a code span's backticks dropped, so
    "a tool like `build`" states "tool like build"."""
    return text.replace("`", "")


def holds_every_fact(passages: list[dict], item: dict) -> bool:
    """Answer in context: every fact of the question is stated somewhere in these passages."""
    text = fact_text("\n".join(f"{p['title']}\n{p['text']}" for p in passages))
    return all(pattern.search(text) for pattern in item["answer"])


def print_answer_in_context(eval_set, found: list[list[dict]], k: int) -> None:
    """The share of questions with facts whose k passages (found[i]: question i's, as the
    retriever found them) hold every one: what any generator, however good, can answer from."""
    held = [holds_every_fact(passages, item) for item, passages in zip(eval_set, found) if item["answer"]]
    if not held:
        return
    print(f"answer in context: {sum(held) / len(held):.2f} (every fact of the answer in the k={k} "
          f"passages, for {sum(held)} of {len(held)} questions)")


def load_eval_file(path, doc_ids=None) -> list[dict]:
    """Labelled questions; with doc_ids, ids naming no indexed file (and questions left empty) go."""
    eval_set = [item for item in read_jsonl(path, eval_item, "evaluation file") if item]
    if not eval_set:
        raise ValueError(f"{path}: every question is marked unanswerable: retrieval needs some "
                         f"with the files that answer them")
    return eval_set if doc_ids is None else indexed_only(eval_set, doc_ids, path)


def indexed_only(eval_set: list[dict], doc_ids, path) -> list[dict]:
    """The questions of a loaded eval file, each with only the relevant ids that name an
    indexed file (a PDF's name: its pages); a question left with none goes, named on stderr."""
    pages = {}                                   # a PDF's name stands for every page of it
    for doc_id in doc_ids:
        pages.setdefault(file_of(doc_id), set()).add(doc_id)
    eval_set = [{**item, "relevant": {p for r in item["relevant"] for p in pages.get(r, {r})}}
                for item in eval_set]
    unknown = sorted({r for item in eval_set for r in item["relevant"]} - set(doc_ids))
    kept = [{**item, "relevant": item["relevant"] & set(doc_ids)} for item in eval_set
            if item["relevant"] & set(doc_ids)]
    if not kept:
        raise ValueError(f"{path}: no question names a file that was indexed (e.g. "
                         f"{', '.join(unknown[:3])}); relevant ids are paths inside --docs, "
                         f"like {min(doc_ids)!r}")
    if unknown:
        names = ", ".join(printable(u, lines=False) for u in unknown[:5])
        print(f"[warn] {printable(str(path), lines=False)}: {plural(len(unknown), 'relevant id')} "
              f"{'names' if len(unknown) == 1 else 'name'} no indexed file and "
              f"{'is' if len(unknown) == 1 else 'are'} left out ({names}"
              f"{' ...' if len(unknown) > 5 else ''}); {len(eval_set) - len(kept)} of "
              f"{len(eval_set)} questions dropped", file=sys.stderr)
    return kept
