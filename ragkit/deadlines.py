"""
ragkit/deadlines.py: the one way to wait on something that may never answer (a model hub, a
server, a stream of tokens): say what we wait for and for how long, then give up with one line
that names what to check.

  with_deadline         work() in a helper thread, all of it within a number of seconds
  items_with_deadline   the same for a stream of items (a model's answer as it is written)
"""

import sys
import threading
import time


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
