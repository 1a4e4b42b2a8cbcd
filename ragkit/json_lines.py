"""
ragkit/json_lines.py: JSON and JSON Lines as the kit reads them (--eval, --gold, kept
replies): each bad line named by file and line, never a traceback.
"""

import sys

from ragkit.text import one_line


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
