"""
ragkit/progress.py: the one progress display. A slow step says so within 2 s, then at least
every 5 s: a tqdm bar on a terminal, a line every few seconds in a log or a pipe.

  Progress   a bar for a step that may be slow (nothing shown for a quick one)
  progress   the same around a loop over items
"""

import contextlib
import os
import sys
import threading
import time

from ragkit.text import printable


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
