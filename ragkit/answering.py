"""
ragkit/answering.py: the kit's answer to one question. It wraps the lesson's three steps from
above: its own retrieval, the grounded prompt (ragkit/grounded.py), any generator, then the
check of every quote, so what is shown as a source is in the passages.

    ask(question, retrieve, k, llm)      # prints the chunks found, the prompt and the answer

retrieve is ragkit/retrieval.py's Retriever, llm a generator from ragkit/llm.py's make_generator:
its answer(prompt) reads the GroundedPrompt, whose passages travel beside its text.

The lesson's rag_answer (rag_from_scratch.py) is the same idea in three lines: search,
build_prompt, llm_fn. Here each step is the kit's richer one, and one more follows: the reply
is read for its quotes, each quote looked for in the passage it names, and only the quotes
found are shown, with the sources they come from.
"""

import sys

import rag_from_scratch as rag
from ragkit import grounded
from ragkit.text import plural, printable

# How strictly a quote is checked, and what an answer whose quotes all fail becomes: chosen on
# the development sets by leaving one project out (rageval/answer_tuning.py, docs/generation.md):
# with Qwen's replies every held-out project but one got the same choice. A quote must be in
# the passage it names; quotes and answer must speak to a fifth of the question's rare words;
# an answer with no quote left is replaced by the refusal.
STRICTNESS = "exact"
MIN_TOPIC = 0.2
UNCHECKED = "refuse"


def check_length(size: int, limit: int, where: str) -> None:
    """ValueError for a question of more than `limit` characters: a question, not a document,
    which must fit a small model's context beside the passages."""
    if size > limit:
        raise ValueError(f"{where} is {size:,} characters, more than the {limit:,} a question "
                         f"may be: ask a question, not a document")


def typed_questions(stream, limit: int):
    """Yield one question a line of `stream` (--interactive): typed at a prompt on a terminal,
    or piped from a file. Blank lines are skipped; a line over `limit` characters is one error
    line on stderr, then the next line is read (no line is held whole past the limit)."""
    typing = stream.isatty()
    if typing:
        print("ask a question, one a line (Ctrl-D to stop)", file=sys.stderr)
    number = 0
    while True:
        if typing:
            print("\nquestion> ", end="", file=sys.stderr, flush=True)
        line = stream.readline(limit + 1)
        if not line:
            return
        number += 1
        question, size = line.strip(), len(line.rstrip("\n"))
        while size > limit and line and not line.endswith("\n"):    # the rest of it, dropped
            line = stream.readline(limit + 1)
            size += len(line.rstrip("\n"))
        try:
            check_length(size, limit, f"line {number}")
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            continue
        if question:
            yield question


def name_of(chunk: dict) -> str:
    """A chunk as a result line names it: "notes.md > Setup  #2" or "HR-01#0   Annual leave"."""
    if chunk["title"].startswith(chunk["doc_id"]):          # a file's title names it already
        return f"{printable(chunk['title'], lines=False)}  #{chunk['chunk_id'].rsplit('#')[-1]}"
    return f"{printable(chunk['chunk_id'], lines=False):<9} {printable(chunk['title'], lines=False)}"


def print_found(found: list[dict], plain: bool) -> None:
    """One line a chunk, with the scores a learner can read: its cosine, its BM25 when BM25 was
    fused in, the cross-encoder's score when it reranked. plain (cosine alone): chunks at 0.000
    are counted, not listed (rag.matched)."""
    shown = rag.matched(found) if plain else found
    for r in shown:
        scores = f"cosine {r['cosine']:.3f}"
        if "bm25" in r:
            scores += f"  BM25 {r['bm25']:6.2f}"
        if "rerank" in r:
            scores += f"  cross-encoder {r['rerank']:6.2f}"
        print(f"  {scores}  {name_of(r)}")
    if len(shown) < len(found):
        print(f"  ({len(found) - len(shown)} more at cosine 0.000: they share no word with the "
              f"question, so their order means nothing)")


def passages_for(question: str, retrieve, k: int) -> tuple[list[dict], list[dict]]:
    """(what retrieve found, the passages a prompt gets): with cosine alone, a chunk at 0.000
    is no match (rag.matched) and stays out of the prompt, unless nothing else is found."""
    found = retrieve(question, k, report=True)          # a rerank's time, said on stderr
    if not retrieve.cosine_only:
        return found, found
    return found, rag.matched(found) or found


