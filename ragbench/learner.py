"""
ragbench/learner.py: what a learner waits for, measured on their (busy) laptop.

    python -m ragbench.learner                  # every part: demo start-up, re-indexing, building
    python -m ragbench.learner --part demo      # MiniLM demo beside a busy process, 1 vs 2 threads
    python -m ragbench.learner --part update    # one file edited in 2,000: update vs full rebuild
    python -m ragbench.learner --part update --files 200
    python -m ragbench.learner --part build     # a --docs index: 1 thread vs all, reuse, update
    python -m ragbench.learner --part build --abstracts 300
    python -m ragbench.learner --part question  # a question on a saved index: CPU and wall seconds
    python -m ragbench.learner --part stream    # streamed SmolLM2 answers: first token, tokens/s
    python -m ragbench.learner --part stream --long     # and a long --docs prompt, k=8
    python -m ragbench.learner --part answer    # Qwen and SmolLM2 answering development questions
    python -m ragbench.learner --part session   # --interactive: a first and a next question, and
                                                # the prompt's rate against a direct llama.cpp call
    python -m ragbench.learner --part exits --repeats 20 --model smollm2   # streams end cleanly

Each build and stream row is a fresh process (`openai`: a fresh `rageval.generation --serve`);
"busy" is one other process spinning on one core, as a browser or an IDE would. Figures come
from this machine, now: compare the ratios, not the seconds, across machines. docs/benchmarks.md
shows a run of every part.
"""

import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ragkit import support
from ragkit.support import plural

ROOT = Path(__file__).resolve().parent.parent
GOAL_S = 2.5                    # the demo may add this much to the bare import, beside a busy process
QUESTION_CPU_S = 5              # a question on a saved index may spend this much CPU, idle
CORES = os.cpu_count() or 1
# rag_from_scratch.py in a fresh process: its torch threads pinned to {threads} (0: the lesson's
# own choice), its peak memory printed on stderr at the end (ru_maxrss: bytes on macOS, kB else).
RUN_LESSON = """import runpy, sys
if {threads}:
    import torch
    set_threads = torch.set_num_threads
    torch.set_num_threads = lambda n: set_threads({threads})
try:
    runpy.run_path("rag_from_scratch.py", run_name="__main__")
finally:
    if sys.platform != "win32":
        import resource
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print("peak memory:", peak * (1 if sys.platform == "darwin" else 1024), file=sys.stderr)"""
# One streamed answer in a fresh process, as --stream gets it: [prompt, system prompt] on stdin,
# the server's URL ("": llama.cpp in this process), threads and max tokens in argv. It prints
# seconds to the first token, tokens/s after it and the prompt's tokens (llama.cpp's count).
RUN_STREAM = """import json, sys, time
from ragkit import generators, llama
prompt, system = json.load(sys.stdin)
url, threads, max_tokens, model = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
llm = (generators.openai_generator(url, "local", max_tokens=max_tokens, timeout=600, stream=True)
       if url else generators.local_generator(model, threads, max_tokens, stream=True))
start, stamps, usage = time.perf_counter(), [], {}
for chunk in llm.chunks(prompt, system):     # the stream's chunks: text as it comes, usage at the end
    if llama.text_of(chunk):
        stamps.append(time.perf_counter())
    usage = chunk.get("usage") or usage
tokens = usage["completion_tokens"]
print(stamps[0] - start, (tokens - 1) / max(stamps[-1] - stamps[0], 1e-9), usage["prompt_tokens"],
      stamps[-1] - start)"""
# A direct llama.cpp call, no kit code: the same prompt, model, threads, context and batch as the
# kit's, in a fresh process. [prompt, system, model path, threads, n_ctx, max tokens] on stdin;
# llama.cpp's timings on stdout.
RUN_DIRECT = """import json, os, sys, xllamacpp
from ragkit.llama import N_BATCH            # the kit's batch: a constant, no kit code runs
prompt, system, path, threads, n_ctx, max_tokens = json.load(sys.stdin)
params = xllamacpp.CommonParams()
params.model.path, params.n_ctx, params.n_parallel, params.n_batch = path, n_ctx, 1, N_BATCH
params.cpuparams.n_threads = params.cpuparams_batch.n_threads = threads
params.use_jinja, params.verbosity, params.warmup, params.cache_ram_mib = True, -1, False, 0
server = xllamacpp.Server(params)        # never freed: freeing one can hang (ragkit/llama.py)
reply = server.handle_chat_completions({"temperature": 0.0, "seed": 0,
    "max_tokens": max_tokens, "messages": [{"role": "system", "content": system},
                                           {"role": "user", "content": prompt}]})
print(json.dumps(reply["timings"]), flush=True)
os._exit(0)"""
KIT_RATE = re.compile(r"\[local\] read ([\d,]+) prompt tokens in [\d.]+ s \(([\d,.]+) tokens/s\)")
LONG_PROMPT = ["--docs", "data/devsets/mkdocs/docs", "--question", "how do i install mkdocs", "--k", "8"]


