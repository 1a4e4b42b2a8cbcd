"""ragkit/support.py: what every other module of the kit shares, and nothing of RAG: the bottom
layer. Each section answers one question a reader may have about how the kit behaves.

  text          printable(text), one_line(exc), split_sentences(text), plural(2, "file")
  children      a fresh Python, with memory and CPU limits, for work that may crash or loop
  deadlines     every network wait ends: with_deadline(call, seconds, what)
  exits         one line on stderr and exit status 1 for an error, 130 for Ctrl-C: run_cli(work)
  progress      a bar on stderr within 2 s and every 5 s after, piped or not: Progress(...)
  JSON          parse_json(text), read_jsonl(path, parse, what): bounded, one line per bad line
  storage       mark first, refuse what is not ours, save whole or not at all:
                    with folder_lock(claim_folder("my_index", "--index")):
                        write_atomic(Path("my_index") / "chunks.json", b"[]")

It imports nothing from the kit, so every other module may import it.
"""

import argparse
import contextlib
import errno
import glob
import hashlib
import os
import re
import signal
import stat
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path


# == Text: printing it safely, cutting it into sentences ===========================================
# text the kit prints, and text it cuts into sentences; the bottom layer.
#
#   printable(text)         safe to print: control characters written out, so a file, a page or
#                           a model's reply cannot drive the terminal
#   one_line(exc)           an exception's message as one printable line (every error the kit shows)
#   split_sentences(text)   "Install it. Then run it." -> ["Install it.", "Then run it."]
#   sentence_ends(text)     where those breaks are, for a reader that cuts a text in place
#   plural(n, "file")       "1 file", "2 files"
#   in_prose(text, fn)      fn applied to the text outside code, so `pkg[extra]` and a TOML
#                           [table] are never read as citations or changed
#


# Written out, never printed raw: control characters (an escape sequence drives the terminal),
# a carriage return ("24 days.\r99 days" shows as "99 days"), bidirectional controls (U+202E
# shows "exe.txt" for "txt.exe"), zero-width characters (two names that look the same) and
# the stand-ins Python uses for the bytes of a file name that is not UTF-8.
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\r\x0e-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e"
                     r"\u2060-\u2064\u2066-\u2069\ufeff\ud800-\udfff]")     # not \t or \n
CONTROL_OR_BREAK = re.compile(CONTROL.pattern[:-1] + r"\t\n]")