def checked_answer(reply: str, prompt: grounded.GroundedPrompt, strictness: str = STRICTNESS,
                   unchecked: str = UNCHECKED, min_topic: float = MIN_TOPIC) -> tuple[dict, str]:
    """(the check of a reply's quotes, the answer a user reads): ragkit/grounded.py's two steps."""
    checked = grounded.check_reply(reply, prompt, strictness, min_topic)
    return checked, grounded.shown_answer(checked, unchecked)


def ask_cited(question: str, retrieve, llm) -> dict:
    """The cited answer (ragkit/citations.py): the best sentences of the top passages numbered,
    the model cites them by number, the kit shows them whole; print each step."""
    from ragkit import citations
    found, passages = passages_for(question, retrieve, citations.PASSAGES)
    print(f"\n== Your question (k={len(found)}; {retrieve.ranking}) ==\nQ: {printable(question)}")
    print_found(found, plain=retrieve.cosine_only)
    cited = citations.cited_prompt(question, passages, keep=citations.BEST_SENTENCES)
    print("\n-- the prompt a model would read --\n" + printable(cited.text))
    print(f"\n== Step 7: the answer ({llm.name}) ==")
    result = citations.check(llm.answer(cited), cited)          # --stream: printed as written
    if llm.streams:
        print("-- checked against the passages --")
    print(printable(citations.shown(result)))
    sources = list(dict.fromkeys(source for _, source, _ in result["cited"]))
    if sources and not result["set_aside"] and not result["refused"]:
        print("sources: " + ", ".join(sources))
    for reason in result["set_aside"]:
        said = "the reply above" if llm.streams else "the model's answer"
        print(f"(checked: {said} is set aside: {reason})")
    return result


def ask(question: str, retrieve, k: int, llm=None, strictness: str = STRICTNESS,
        unchecked: str = UNCHECKED) -> dict | None:
    """Retrieve, prompt, answer, check: print each step. retrieve(question, k) -> chunks with
    "cosine" (ragkit/retrieval.py); llm: from ragkit/llm.py's make_generator, or None. Returns
    the checked reply (ragkit/grounded.py's check_reply), or None without a generator."""
    found, passages = passages_for(question, retrieve, k)
    print(f"\n== Your question (k={k}; {retrieve.ranking}) ==\nQ: {printable(question)}")
    print_found(found, plain=retrieve.cosine_only)
    prompt = grounded.grounded_prompt(question, passages)
    print("\n-- the prompt a model would read --\n" + printable(prompt.text))
    if llm is None:
        print("\n(no answer generated: add --generator extractive for an offline answer, "
              "--generator local for a model on this machine, or --generate for Amazon Bedrock, billed)")
        return None
    print(f"\n== Step 7: the answer ({llm.name}) ==")
    reply = llm.answer(prompt)                  # --stream: printed as written
    checked, answer = checked_answer(reply, prompt, strictness, unchecked)
    if llm.streams:
        print("-- checked against the passages --")
    print(answer)
    print_check(checked)
    return checked


def print_check(checked: dict) -> None:
    """The sources the answer stands on (only the quotes found), and what the check set aside."""
    sources = list(dict.fromkeys(source for _, _, source in checked["checked"]))
    if sources:
        print("sources: " + ", ".join(sources))
    failed = len(checked["failed"])
    if failed:
        print(f"(checked: {plural(failed, 'quote')} the model gave {'is' if failed == 1 else 'are'} "
              f"not in the passages {'it names' if failed == 1 else 'they name'}; not shown)")
    if checked["off_topic"]:
        print(f"(checked: its quotes speak to {checked['topic']:.0%} of the question's words, "
              f"weighed by rarity, under the {MIN_TOPIC:.0%} an answer needs; not shown)")
    if checked["stray_numbers"]:
        print(f"(checked: the answer states {', '.join(checked['stray_numbers'])}, which no quote "
              f"holds; not shown)")
    if not checked["found"] and not checked["refused"] and checked["answer"]:
        print("(checked: the model's answer quoted nothing found in the passages, so it is not "
              "shown; --stream shows a reply as it is written)")