def core(*flags, threads: int = 0) -> list[str]:
    """The command that runs the lesson with these flags (see RUN_LESSON)."""
    return [sys.executable, "-c", RUN_LESSON.format(threads=threads), *flags]


@contextlib.contextmanager
def busy(on: bool = True):
    """While the block runs, one process spinning on one core, as a browser or an IDE would."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if on else None
    try:
        yield
    finally:
        if spinner:
            spinner.kill()


def timed(args: list[str], repeats: int = 1) -> tuple[float, str, float | None]:
    """Median wall seconds of a command over `repeats` runs, its stdout (the same every run)
    and its peak memory in MB (None if it does not say)."""
    times = []
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    for _ in range(repeats):
        t0 = time.perf_counter()
        run = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=env, timeout=3600)
        times.append(time.perf_counter() - t0)
        if run.returncode != 0:
            raise RuntimeError(f"a benchmark run failed: {run.stderr.strip()[-200:]}")
    peak = re.search(r"peak memory: (\d+)", run.stderr)
    return statistics.median(times), run.stdout, int(peak[1]) / 1e6 if peak else None


def bench_demo(repeats: int = 3) -> None:
    """Bare import, then the MiniLM demo with torch's own threads and with one, beside a busy process."""
    print(f"loading: each command {repeats} times beside one busy process ...", file=sys.stderr)
    with busy():
        bare, _, _ = timed([sys.executable, "-c", "import sentence_transformers"], repeats)
        ours, out_ours, _ = timed(core("--backend", "minilm"), repeats)
        one, out_one, _ = timed(core("--backend", "minilm", threads=1), repeats)
    print("== The MiniLM demo beside one busy process (median wall seconds) ==")
    print(f"  import sentence_transformers    {bare:6.2f}")
    print(f"  demo, torch's threads ({CORES})       {ours:6.2f}   adds {ours - bare:.2f} "
          f"s to the import (goal <= {GOAL_S})")
    print(f"  demo, one torch thread          {one:6.2f}")
    print(f"  same figures with {CORES} and 1 threads: {'yes' if out_ours == out_one else 'NO'}")