def printable(text: str, lines: bool = True) -> str:
    """Text safe to print: control, bidirectional and zero-width characters written out
    (\\x1b, \\u202e), a Windows line end read as a line end; lines=False also writes out line
    breaks, so a name cannot forge a printed line."""
    pattern = CONTROL if lines else CONTROL_OR_BREAK
    return pattern.sub(lambda m: escape(m.group(0)), text.replace("\r\n", "\n"))


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (some libraries put newlines in theirs), safe to
    print: it may quote a path or a reply with control or bidirectional characters in it."""
    return printable(" ".join(str(exc).split()), lines=False) or type(exc).__name__


def escape(char: str) -> str:
    """One character as Python writes it in a string: "\\r", "\\x1b", "\\u202e". Written
    out by hand, not with the unicode_escape codec: a codec is imported on first use, and
    the lab grader's child may no longer be allowed to read Python's files by then."""
    n = ord(char)
    return {9: "\\t", 10: "\\n", 13: "\\r"}.get(n) or (f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}")


ABBREVIATIONS = {"e.g.", "i.e.", "etc.", "vs.", "cf.", "approx.", "incl.", "no.", "nos.", "fig.",
                 "eq.", "vol.", "ch.", "sec.", "mr.", "mrs.", "ms.", "dr.", "prof.", "st.", "jr.",
                 "al.", "ca."}


def sentence_ends(text: str) -> list[tuple[int, int]]:
    """(end of a sentence, start of the next) for each break in `text`: after '.', '!' or '?'
    and a space, but not after an abbreviation ("e.g.") or an initial ("J. Smith"), and never
    inside a dotted name ("id.kestrelwood.example": no space follows its dots). The one
    sentence splitter of the kit: chunks, the extractive answer and the reply guard use it."""
    ends = []
    for space in re.finditer(r"(?<=[.!?])\s+", text):
        # the word before the break, read from a short window: linear in a long text (a word
        # of over 64 characters is no abbreviation, whichever part of it is read)
        last = text[max(0, space.start() - 64):space.start()].rsplit(None, 1)[-1].lstrip("([\"'").lower()
        if last not in ABBREVIATIONS and not re.fullmatch(r"[a-z]\.", last):
            ends.append((space.start(), space.end()))
    return ends


def split_sentences(text: str) -> list[str]:
    """The sentences of a text: split_sentences("Use a tool, e.g. pip. Done.") ->
    ["Use a tool, e.g. pip.", "Done."]."""
    text, starts, sentences = text.strip(), [0], []
    for end, start in sentence_ends(text):
        sentences.append(text[starts[-1]:end])
        starts.append(start)
    return [s for s in sentences + [text[starts[-1]:]] if s]


def closed(pieces) -> None:
    """Close a stream of pieces that can be closed (a generator), so the model behind it stops
    now, in the reader's own flow: left to Python's clean-up instead, a Ctrl-C pressed meanwhile
    would be printed as an ignored exception, and the run would go on."""
    if hasattr(pieces, "close"):
        pieces.close()


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """A count and its noun: plural(1, "file") -> "1 file", plural(3, "file") -> "3 files"."""
    return f"{n:,} {noun if n == 1 else nouns or noun + 's'}"


RATE_AT_LEAST = (3, 0.5)   # pieces and seconds: over less, a rate says nothing ("1,000,000 tokens/s")


def rate(count: int, seconds: float, noun: str = "tokens") -> str:
    """" (6.6 tokens/s)" for a span long enough to mean something (RATE_AT_LEAST pieces and
    seconds), else "": rate(40, 6.07) -> " (6.6 tokens/s)"; rate(1, 0.0) -> ""."""
    pieces, span = RATE_AT_LEAST
    if count < pieces or seconds < span:
        return ""
    return f" ({count / seconds:,.1f} {noun}/s)"


CODE = re.compile(r"```.*?(?:```|\Z)|`[^`\n]*`", flags=re.S)    # a fenced block or a `span`


def in_prose(text: str, fn) -> str:
    """text with fn(piece) in place of each piece outside code (fenced blocks, `spans`):
    in_prose("a [b] `c[d]`", str.upper) -> "A [B] `c[d]`"."""
    out, last = [], 0
    for code in CODE.finditer(text):
        out += [fn(text[last:code.start()]), code.group(0)]
        last = code.end()
    return "".join(out + [fn(text[last:])])


# == Child processes: limits, and a fresh Python for work that may crash ===========================
# a library that may crash or spin (PDFium on a hostile PDF, llama.cpp on a
# model file of your own), run in a child process within bounds of CPU time and memory, so that
# its crash or its endless loop is one line here, never the end of this process. A child ends
# with this process, whatever signal ends it (end_with_parent).
#
#   forked                target(*args) in a forked child process
#   new_python            module.function(*args) in a new interpreter
#   end_with_parent       in the child: killed when its parent ends (Linux)
#   limit_child           in the child: CPU seconds, address space, no core file, Ctrl-C ignored
#   address_space_limit   a child's memory limit: what it uses now plus a margin (Linux)
#   soft_limit            one resource limit, within the hard limit the process was given


def address_space_limit(extra_bytes: int) -> int | None:
    """The address space this process uses now plus extra_bytes (for RLIMIT_AS); None off Linux."""
    try:
        with open("/proc/self/statm") as statm:       # Linux: the address space, in pages
            pages = int(statm.read().split()[0])
    except OSError:                                    # macOS has none, and does not enforce RLIMIT_AS
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") + extra_bytes


def forked(target, *args):
    """target(*args) started in a forked child process; None where there is no fork (Windows)."""
    import multiprocessing
    import warnings
    if "fork" not in multiprocessing.get_all_start_methods():
        return None
    sys.stdout.flush()                              # or the child would write them out again
    sys.stderr.flush()
    parent = os.getpid()

    def ended_with_parent():                        # the child's first step
        end_with_parent(parent)
        target(*args)

    child = multiprocessing.get_context("fork").Process(target=ended_with_parent, daemon=True)
    with warnings.catch_warnings():                 # Python 3.12 warns of forking beside threads:
        warnings.simplefilter("ignore", DeprecationWarning)   # the child runs one library alone
        child.start()
    return child


def new_python(module: str, function: str, *args: str, stderr):
    """module.function(*args) in a new Python interpreter, its stderr written to the file
    `stderr`: a subprocess.Popen, or None where there is no fork (Windows). For a library that
    keeps threads of its own (llama.cpp's log writer and thread pool): a fork of a process that
    has run it lacks them, and crashed or lost its log."""
    import subprocess
    from pathlib import Path
    if not hasattr(os, "fork"):
        return None
    home = str(Path(__file__).resolve().parent.parent)     # where ragkit is, installed or not
    paths = os.pathsep.join(p for p in (home, os.environ.get("PYTHONPATH")) if p)
    code = (f"import sys; from ragkit.support import end_with_parent; end_with_parent({os.getpid()}); "
            f"import {module}; {module}.{function}(*sys.argv[1:])")
    return subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=stderr, env={**os.environ, "PYTHONPATH": paths})


# SIGTERM or SIGHUP reaches the kit alone (Ctrl-C at a terminal reaches its whole process group)
# and kill -9 takes no handler: a child left behind by them spun on to its CPU bound, 43 s and
# 2 GB. So the kernel ends the child with its parent. Strictly, with the parent's thread that
# started it: each caller waits for its child in that thread.
PR_SET_PDEATHSIG = 1      # <linux/prctl.h>


def end_with_parent(parent: int) -> None:
    """In a child of `parent` (a pid): SIGKILL when the parent ends, however it ends (Linux)."""
    if sys.platform != "linux":     # macOS has no such call: the child's CPU bound ends it
        return
    import ctypes
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:      # it ended before the prctl, so no signal will come
        os._exit(1)


def soft_limit(kind, soft: int) -> None:
    """setrlimit(kind) to `soft`, within the hard limit the process was given."""
    import resource
    hard = resource.getrlimit(kind)[1]
    resource.setrlimit(kind, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def limit_child(seconds: float, extra_bytes: int) -> None:
    """In a child: at most `seconds` of CPU (then SIGXCPU; a child's CPU time starts at 0)
    and extra_bytes more address space than now (Linux), no core file, no crash report of
    Python's own, and Ctrl-C left to the parent, which ends the child."""
    import faulthandler
    import math
    import resource
    faulthandler.disable()                           # an abort here is no crash to report
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    soft_limit(resource.RLIMIT_CORE, 0)
    soft_limit(resource.RLIMIT_CPU, math.ceil(seconds))
    memory = address_space_limit(extra_bytes)        # None off Linux
    if memory is not None:
        soft_limit(resource.RLIMIT_AS, memory)


# == Deadlines: every network wait ends ============================================================
# the one way to wait on something that may never answer (a model hub, a
# server, a stream of tokens): say what we wait for and for how long, then give up with one line
# that names what to check.
#
#   with_deadline         work() in a helper thread, all of it within a number of seconds
#   items_with_deadline   the same for a stream of items (a model's answer as it is written)


def with_deadline(what: str, seconds: float, work, check: str):
    """Return work(), run in a helper thread; after `seconds` give up with one line.

    Socket timeouts do not cover name lookups or libraries' own retries; one overall
    deadline does. `what` names the wait ("the model hub at ..."), `check` what to do.
    """
    print(f"waiting for {what} (up to {seconds:g} s) ...", file=sys.stderr, flush=True)
    box = {}

    def target():
        try:
            box["value"] = work()
        except BaseException as exc:         # handed to the caller's thread below
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)   # a stuck call never blocks exit
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"{what} did not answer within {seconds:g} s: {check}")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def items_with_deadline(what: str, seconds: float, items, check: str):
    """Yield the items of `items` (a stream from something that may stall), all of them within
    `seconds`; after that, one line. A helper thread takes each item only when the next one is
    asked for, so a source that trickles, or sends keep-alives that are never items, cannot
    stretch the wait, and nothing is read ahead into memory."""
    import queue
    print(f"waiting for {what} (up to {seconds:g} s) ...", file=sys.stderr, flush=True)
    deadline, items = time.monotonic() + seconds, iter(items)
    asks, answers = queue.SimpleQueue(), queue.SimpleQueue()

    def fetch():
        while asks.get():                           # False: the reader is done with us
            try:
                answers.put((True, next(items)))
            except BaseException as exc:            # StopIteration (the end) or an error
                answers.put((False, exc))
                return
        getattr(items, "close", lambda: None)()     # a generator's `with` blocks end here

    threading.Thread(target=fetch, daemon=True).start()     # a stuck read never blocks exit
    try:
        while True:
            asks.put(True)
            try:
                fetched, value = answers.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                fetched = None
            if fetched is None or time.monotonic() > deadline:    # late counts as never
                raise TimeoutError(f"{what} had not finished answering after {seconds:g} s: "
                                   f"{check}")
            if not fetched and isinstance(value, StopIteration):
                return
            if not fetched:
                raise value
            yield value
    finally:
        asks.put(False)


