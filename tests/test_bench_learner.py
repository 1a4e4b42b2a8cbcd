"""bench_learner.py prints its figures (the speed goals live there, never in a timed test)."""
from test_generate import needs_local

import bench_learner


def test_the_update_benchmark_embeds_only_the_edited_file(capsys):
    assert bench_learner.main(["--part", "update", "--files", "20"]) == 0
    out = capsys.readouterr().out
    assert "== One file edited in 20: MiniLM index update (wall seconds) ==" in out
    assert "(updated the index: 1 file(s) changed or removed, 1 chunks embedded, 19 reused)" in out


def test_bad_numbers_are_one_line(capsys):
    assert bench_learner.main(["--files", "1"]) == 1
    assert capsys.readouterr().err == "error: --files must be at least 2, --repeats and --abstracts at least 1\n"


def test_the_build_benchmark_times_one_thread_against_every_core(capsys):
    import os
    import re
    assert bench_learner.main(["--part", "build", "--abstracts", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    cores = sorted({1, os.cpu_count()})
    assert out[0] == (f"== A MiniLM --docs index of 2 CISI abstracts, a file each: each run a "
                      f"fresh process, {os.cpu_count()} cores (wall seconds, peak memory) ==")
    steps = [line.split(" s ")[0].rsplit(None, 1)[0].strip() for line in out[1:-1]]
    assert steps == [f"build, {load}, {n} thread(s)" for load in ("idle", "busy") for n in cores] \
        + ["reuse, nothing changed", "update, one file edited"]
    assert all(" MB " in line for line in out[1:-1])
    assert all(line.endswith("x the speed of 1 thread") for line in out[1:1 + 2 * len(cores)])
    assert re.search(r"\(loaded the saved index \(\d+ chunks, not re-embedded\)\)$", out[-3])
    assert re.search(r"\(updated the index: 1 file\(s\) changed or removed, \d+ chunks embedded, "
                     r"\d+ reused\)$", out[-2])


@needs_local
def test_the_stream_benchmark_prints_first_token_and_tokens_per_second_for_every_setting(capsys):
    """local and openai (a real llama.cpp server), 1 and 2 threads, idle and busy: the rows are
    all there, their figures parse, and the prompt is the core's own (312 tokens, as --stream)."""
    import os
    assert bench_learner.main(["--part", "stream", "--repeats", "1", "--max-tokens", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [f"== A streamed SmolLM2 answer, {os.cpu_count()} cores (median of 1) ==",
                       "  generator  threads  load  first token (s)  tokens/s  prompt tokens"]
    rows = [line.split() for line in out[2:]]
    assert [row[:3] for row in rows] == [[generator, threads, load] for generator in ("local", "openai")
                                         for threads in ("1", "2") for load in ("idle", "busy")]
    assert all(float(row[3]) > 0 and float(row[4]) > 0 and row[5] == "312" for row in rows)
