"""learner.py prints its figures (the speed goals live there, never in a timed test)."""
import pytest
from test_generate import needs_local

from ragbench import learner
from ragkit.support import plural


@pytest.mark.slow
def test_the_update_benchmark_embeds_only_the_edited_file(capsys):
    assert learner.main(["--part", "update", "--files", "20"]) == 0
    out = capsys.readouterr().out
    assert "== One file edited in 20: MiniLM index update (wall seconds) ==" in out
    assert "(updated the index: 1 file changed or removed, 1 chunk embedded, 19 reused)" in out


def test_bad_numbers_are_one_line(capsys):
    with pytest.raises(SystemExit) as stopped:                 # argparse's exit: status 2
        learner.main(["--files", "1"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err == "error: argument --files: 1 is not between 2 and 100,000 (see --help)\n"


@pytest.mark.slow
def test_the_build_benchmark_times_one_thread_against_every_core(capsys, minilm):
    import os
    import re

    from conftest import CISI

    from rageval.ir_collection import load_collection
    from ragkit import chunking
    assert learner.main(["--part", "build", "--abstracts", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    cores = sorted({1, os.cpu_count()})
    assert out[0] == (f"== A MiniLM --docs index of 2 CISI abstracts, a file each: each run a "
                      f"fresh process, {os.cpu_count()} cores (wall seconds, peak memory) ==")
    rows = [re.match(r"  (.+?) +([\d.]+) s +([\d,]+) MB   (.*)$", line) for line in out[1:-1]]
    assert [r[1] for r in rows] == [f"build, {load}, {plural(n, 'thread')}" for load in ("idle", "busy")
                                    for n in cores] + ["reuse, nothing changed", "update, one file edited"]
    assert all(float(r[2]) > 0 and int(r[3].replace(",", "")) > 100 for r in rows)   # MiniLM loaded
    # What the kit said, against the chunks of the same two abstracts made here
    texts = [d["text"] for d in load_collection(CISI)["docs"][:2]]
    fits = chunking.model_fits(minilm)
    chunked = lambda first: [c["text"] for c in chunking.document_chunks(
        [{"doc_id": f"abstract{n:04d}.txt", "text": t} for n, t in enumerate([first, texts[1]])],
        fits=fits)]
    before, after = chunked(texts[0]), chunked(texts[0] + " Edited.")
    new = sum(t not in before for t in after)
    assert rows[-2][4] == "(loaded the saved index (not re-embedded))"
    assert rows[-1][4] == (f"(updated the index: 1 file changed or removed, {plural(new, 'chunk')} embedded, "
                           f"{len(after) - new} reused)")


@pytest.mark.slow
@needs_local
def test_the_stream_benchmark_prints_first_token_and_tokens_per_second_for_every_setting(capsys):
    """local and openai (a real llama.cpp server), 1 and 2 threads, idle and busy: the rows are
    all there, their figures parse, and every row reads the same prompt, the one --stream sends."""
    import os
    assert learner.main(["--part", "stream", "--repeats", "1", "--max-tokens", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [f"== A streamed SmolLM2 answer, {os.cpu_count()} cores (median of 1) ==",
                       "  generator  threads  load  first token (s)  tokens/s  prompt tokens"]
    rows = [line.split() for line in out[2:]]
    assert [row[:3] for row in rows] == [[generator, threads, load] for generator in ("local", "openai")
                                         for threads in ("1", "2") for load in ("idle", "busy")]
    assert all(float(row[3]) > 0 and float(row[4]) > 0 for row in rows)
    assert len({row[5] for row in rows}) == 1 and int(rows[0][5]) > 300     # one prompt, as --stream


@pytest.mark.slow
@needs_local
def test_a_session_times_each_answer_and_the_kit_reads_the_prompt_at_the_direct_rate(tmp_path):
    """Two questions piped into one --interactive process (SmolLM2, a 2-note folder): the first
    answer's time includes the start, the next one's does not; both prompts are caught as printed,
    llama.cpp's rate as the kit printed it, and a direct llama.cpp call reads the same prompt."""
    (tmp_path / "leave.md").write_text("# Leave\n\nStaff get 24 days of paid leave a year.\n")
    (tmp_path / "vpn.md").write_text("# VPN\n\nAlways connect through the company VPN at home.\n")
    got = learner.session(["--docs", str(tmp_path), "--backend", "tfidf"],
                          ["How many days of leave?", "Do I need the VPN?"], "smollm2", 1)
    assert got["first"] > 0 and len(got["next"]) == 1 and got["next"][0] > 0
    assert [p.splitlines()[0] for p in got["prompts"]] == ["Question: How many days of leave?",
                                                           "Question: Do I need the VPN?"]
    assert len(got["rates"]) == 2 and all(n > 50 and r > 0 for n, r in got["rates"])
    assert got["context"] >= 2048
    assert learner.direct_rate(got["prompts"][0], "smollm2", 1, got["context"]) > 0