# == How a command ends: one line, exit codes, Ctrl-C ==============================================
# how every command of the kit ends. Nothing here is RAG; it keeps the scripts
# kind to bad input and to Ctrl-C.
#
#   OneLineParser   a bad flag gives one line, not a usage block
#   bounded         a numeric flag's type: a number from low to high, else one line naming them
#   run_cli         the one error path: an error is one line on stderr and exit status 1;
#   main_for        Ctrl-C is "interrupted" and exit status 130; never a traceback
#   leave           how every command exits (after Ctrl-C, without waiting for model threads)
#   threads_without_ctrl_c   a library's threads started with Ctrl-C held, so it reaches
#                   Python's main thread (the one path for Ctrl-C: see its section below)
#


EXIT_ERROR = 1
EXIT_INTERRUPTED = 130


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag gives one line instead of a usage block."""

    def error(self, message):
        self.exit(2, f"error: {message} (see --help)\n")


def bounded(kind, low, high):
    """An argparse type for a numeric flag: a `kind` (int or float) from `low` to `high`, else
    one line that names the range. Every numeric flag of the kit has one: 10**23 tokens or
    threads would only fail deep inside a library. type=bounded(int, 1, 32_768)"""
    def parse(text: str):
        value = kind(text)                         # "abc": argparse says "invalid int value"
        if not low <= value <= high:               # NaN is outside every range
            raise argparse.ArgumentTypeError(f"{text} is not between {low:,} and {high:,}")
        return value
    parse.__name__ = kind.__name__                 # the name argparse's own message uses
    return parse


def refuse_empty(values: dict, what: str = "a value") -> None:
    """ValueError if a flag was given as an empty string ("--docs ''"): values maps each flag
    to what it was given, refuse_empty({"--docs": docs, "--index": index}, "a path")."""
    for flag, value in values.items():
        if value is not None and not str(value).strip():
            raise ValueError(f"{flag} needs {what}, got an empty string")


# == Ctrl-C: one path ========================================================================
# Ctrl-C counts while a command's work runs: run_cli turns it into "interrupted" and exit status
# 130, never a traceback, and the work's `finally` blocks (a model told to stop, a child server
# ended) run on the way out. Once the work is over, Ctrl-C is held until the process exits: the
# answer is out, and nothing half-done is left to stop. Threads a library starts are started
# with Ctrl-C held too (threads_without_ctrl_c), so it reaches Python's main thread, the one
# that can stop the work.
@contextmanager
def threads_without_ctrl_c():
    """Hold Ctrl-C while a library starts its threads (they inherit the hold), then give
    Python's own handler back: llama.cpp installs one that waits for its threads and can hang."""
    mask = getattr(signal, "pthread_sigmask", None)     # none on Windows: nothing to hold
    handler = signal.getsignal(signal.SIGINT)
    if mask:
        mask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, handler)
        if mask:
            mask(signal.SIG_UNBLOCK, {signal.SIGINT})


