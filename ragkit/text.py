"""
ragkit/text.py: text the kit prints, and text it cuts into sentences; the ground floor.

  shown(text)             safe to print: control characters written out, so a file, a page or
                          a model's reply cannot drive the terminal
  split_sentences(text)   "Install it. Then run it." -> ["Install it.", "Then run it."]

It imports nothing from the kit, so every other file may import it.
"""

import re

CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029]")   # not \t, \n, \r
CONTROL_OR_BREAK = re.compile(CONTROL.pattern[:-1] + r"\t\n\r]")


def shown(text: str, lines: bool = True) -> str:
    """Text safe to print: control characters written out (\\x1b), so text cannot drive the
    terminal; lines=False also writes out line breaks, so a name cannot forge a printed line."""
    pattern = CONTROL if lines else CONTROL_OR_BREAK
    return pattern.sub(lambda m: repr(m.group(0))[1:-1], text)


def split_sentences(text: str) -> list[str]:
    """Cut after '.', '!' or '?' followed by a space ("id.kestrelwood.example" stays whole)."""
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]
