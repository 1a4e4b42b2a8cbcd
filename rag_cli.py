"""
rag_cli.py: command-line plumbing shared by every script of the kit.

  OneLineParser   a bad flag gives one line, not a usage block
  run_cli         the one error path: an error is one line on stderr and exit status 1;
                  Ctrl-C is "interrupted" and exit status 130; never a traceback
  with_deadline   the one way to wait on the network: say what we wait for and for how
                  long, then give up with one line that names what to check
  hub_reachable   a bounded probe of the model hub (name lookup included)

Nothing here is needed to understand RAG; it keeps the scripts kind to bad input.
"""

import argparse
import os
import signal
import sys
import threading

EXIT_ERROR = 1
EXIT_INTERRUPTED = 130
HUB_TIMEOUT_S = 3.0          # a probe of the model hub: answer within this or count it as blocked


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag gives one line instead of a usage block."""

    def error(self, message):
        self.exit(2, f"error: {message} (see --help)\n")


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (some libraries put newlines in theirs)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def interrupted(signum=None, frame=None):
    """Ctrl-C before the work starts (while NumPy or torch load): one line, exit 130."""
    print("interrupted", file=sys.stderr, flush=True)
    os._exit(EXIT_INTERRUPTED)         # mid-import, a clean exit can wait on half-made threads


def quiet_interrupts() -> None:
    """Call first thing in a script run as a command, before its heavy imports.

    Ctrl-C is held until run_cli starts, then handled there. Threads that libraries start
    meanwhile (BLAS, llama.cpp) inherit the hold, so Ctrl-C always reaches Python's main
    thread, never a library's own handler (llama.cpp's can leave its start-up stuck).
    Where threads cannot hold signals (Windows), Ctrl-C during the imports just exits.
    """
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    else:
        signal.signal(signal.SIGINT, interrupted)


def run_cli(work, *args) -> int:
    """Run work(*args) for a command line; return its exit status: what work returns if it
    returns a number, else 0; 1 after an error (one line on stderr); 130 after Ctrl-C."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if hasattr(signal, "pthread_sigmask"):     # a Ctrl-C held since start-up arrives here
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        status = work(*args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ValueError, RuntimeError, OSError, ImportError, LookupError) as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:                  # `... | head` closed the pipe: not an error
        return 0
    finally:
        sys.stdout.flush()
    return status if isinstance(status, int) else 0


def leave(status: int) -> None:
    """Exit a command with `status`; after Ctrl-C, do not wait for worker threads (a model
    server, a stuck network call) that would keep the process alive."""
    sys.stdout.flush()
    sys.stderr.flush()
    if status == EXIT_INTERRUPTED:
        os._exit(status)
    sys.exit(status)


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


def hub_reachable(timeout: float = HUB_TIMEOUT_S) -> bool:
    """True if the model hub answers an HTTP request within `timeout` seconds, lookup included."""
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    import urllib.error
    import urllib.request
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")

    def probe():
        try:
            urllib.request.urlopen(f"{endpoint}/api/models", timeout=timeout).close()
        except urllib.error.HTTPError:
            pass                     # it answered, even if with an error code
        return True

    try:
        return with_deadline(f"the model hub at {endpoint}", timeout, probe,
                             "no network; install the model locally")
    except (OSError, ValueError):    # refused, unreachable, timed out or a bad address
        return False