def caused_by_ctrl_c(exc: BaseException) -> bool:
    """Did a Ctrl-C start this error? A library may wrap the KeyboardInterrupt it was
    importing through ("Failed to import ... because of KeyboardInterrupt")."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def run_cli(work, *args) -> int:
    """Run work(*args) for a command line; return its exit status: what work returns if it
    returns a number, else 0; 1 after an error (one line on stderr); 130 after Ctrl-C.

    A Ctrl-C held since start-up (a terminal's test harness holds it) arrives here, as
    KeyboardInterrupt, like one pressed during the work. Afterwards Ctrl-C is held: a press
    while the script exits changes nothing."""
    mask = getattr(signal, "pthread_sigmask", None)
    status = EXIT_INTERRUPTED
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if mask:
            mask(signal.SIG_UNBLOCK, {signal.SIGINT})
        status = outcome(work, args)
    except KeyboardInterrupt:
        status = EXIT_INTERRUPTED
    finally:
        if mask:                         # from here to the exit, Ctrl-C waits (and is dropped)
            mask(signal.SIG_BLOCK, {signal.SIGINT})
    if status == EXIT_INTERRUPTED:
        with contextlib.suppress(OSError, ValueError):      # stdout closed, or a broken pipe
            print(flush=True)         # an answer cut mid-line: "interrupted" on a line of its own
        print("interrupted", file=sys.stderr, flush=True)
    return status


def outcome(work, args) -> int:
    """work(*args)'s exit status, an error being one line on stderr and status 1."""
    try:
        status = work(*args)
        sys.stdout.flush()
    except BrokenPipeError:                  # `... | head` closed the pipe: not an error, and
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # nothing more to say
        return 0
    except (ValueError, RuntimeError, OSError, ImportError, LookupError) as exc:
        if caused_by_ctrl_c(exc):
            raise KeyboardInterrupt from None
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return EXIT_ERROR
    return status if isinstance(status, int) else 0


def main_for(run, parse_args):
    """A script's main(argv=None) -> exit status: its flags parsed, `run(args)` through
    run_cli (one error path for every script)."""
    def main(argv=None) -> int:
        return run_cli(lambda: run(parse_args(argv)))
    main.__doc__ = f"`python -m {run.__module__} --help` lists the flags; errors are one line."
    return main


def leave(status: int) -> None:
    """Exit a command with `status`; after Ctrl-C at once, without waiting for worker threads
    (a model server, a stuck network call) that would keep the process alive."""
    sys.stdout.flush()
    sys.stderr.flush()
    if status == EXIT_INTERRUPTED:
        os._exit(status)
    sys.exit(status)


# == Progress bars on stderr =======================================================================
# the one progress display. A slow step says so within 2 s, then at least
# every 5 s: a tqdm bar on a terminal, a line every few seconds in a log or a pipe.
#
#   Progress   a bar for a step that may be slow (nothing shown for a quick one)
#   progress   the same around a loop over items


FIRST_S = 1.0    # a step still running after this long shows progress (the promise: 2 s)
LINE_S = 4.0     # in a log or a pipe, one line this often (the promise: at least every 5 s)
DRAW_S = 0.5     # on a terminal the bar is redrawn this often, so its clock moves in a long step


class Progress:
    """A tqdm bar on stderr for a step that may be slow; a step done within FIRST_S shows nothing.

        with Progress("reading files", 91, " files") as bar:
            bar.update(0, now="guide/install.md")     # the file being read, shown beside the bar
            bar.update(1)

    A helper thread draws it, so it moves while one item takes long (a big PDF, a model reading
    its prompt): on a terminal tqdm's bar, redrawn every DRAW_S; in a log or a pipe one line
    every LINE_S ("reading files:  41% 37/91 [00:12<00:17,  3.01 files/s, guide/a.md]"), and one
    at the end if any was printed. total=None counts without a total; until it counts one, it
    is a clock ("loading the embedding model: 00:07"). A new phase ("writing") is a new
    Progress: its clock and its rate start again."""

    def __init__(self, what: str, total: int | None = None, unit: str = ""):
        self.what, self.total, self.unit, self.n, self.now = what, total, unit, 0, ""
        self.start, self.lines, self.bar = time.monotonic(), 0, None
        self.terminal = on_terminal()
        self.stop, self.lock = threading.Event(), threading.Lock()
        self.thread = threading.Thread(target=self.draw_until_stopped, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        if self.bar is not None:
            self.bar.close()                     # leave=False: the bar is cleared
        elif self.lines:
            with contextlib.suppress(OSError, ValueError):    # stderr closed: nothing to say
                self.draw()                      # a log says where the step ended

    def update(self, n: int = 1, now: str | None = None) -> None:
        """n more items done; `now` names the one under way (made safe to print)."""
        with self.lock:
            self.n += n
            if now is not None:
                self.now = printable(now, lines=False)[-60:]

    def at(self, n: int, total: int | None = None, now: str | None = None) -> None:
        """n items done of `total` (as a source counts them itself: llama.cpp's prompt tokens)."""
        with self.lock:
            self.n, self.total = n, total if total is not None else self.total
        self.update(0, now)

    def draw_until_stopped(self) -> None:
        """The helper thread: the first frame at FIRST_S, then one every DRAW_S or LINE_S."""
        wait = FIRST_S
        while not self.stop.wait(wait):
            try:
                self.draw()
            except (OSError, ValueError):       # stderr closed (`2>&1 | head` ended): no bar
                return
            wait = DRAW_S if self.terminal else LINE_S

    def draw(self) -> None:
        """One frame: tqdm's bar redrawn on a terminal, else one line of tqdm's meter."""
        with self.lock:
            n, total, what, unit, now = self.n, self.total, self.what, self.unit, self.now
        if not self.terminal:
            line = tqdm_meter(n, total, time.monotonic() - self.start, what, unit, now)
            print(line, file=sys.stderr, flush=True)
            self.lines += 1
            return
        if self.bar is None:
            from tqdm import tqdm
            self.bar = tqdm(total=total, desc=what, unit=unit, file=sys.stderr, leave=False,
                            dynamic_ncols=True, mininterval=0)
            self.bar.start_t -= time.monotonic() - self.start      # its clock: since our start
        self.bar.total, self.bar.unit, self.bar.n = total, unit, n
        self.bar.bar_format = CLOCK if total is None and not n else None
        self.bar.set_description_str(what, refresh=False)
        self.bar.set_postfix_str(now, refresh=False)
        self.bar.refresh()


def on_terminal() -> bool:
    """Is stderr a terminal with a width? (A pseudo-terminal may have 0 columns: tqdm would draw
    nothing there, so it counts as a log.)"""
    try:
        return sys.stderr.isatty() and os.get_terminal_size(sys.stderr.fileno()).columns > 0
    except (OSError, ValueError, AttributeError):      # closed, replaced, or no file number
        return False


CLOCK = "{desc}: {elapsed}{postfix}"     # a wait with nothing counted yet: its clock alone


def tqdm_meter(n, total, elapsed: float, what: str, unit: str, now: str) -> str:
    """tqdm's meter as one line of a log: "what:  41% 37/91 [00:12<00:17,  3.01 files/s, now]"."""
    from tqdm import tqdm
    return tqdm.format_meter(n, total, elapsed, ncols=0, prefix=what, unit=unit, postfix=now or None,
                             bar_format=CLOCK if total is None and not n else None)


def progress(items, total: int, what: str, unit: str = ""):
    """Yield `items`, showing progress on stderr (Progress): in a log or a pipe one line as the
    work starts ("scoring: 1,000 settings ..."), then one every LINE_S while it lasts."""
    if not on_terminal():
        print(f"{what}: {total:,}{unit} ...", file=sys.stderr, flush=True)
    with Progress(what, total, unit) as bar:
        for item in items:
            yield item
            bar.update(1)


# == JSON and JSON Lines, parsed with bounds =======================================================
# JSON and JSON Lines as the kit reads them (--eval, --gold, kept
# replies): each bad line named by file and line, never a traceback.


def parse_json(text):
    """json.loads; ValueError for text that is not JSON, or nested too deep to parse. The
    garbage collector is paused meanwhile: a deeply nested line drives the parser to the
    recursion limit, and a finalizer the collector ran at that depth would fail noisily."""
    import gc
    import json
    paused = gc.isenabled()
    gc.disable()
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deep to parse") from None
    finally:
        if paused:
            gc.enable()


def read_jsonl(path, parse, what: str) -> list:
    """[parse(record) for each line of a JSON Lines file]. parse raises ValueError on a bad
    record; every bad line is named (file and line) on stderr, then one error is raised.
    A UTF-8 byte-order mark (as some editors save) is accepted."""
    from pathlib import Path
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found: {path}")
    items, bad = [], []
    for n, line in enumerate(path.read_text(encoding="utf-8-sig").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = parse_json(line)
        except ValueError as exc:
            bad.append(f"{path} line {n}: not JSON ({one_line(exc)})")
            continue
        try:
            items.append(parse(record))
        except ValueError as exc:
            bad.append(f"{path} line {n}: {one_line(exc)}")
    if len(bad) == 1:                      # one bad line: the error itself names it
        raise ValueError(bad[0])
    if bad:
        print("\n".join(bad), file=sys.stderr)
        raise ValueError(f"{path}: {len(bad)} bad lines, named above; fix them and run again")
    if not items:
        raise ValueError(f"{path} has no questions")
    return items

# == Storage: writing to disk without harming what is there ========================================
# How the kit writes to disk and to databases.
#
#   1. Mark first: whatever the kit creates (a folder, a Chroma collection, a Postgres table, a
#      Qdrant collection) carries the kit's mark before anything else is written, so even an
#      interrupted first save is recognisably ours and can be rebuilt.
#   2. Refuse what is not ours: a folder or collection without the mark is never overwritten or
#      deleted; the run stops with one line instead.
#   3. Save whole or not at all: each file goes to a unique temporary name and is renamed into
#      place, under the operating system's lock on the folder (released when the process ends,
#      even by kill -9), so two runs saving at once take turns.
#
#     with folder_lock(claim_folder("my_index", "--index")):
#         digest = write_atomic(Path("my_index") / "chunks.json", b"[]")

OWNER = "rag_from_scratch"            # the mark: metadata created_by=OWNER, or this file
MARK_FILE = ".rag_from_scratch"       # in every folder the kit creates
LOCK_FILE = ".rag_from_scratch.lock"  # locked while a run saves into the folder
INDEX_FORMAT = "rag_from_scratch-index-2"   # the saved index's layout; any other is rebuilt
PARTIAL = ".rag_from_scratch.partial"        # the end of a temporary file only this kit writes
LOCK_WAIT_S = 120                             # how long a run waits for another run's save


def cache_folder() -> Path:
    """The kit's folder in the user's cache: $RAG_CACHE_DIR, else $XDG_CACHE_HOME or ~/.cache,
    then rag-from-scratch/ (Qwen's joined model file, the indexes kept for folders)."""
    base = os.environ.get("RAG_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "rag-from-scratch"


def sha256_bytes(data: bytes) -> str:
    """The hex SHA-256 of some bytes."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path) -> str:
    """The hex SHA-256 of a file, read in 1 MB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def is_our_folder(folder) -> bool:
    """True if the kit created `folder`: our mark is the only proof (a file's name proves nothing)."""
    return (Path(folder) / MARK_FILE).is_file()


def writable(folder) -> bool:
    """True unless `folder` is read-only to this process or sits on a read-only disk."""
    return os.access(folder, os.W_OK) and not os.statvfs(folder).f_flag & os.ST_RDONLY


def usable_folder(folder, flag: str, read_only_ok: bool = False) -> Path:
    """`folder` if the kit may write there: ValueError, now, before any slow work, if it is a
    file, holds anything the kit did not create, or (or its nearest existing parent) is not
    writable; read_only_ok: one of ours that is read-only passes, to be read (a saved index on a
    read-only disk)."""
    folder = Path(folder).expanduser()
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{flag} {folder} is a file, not a folder: give a folder path")
    if folder.is_dir() and any(folder.iterdir()) and not is_our_folder(folder):
        raise ValueError(f"{flag} {folder} holds files the kit did not create; it will not touch "
                         f"them: choose a new or empty folder")
    existing = folder.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:                                   # root passes os.access checks; a real write tells
        tempfile.TemporaryFile(dir=existing).close()
    except OSError:
        if read_only_ok and folder.is_dir() and is_our_folder(folder):
            return folder
        raise ValueError(f"cannot write to {flag} {folder}: choose a folder you can write to") from None
    return folder


def claim_folder(folder, flag: str, read_only_ok: bool = False) -> Path:
    """Create `folder` (or accept an empty one, or one of ours) and put our mark in it first;
    read_only_ok: as usable_folder."""
    folder = usable_folder(folder, flag, read_only_ok)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not is_our_folder(folder):            # "x": created once, even by two runs at once
            with contextlib.suppress(FileExistsError), open(folder / MARK_FILE, "x") as mark:
                mark.write(f"created by {OWNER}; safe to delete with the folder\n")
    except OSError as exc:
        raise ValueError(f"cannot write to {flag} {folder} ({exc.strerror or exc}): "
                         f"choose a folder you can write to") from None
    return folder


def write_atomic(path, data, check=None) -> str | None:
    """Write `data` to `path` all or nothing (a unique temporary name, renamed); return its
    SHA-256. `data` may also be an iterable of byte blocks (a file too big to hold), and
    check(), if given, runs before the rename: an error there leaves `path` as it was."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=PARTIAL)
    try:
        with os.fdopen(fd, "wb") as f:
            for block in [data] if isinstance(data, bytes) else data:
                f.write(block)
            f.flush()
            os.fsync(f.fileno())
        if check is not None:
            check()
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:    # which disk is full
            raise OSError(exc.errno, f"no space left on the disk of {path.parent} (writing "
                                     f"{path.name}): free some, or save elsewhere") from None
        raise
    return sha256_bytes(data) if isinstance(data, bytes) else None


def remove_partials(folder, name: str = "") -> None:
    """Remove the temporary files that a write_atomic killed mid-way (kill -9, a power cut) left
    in `folder`: of the file `name` only, if given ("model.gguf": ".model.gguf.x1y2z3" + PARTIAL).
    Call it holding the lock the writers take, so no write is under way. Only regular files
    with a name write_atomic makes are removed; anything else is left as it is."""
    pattern = f".{glob.escape(name)}.*{PARTIAL}" if name else f".*{PARTIAL}"
    for left in Path(folder).glob(pattern):
        if left.is_file() and not left.is_symlink():
            left.unlink(missing_ok=True)


@contextmanager
def folder_lock(folder):
    """Hold filelock's lock on `folder` while saving; another run waits its turn, and says so."""
    from filelock import FileLock, Timeout
    path = Path(folder) / LOCK_FILE
    if path.is_symlink():                         # older filelock versions would follow it
        raise ValueError(f"{path} is a link: the kit does not follow it; remove it")
    lock = FileLock(path)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        print(f"waiting for another run to finish saving in {printable(str(folder), lines=False)} "
              f"(up to {LOCK_WAIT_S} s) ...",
              file=sys.stderr, flush=True)
        try:
            lock.acquire(timeout=LOCK_WAIT_S)
        except Timeout:
            raise TimeoutError(f"another run has held the lock on {folder} for {LOCK_WAIT_S} s: "
                               f"let it finish, or stop it, and run again") from None
    except OSError as exc:
        raise ValueError(f"cannot lock {path} ({exc.strerror or exc}): nothing can be saved in "
                         f"that folder") from None
    try:
        remove_partials(folder)         # the lock is ours, so no save is running
        yield Path(folder)
    finally:
        lock.release()


def regular_file_size(path, max_bytes: int, not_regular: str, too_big, error=ValueError) -> int:
    """A regular file's size (links followed), at most max_bytes; else error(your words for what is wrong)."""
    info = os.stat(path)                               # a path, or an open file's number
    if not stat.S_ISREG(info.st_mode):                 # a FIFO or a device could hang or never end
        raise error(not_regular)
    if info.st_size > max_bytes:
        raise error(too_big(info.st_size))
    return info.st_size


def read_plain_file(path, max_bytes: int, digest: str | None = None) -> bytes:
    """The bytes of a regular file (never a link, FIFO or device, which could hang or never
    end) of at most `max_bytes`; OSError or ValueError otherwise, with the reason. Given the
    SHA-256 `digest` it should have, the file is hashed a piece at a time first, so one that
    differs (a damaged 3 GB file) is refused without ever being held in memory."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, flags)                          # a link: ELOOP; a FIFO: no wait
    with os.fdopen(fd, "rb") as f:
        regular_file_size(f.fileno(), max_bytes, f"{path} is not a regular file",
                          lambda size: f"{path} is {size:,} bytes, over the {max_bytes:,} it may be")
        if digest is not None:
            hashed = hashlib.sha256()
            for piece in iter(lambda: f.read(1 << 20), b""):
                hashed.update(piece)
            if hashed.hexdigest() != digest:
                raise ValueError(f"{path} is not the file that was saved (its SHA-256 differs)")
            f.seek(0)
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:                          # it grew while we read
        raise ValueError(f"{path} is over the {max_bytes:,} bytes it may be")
    return data


def is_our_store(metadata) -> bool:
    """True if a database collection/table's metadata carries our mark (created_by)."""
    return isinstance(metadata, dict) and metadata.get("created_by") == OWNER


def refuse_foreign(kind: str, name: str, where: str) -> ValueError:
    """The one-line refusal for a store the kit did not create."""
    return ValueError(f"{kind} {name!r} in {where} was not created by this kit; it will not "
                      f"replace or delete it: choose another name")