def cpu_and_wall(args: list[str]) -> tuple[float, float, str]:
    """(CPU seconds, wall seconds, stdout) of one command in a fresh process."""
    import resource
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    run = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=3600,
                         env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if run.returncode != 0:
        raise RuntimeError(f"a benchmark run failed: {run.stderr.strip()[-200:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return cpu, wall, run.stdout


def bench_question(repeats: int = 3) -> None:
    """A question on a saved MiniLM index of the MkDocs pages, each run a fresh process on an
    idle machine: CPU and wall seconds, with no answer and with the extractive one."""
    work = Path(tempfile.mkdtemp(prefix="rag-bench-"))
    try:
        index = ["--docs", "data/devsets/mkdocs/docs", "--backend", "minilm", "--index", str(work / "index")]
        print("building the saved index ...", file=sys.stderr, flush=True)
        build_cpu, build_wall, _ = cpu_and_wall([sys.executable, "rag_from_scratch.py", *index])
        print(f"== A question on a saved MiniLM index (the MkDocs pages): median of {repeats} fresh "
              f"processes, idle ==")
        print(f"  build (not a question)          CPU {build_cpu:6.2f} s   wall {build_wall:6.2f} s")
        ask = [sys.executable, "rag_from_scratch.py", *index, "--question", "how do i install mkdocs"]
        for label, flags in (("question, passages only", []),
                             ("question + extractive answer", ["--generator", "extractive"])):
            runs = [cpu_and_wall(ask + flags) for _ in range(repeats)]
            if "loaded the saved index" not in runs[0][2]:
                raise RuntimeError("the question did not use the saved index")
            cpu = statistics.median(r[0] for r in runs)
            wall = statistics.median(r[1] for r in runs)
            print(f"  {label:<30}  CPU {cpu:6.2f} s   wall {wall:6.2f} s   (goal: CPU <= {QUESTION_CPU_S} s)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def bench_build(abstracts: int = 1460) -> None:
    """A MiniLM --docs index of CISI's first abstracts (a file each), each run a fresh process:
    built with 1 thread and every core, idle and beside a busy process, reused, and updated
    after one file is edited: seconds, peak MB and the speed-up or what the lesson said."""
    from rageval.ir_collection import DEFAULT_COLLECTION, load_collection
    work = Path(tempfile.mkdtemp(prefix="rag-bench-"))
    steps = [(f"build, {load}, {plural(n, 'thread')}", load, n) for load in ("idle", "busy")
             for n in sorted({1, CORES})]
    one_thread = {}                           # seconds with 1 thread, per load: built first
    try:
        docs, index = work / "docs", work / "index"
        docs.mkdir()
        texts = [d["text"] for d in load_collection(DEFAULT_COLLECTION)["docs"][:abstracts]]
        for n, text in enumerate(texts):
            (docs / f"abstract{n:04d}.txt").write_text(text, encoding="utf-8")
        print(f"== A MiniLM --docs index of {len(texts):,} CISI abstracts, a file each: each run a "
              f"fresh process, {CORES} cores (wall seconds, peak memory) ==")
        args = ["--docs", str(docs), "--backend", "minilm", "--index", str(index)]
        for label, load, threads in steps + [("reuse, nothing changed", "idle", 0),
                                             ("update, one file edited", "idle", 0)]:
            print(f"{label} ...", file=sys.stderr, flush=True)
            if label.startswith("build"):
                shutil.rmtree(index, ignore_errors=True)
            if label.startswith("update"):
                edited = min(docs.iterdir())
                edited.write_text(edited.read_text(encoding="utf-8") + " Edited.", encoding="utf-8")
            with busy(load == "busy"):
                seconds, out, peak = timed(core(*args, threads=threads))
            if label.startswith("build"):
                one_thread.setdefault(load, seconds)
                note = f"{one_thread[load] / seconds:.2f}x the speed of 1 thread"
            else:
                note = "(" + said(out, "loaded the saved index", "updated the index").replace(
                    f" from {index}", "") + ")"
            print(f"  {label:<25} {seconds:7.2f} s {peak or 0:7,.0f} MB   {note}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("  (every run imports the libraries and loads the weights: the reuse is that cost)")


@contextlib.contextmanager
def serving(threads: int):
    """llama.cpp's OpenAI-compatible server (rageval.generation --serve) for the block: its URL."""
    command = [sys.executable, "-m", "rageval.generation", "--serve", "--local-model", "smollm2",
               "--threads", str(threads)]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        url = re.search(r" at (http://127\.0\.0\.1:\d+/v1) ", server.stdout.readline())
        if not url:
            raise RuntimeError("rageval.generation --serve did not say where it listens")
        yield url[1]
    finally:
        server.kill()                        # by its PID: the server waits for Ctrl-C
        server.wait()


def bench_stream(repeats: int, long: bool, max_tokens: int) -> None:
    """Median first-token seconds and tokens/s of a streamed answer, per generator, threads, load."""
    import itertools
    import json

    import rag_from_scratch as rag
    from ragkit import answering
    print(f"== A streamed SmolLM2 answer, {CORES} cores (median of {repeats}) ==")
    print("  generator  threads  load  first token (s)  tokens/s  prompt tokens")
    for flags in [["--question", rag.VACATION_Q, "--k", "3"]] + ([LONG_PROMPT] if long else []):
        _, shown = quiet(rag.main, ["--backend", "tfidf", *flags])   # the prompt the lesson builds
        prompt = shown.split("-- the prompt a model would read --\n")[1].split("\n\n(no answer")[0]
        system = answering.GROUNDED_SYSTEM_PROMPT
        for generator, threads, load in itertools.product(("local", "openai"), (1, 2),
                                                          ("idle", "busy")):
            print(f"{generator}, {plural(threads, 'thread')}, {load} ...", file=sys.stderr, flush=True)
            runs = []
            with busy(load == "busy"), (serving(threads) if generator == "openai"
                                        else contextlib.nullcontext("")) as url:
                for _ in range(repeats):
                    runs.append(streamed(prompt, system, url, threads, max_tokens, "smollm2"))
            first, rate, tokens, _ = (statistics.median(column) for column in zip(*runs))
            print(f"  {generator:<9} {threads:>8}  {load:<4} {first:16.2f} {rate:9.1f} "
                  f"{int(tokens):14}")


def streamed(prompt: str, system: str, url: str, threads: int, max_tokens: int, model: str) -> list:
    """[first token s, tokens/s after it, prompt tokens, whole answer s] of one streamed answer,
    in a fresh process (RUN_STREAM): llama.cpp in it, or the server at `url`."""
    import json
    run = subprocess.run([sys.executable, "-c", RUN_STREAM, url, str(threads), str(max_tokens), model],
                         cwd=ROOT, capture_output=True, input=json.dumps([prompt, system]), text=True,
                         timeout=1800)
    if run.returncode != 0:
        raise RuntimeError(f"a streamed answer failed: {run.stderr.strip()[-200:]}")
    return [float(x) for x in run.stdout.split()]


def bench_answer(questions: int, max_tokens: int, models=("qwen", "smollm2")) -> None:
    """What a learner waits for an answer to a development question: the --docs prompt of the
    first `questions` MkDocs questions (the kit's passages and grounded prompt), each model on
    1 and 2 threads, idle and beside a busy process; the median over the questions."""
    import itertools
    import json

    import rag_from_scratch as rag
    from ragkit import answering, llama
    from rageval.devsets import DEVSET
    items = [json.loads(line) for line in (DEVSET / "questions.jsonl").read_text().splitlines()][:questions]
    prompts = []
    for item in items:
        _, shown = quiet(rag.main, ["--docs", str(DEVSET / "docs"), "--question", item["question"]])
        prompts.append(shown.split("-- the prompt a model would read --\n")[1].split("\n\n(no answer")[0])
    print(f"== An answer to a development question (MkDocs, --docs defaults), {CORES} cores, "
          f"median of {len(prompts)} questions ==")
    print("  model    threads  load  first token (s)  answer (s)  tokens/s  prompt tokens")
    for model, threads, load in itertools.product(models, (1, 2), ("idle", "busy")):
        if threads > CORES:
            continue
        llama.model_file(model)         # not installed: one line, now
        print(f"{model}, {plural(threads, 'thread')}, {load} ...", file=sys.stderr, flush=True)
        with busy(load == "busy"):
            runs = [streamed(p, answering.GROUNDED_SYSTEM_PROMPT, "", threads, max_tokens, model)
                    for p in prompts]
        first, rate, tokens, whole = (statistics.median(column) for column in zip(*runs))
        print(f"  {model:<8} {threads:>7}  {load:<4} {first:16.1f} {whole:11.1f} {rate:9.1f} "
              f"{int(tokens):14}")


def session(index: list, questions: list[str], model: str, threads: int) -> dict:
    """One --interactive session in a fresh process, the questions piped in: seconds from the
    start to the end of the first answer, and of each next one; the prompts; llama.cpp's prompt
    tokens and rate as the kit printed them; the model's context. Timed on what it printed."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "rag_from_scratch.py", *index, "--generator", "local", "--show-prompt",
            "--local-model", model, "--threads", str(threads), "--interactive"]
    with tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=err, text=True, env=env)
        proc.stdin.write("".join(q + "\n" for q in questions))
        proc.stdin.close()
        lines = [(time.perf_counter(), line) for line in proc.stdout]
        if proc.wait() != 0:
            err.seek(0)
            raise RuntimeError(f"a session failed: {err.read().strip()[-300:]}")
        err.seek(0)
        printed_err = err.read()
    ends = [t for t, line in lines if line.startswith("== Your question")][1:] + [lines[-1][0]]
    text = "".join(line for _, line in lines)
    blocks = text.split("-- the prompt a model would read --\n")[1:]
    prompts = [block.split("\n\n== Step 7")[0] for block in blocks]
    rates = [(int(n.replace(",", "")), float(r.replace(",", ""))) for n, r in KIT_RATE.findall(printed_err)]
    context = int(re.search(r"context ([\d,]+) tokens", printed_err)[1].replace(",", ""))
    return {"first": ends[0] - start, "next": [b - a for a, b in zip(ends, ends[1:])],
            "prompts": prompts, "rates": rates, "context": context}


def direct_rate(prompt: str, model: str, threads: int, context: int) -> float:
    """Prompt tokens/s of a direct llama.cpp call (RUN_DIRECT) on the kit's prompt."""
    import json

    from ragkit import answering, llama
    stdin = json.dumps([prompt, answering.GROUNDED_SYSTEM_PROMPT, str(llama.model_file(model)[0]), threads,
                        context, 8])
    run = subprocess.run([sys.executable, "-c", RUN_DIRECT], cwd=ROOT, input=stdin, text=True,
                         capture_output=True, timeout=1800)
    if run.returncode != 0:
        raise RuntimeError(f"the direct llama.cpp call failed: {run.stderr.strip()[-200:]}")
    return json.loads(run.stdout)["prompt_per_second"]


def bench_session(questions: int, model: str, repeats: int) -> None:
    """--interactive on the MkDocs pages (a saved index): the first answer of a
    fresh session, the next ones, and the kit's prompt rate against a direct llama.cpp call on
    the same prompts, threads and batch, in the same run; idle and beside a busy process."""
    import json

    from rageval.devsets import DEVSET
    asked = [json.loads(line)["question"] for line in (DEVSET / "questions.jsonl").read_text().splitlines()]
    work = Path(tempfile.mkdtemp(prefix="rag-bench-"))
    try:
        index = ["--docs", str(DEVSET / "docs"), "--backend", "minilm", "--index", str(work / "index")]
        print("building the saved index ...", file=sys.stderr, flush=True)
        cpu_and_wall([sys.executable, "rag_from_scratch.py", *index])
        print(f"== --interactive, {model} on {plural(CORES, 'thread')}: "
              f"{plural(questions, 'MkDocs question')} "
              f"a session, {plural(repeats, 'session')} (medians; prompt rates in tokens/s) ==")
        print("  load  first answer (s)  next answer (s)  prompt tokens  kit's rate  direct rate")
        for load in ("idle", "busy"):
            print(f"{load} ...", file=sys.stderr, flush=True)
            with busy(load == "busy"):
                runs = [session(index, asked[r * questions:(r + 1) * questions], model, CORES)
                        for r in range(repeats)]
                direct = [direct_rate(p, model, CORES, run["context"])
                          for run in runs for p in run["prompts"]]
            later = [t for run in runs for t in run["next"]] or [float("nan")]
            rates = [r for run in runs for r in run["rates"]]
            print(f"  {load:<4} {statistics.median(r['first'] for r in runs):17.1f} "
                  f"{statistics.median(later):16.1f} {statistics.median(n for n, _ in rates):14.0f} "
                  f"{statistics.median(r for _, r in rates):11.1f} {statistics.median(direct):12.1f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def write_notes(folder: Path, n: int) -> None:
    """n short Markdown notes, each a different made-up ticket."""
    for i in range(n):
        (folder / f"note{i:04d}.md").write_text(
            f"# Ticket {i}\n\nCustomer {i % 97} reported that report {i} failed on server "
            f"{i % 13} after the nightly job; the fix was to restart worker {i % 7} and "
            f"re-run the export for region {i % 5}. Follow-up owner: team {i % 11}.\n",
            encoding="utf-8")


def said(printed: str, *phrases: str) -> str:
    """What the lesson printed from the first of `phrases` it finds to the end of that line ("?"
    if none): "2 files -> 2 chunks: loaded the saved index ..." -> "loaded the saved index ..."."""
    return next((line[line.index(p):].strip() for line in printed.splitlines() for p in phrases
                 if p in line), "?")


def bench_update(files: int = 2000) -> None:
    """Full MiniLM build of a saved index, then one file edited: the incremental update."""
    import rag_from_scratch as rag
    work = Path(tempfile.mkdtemp(prefix="rag-bench-"))
    try:
        notes, index = work / "notes", work / "index"
        notes.mkdir()
        write_notes(notes, files)
        args = ["--docs", str(notes), "--backend", "minilm", "--index", str(index)]
        print(f"building a MiniLM index of {files:,} files, twice ...", file=sys.stderr)
        quiet(rag.main, args)               # warms the disk cache and the imports
        shutil.rmtree(index)
        full, _ = quiet(rag.main, args)
        (notes / "note0007.md").write_text("# Ticket 7\n\nClosed: a duplicate of ticket 8.\n")
        update, printed = quiet(rag.main, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"== One file edited in {files:,}: MiniLM index update (wall seconds) ==")
    print(f"  full rebuild   {full:7.2f}")
    print(f"  update         {update:7.2f}   {full / update:.1f}x faster "
          f"({said(printed, 'updated the index')})")
    print("  (in one process: the libraries are imported once, each run loads the weights)")


def quiet(fn, *args) -> tuple[float, str]:
    """Run fn(*args); return its wall seconds and what it printed, instead of printing it."""
    import io
    buffer, start = io.StringIO(), time.perf_counter()
    with contextlib.redirect_stdout(buffer):
        status = fn(*args)
    if status == 130:                        # Ctrl-C inside the run: the same for the benchmark
        raise KeyboardInterrupt
    if status != 0:
        raise RuntimeError("the indexing run failed")
    return time.perf_counter() - start, buffer.getvalue()


# == Streams that end cleanly ================================================================
def stream_and_press(argv: list, at: str | None) -> tuple[int, str]:
    """Run `python argv` as a terminal would; at the first line holding `at` (None: never), press
    Ctrl-C. (exit status, everything it printed)."""
    import signal
    proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    for line in proc.stdout:               # synchronised on what the child printed, not a sleep
        seen.append(line)
        if at is not None and at in line:
            proc.send_signal(signal.SIGINT)
            at = None
    return proc.wait(timeout=600), "".join(seen)


def bench_exits(repeats: int, model: str) -> None:
    """`--docs MkDocs --generator local --stream` run `repeats` times to its end, then `repeats`
    times with Ctrl-C pressed once the answer starts: how many end as they should (exit 0; exit
    130 with the one line "interrupted"), and never with an abort, a crash or a traceback."""
    ask = ["rag_from_scratch.py", "--docs", str(ROOT / "data" / "devsets" / "mkdocs" / "docs"),
           "--question", "how do i install mkdocs", "--generator", "local", "--local-model", model,
           "--stream", "--threads", "1"]
    bad = lambda out: any(s in out for s in ("Traceback", "FATAL", "Segmentation", "Aborted"))
    ended = sum(code == 0 and not bad(out) for code, out in (stream_and_press(ask, None)
                                                             for _ in range(repeats)))
    pressed = [stream_and_press(ask, "== Step 7: the answer") for _ in range(repeats)]
    stopped = sum(code == 130 and out.rstrip().endswith("interrupted") and not bad(out)
                  for code, out in pressed)
    print(f"== Streams that end cleanly ({model}, 1 thread, --docs MkDocs) ==\n"
          f"  ran to the end: {ended} of {repeats} exited 0\n"
          f"  Ctrl-C once the answer started: {stopped} of {repeats} exited 130 with one line")


def parse_args(argv=None):
    """Which part to run, and how big."""
    from ragkit.generators import MAX_TOKENS, MAX_TOKENS_LIMIT
    p = support.OneLineParser(description="What a learner waits for: demo start-up, index "
                                          "updates and builds, questions, streamed answers.")
    p.add_argument("--part", default="all",
                   choices=["demo", "update", "build", "question", "stream", "answer", "session", "exits",
                            "all"])
    p.add_argument("--model", default="smollm2", choices=["qwen", "smollm2"],
                   help="exits and session parts: the local model (default: %(default)s)")
    p.add_argument("--questions", type=support.bounded(int, 1, 46), default=3,
                   help="answer and session parts: MkDocs questions to time (median; default: "
                        "%(default)s)")
    whole = lambda low, high: support.bounded(int, low, high)       # every one has a range
    p.add_argument("--files", type=whole(2, 100_000), default=2000, help="notes in the update benchmark")
    p.add_argument("--repeats", type=whole(1, 1000), default=3, help="runs per demo or stream row (median)")
    p.add_argument("--abstracts", type=whole(1, 1460), default=1460,
                   help="CISI abstracts in the build benchmark (it has 1,460)")
    p.add_argument("--long", action="store_true", help="stream part: also a long --docs prompt")
    p.add_argument("--max-tokens", type=whole(2, MAX_TOKENS_LIMIT), default=MAX_TOKENS,
                   help="stream part: answer length limit, 2 or more: tokens/s is timed after "
                        "the first (default: %(default)s)")
    return p.parse_args(argv)


def run(args) -> None:
    """Run the chosen parts; each prints its figures."""
    if args.part in ("demo", "all"):
        bench_demo(args.repeats)
    if args.part in ("update", "all"):
        bench_update(args.files)
    if args.part in ("build", "all"):
        bench_build(args.abstracts)
    if args.part in ("question", "all"):
        bench_question(args.repeats)
    if args.part in ("stream", "all"):
        bench_stream(args.repeats, args.long, args.max_tokens)
    if args.part in ("answer", "all"):
        bench_answer(args.questions, args.max_tokens)
    if args.part in ("session", "all"):
        bench_session(args.questions, args.model, args.repeats)
    if args.part in ("exits", "all"):
        bench_exits(args.repeats, args.model)


main = support.main_for(run, parse_args)     # bad input: one line on stderr, exit status 1


if __name__ == "__main__":
    support.leave(main())
