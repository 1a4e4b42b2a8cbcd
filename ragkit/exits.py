"""
ragkit/exits.py: how every command of the kit ends. Nothing here is RAG; it keeps the scripts
kind to bad input and to Ctrl-C.

  OneLineParser   a bad flag gives one line, not a usage block
  bounded         a numeric flag's type: a number from low to high, else one line naming them
  run_cli         the one error path: an error is one line on stderr and exit status 1;
  main_for        Ctrl-C is "interrupted" and exit status 130; never a traceback
  leave           how every command exits (after Ctrl-C, without waiting for model threads)
  threads_without_ctrl_c   a library's threads started with Ctrl-C held, so it reaches
                  Python's main thread (the one path for Ctrl-C: see its section below)

It imports nothing from the kit but ragkit/text.py, so every other module may import it.
"""

import argparse
import contextlib
import os
import signal
import sys
from contextlib import contextmanager

from ragkit.text import one_line

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
