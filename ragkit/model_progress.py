"""
ragkit/model_progress.py: a local model's own progress, shown while it works, and its own
timings as true rates. llama.cpp's server (inside xllamacpp) says how far it has read the
prompt when a streamed request asks for it (PROGRESS); its last chunk carries `timings`.

    request = chat_request(prompt, system, max_tokens) | STREAMED | PROGRESS
    for chunk in shown(llama_chunks(server, request), writing=True):   # the same chunks
        ...
    # stderr, while it reads:  reading the prompt:  49% 2048/4157 [00:47<00:49, 43.14 tokens/s]
    # then, while it writes:   writing: 12 tokens [00:02,  6.02 tokens/s]
    # and at the end:          [local] read 4,157 prompt tokens in 101.7 s (40.9 tokens/s),
    #                          wrote 40 tokens in 6.1 s (6.4 tokens/s)

llama.cpp sends a prompt_progress event after each batch it reads (params.n_batch tokens,
2,048 unless set), so on a slow machine the count may wait a minute; the bar's clock still
moves, within 2 s and then at least every 5 s (progress.Progress). A server that sends no
prompt_progress (an older llama.cpp) shows the clock alone until the first token. A rate is
tokens over the time spent on them, from llama.cpp's timings: never the tokens written over
the whole wait, prompt included (83 tokens after 5 minutes of reading is not "0 tokens/s").
"""

import itertools
import sys

from ragkit.progress import Progress
from ragkit.text import plural

PROGRESS = {"return_progress": True}   # ask llama.cpp's server for prompt_progress events


def shown(chunks, writing: bool = True):
    """Yield llama.cpp's stream chunks unchanged while a bar on stderr shows the prompt being
    read, then (writing=True) the tokens being written, then llama.cpp's timings as one line.
    writing=False is for --stream, where the answer itself is printed as it comes: the bar ends
    before the first piece of text and no line follows, so nothing lands inside the answer's
    line (print_stream's own line gives the writing rate after it)."""
    chunks = iter(chunks)
    first = yield from reading(chunks)
    if first is None:                          # the stream ended before a word
        return
    if not writing:
        yield from written(first, chunks, None)
        return
    with Progress("writing", None, " tokens") as bar:
        timings = yield from written(first, chunks, bar)
    if timings:
        print(timing_line(timings), file=sys.stderr, flush=True)


def reading(chunks):
    """Yield the chunks before the first one with text (or timings), the bar counting llama.cpp's
    prompt_progress ({total, cache, processed, time_ms}); return that chunk, unyielded, or None."""
    with Progress("reading the prompt", None, " tokens") as bar:
        for chunk in chunks:
            read = chunk.get("prompt_progress") if isinstance(chunk, dict) else None
            if isinstance(read, dict) and counts(read, "total", "processed"):
                cached = read["cache"] if counts(read, "cache") else 0
                bar.at(read["processed"], read["total"], f"{cached:,} from the cache" if cached else None)
            if text_of(chunk) or timings_of(chunk):
                return chunk               # the prompt is read: the bar is cleared before it shows
            yield chunk
    return None


def written(first, chunks, bar):
    """Yield `first`, then the rest of `chunks`, counting those that hold text on `bar` (None:
    nothing counted); return llama.cpp's timings if a chunk carried them."""
    timings = None
    for chunk in itertools.chain([first], chunks):
        timings = timings_of(chunk) or timings
        if bar is not None and text_of(chunk):
            bar.update(1)              # llama.cpp streams a chunk a token (a split character waits)
        yield chunk
    return timings


def counts(values: dict, *keys) -> bool:
    """Are these keys whole numbers of tokens (not a bool, not negative)?"""
    return all(isinstance(values.get(k), int) and not isinstance(values.get(k), bool)
               and values[k] >= 0 for k in keys)


def number(x) -> bool:
    """A real number (an int or a float, not a bool): what a figure must be to be shown."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def text_of(chunk) -> str:
    """The text a chat-completions stream chunk holds, or "" (a role, a progress event, usage)."""
    try:
        text = chunk["choices"][0]["delta"].get("content")
    except (KeyError, IndexError, TypeError, AttributeError):
        return ""
    return text if isinstance(text, str) else ""


def timings_of(chunk) -> dict | None:
    """llama.cpp's timings, if this chunk (the last, or a whole reply) carries them."""
    timings = chunk.get("timings") if isinstance(chunk, dict) else None
    return timings if isinstance(timings, dict) else None


def rate(tokens, milliseconds, per_second=None) -> str:
    """Tokens per second over the time spent on them: llama.cpp's own figure (`per_second`) when
    it gave one, else tokens / time: rate(40, 6065.5) -> "6.6 tokens/s"; "n/a" when there is
    nothing to divide (no tokens, no time, a figure that is not a number)."""
    if not (number(per_second) and 0 < per_second < float("inf")):
        if not (number(tokens) and number(milliseconds)) or tokens <= 0 or not milliseconds > 0:
            return "n/a"
        per_second = tokens / (milliseconds / 1000)
    return f"{per_second:.1f} tokens/s" if per_second < 100 else f"{per_second:,.0f} tokens/s"


def timing_line(timings: dict) -> str:
    """llama.cpp's timings as one line for stderr: "  [local] read 4,157 prompt tokens in 101.7 s
    (40.9 tokens/s), wrote 40 tokens in 6.1 s (6.4 tokens/s)"; prompt tokens reused from the
    cache are named; a figure llama.cpp did not give is "n/a". Its writing rate leaves out the
    first token, which came with the prompt's reading (39 tokens in those 6.1 s)."""
    def spent(kind: str, noun: str) -> str:
        n, ms = timings.get(f"{kind}_n"), timings.get(f"{kind}_ms")
        if not counts(timings, f"{kind}_n"):
            return f"{noun}s: n/a"
        took = f" in {ms / 1000:.1f} s" if number(ms) and ms >= 0 else ""
        return f"{plural(n, noun)}{took} ({rate(n, ms, timings.get(f'{kind}_per_second'))})"
    cached = timings.get("cache_n") if counts(timings, "cache_n") else 0
    reused = f" and {cached:,} from the cache" if cached else ""
    return f"  [local] read {spent('prompt', 'prompt token')}{reused}, wrote {spent('predicted', 'token')}"
