"""
ragkit/plumbing.py: the bottom layer every script stands on. Nothing here is RAG; it keeps the
scripts kind to bad input and to Ctrl-C.

  OneLineParser   a bad flag gives one line, not a usage block
  bounded         a numeric flag's type: a number from low to high, else one line naming them
  run_cli         the one error path: an error is one line on stderr and exit status 1;
  main_for        Ctrl-C is "interrupted" and exit status 130; never a traceback
  leave           how every command exits (after Ctrl-C, without waiting for model threads)
  threads_without_ctrl_c   a library's threads started with Ctrl-C held, so it reaches
                  Python's main thread (the one path for Ctrl-C: see its section below)
  with_deadline   the one way to wait on something that may never answer: say what we wait
                  for and for how long, then give up with one line that names what to check
  items_with_deadline   the same for a stream of items (a model's answer as it is written)
  Progress, progress   the one progress display: within 2 s, then at least every 5 s; a bar
                  on a terminal, a line every few seconds in a log
  parse_json, read_jsonl   JSON and JSON Lines (--eval, --gold): each bad line named

It imports nothing from the kit, so every other file may import it.
"""

import argparse
import contextlib
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager

from ragkit.text import printable

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


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (some libraries put newlines in theirs), safe to
    print: it may quote a path or a reply with control or bidirectional characters in it."""
    return printable(" ".join(str(exc).split()), lines=False) or type(exc).__name__


def refuse_empty(args, flags: tuple, what: str = "a value") -> None:
    """ValueError if one of these flags was given as an empty string ("--docs ''")."""
    for flag in flags:
        value = getattr(args, flag)
        if value is not None and not str(value).strip():
            raise ValueError(f"--{flag} needs {what}, got an empty string")


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


# == Waiting: a deadline on everything that may never answer ================================
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


# == Progress: a slow step says so within 2 s, then at least every 5 s ===================
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


# == JSON and JSON Lines ====================================================================
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
