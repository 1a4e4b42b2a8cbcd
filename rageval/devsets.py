"""
rageval/devsets.py: where the development sets live: documentation pages and the questions
written for them, on which the settings for your own documents are chosen.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEVSET = ROOT / "data" / "devset"          # MkDocs' own docs and 46 questions
