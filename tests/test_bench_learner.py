"""bench_learner.py prints its figures (the speed goals live there, never in a timed test)."""
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
    assert bench_learner.main(["--part", "build", "--abstracts", "40"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"== Encoding 40 abstracts at once (wall seconds, {os.cpu_count()} cores) =="
    rows = [line.split()[:2] for line in out[1:]]
    assert rows == [[load, f"{n}"] for load in ("idle", "busy") for n in sorted({1, os.cpu_count()})]
    assert all("x the speed of 1 thread" in line for line in out[1:])
