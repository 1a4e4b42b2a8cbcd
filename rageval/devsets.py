"""
rageval/devsets.py: the development sets: five documentation sets from different projects, and
the questions written for each, on which the settings for your own documents are chosen.

    from rageval.devsets import SETS, pages, questions
    folder = pages("black")                  # the pages (.rag_data/devsets/black)
    path = questions("black")                # data/devsets/black/questions.jsonl

Each set has at least 30 questions in users' words with the files that answer them and the
facts a right answer must state (regular expressions), and 8 the pages cannot answer
(data/devsets/README.md says how they were written). MkDocs' pages ship in the repository;
the other four come from their projects' PyPI source packages (`python -m rageval.downloads`).
"""

from pathlib import Path

from rageval import downloads

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = ROOT / "data" / "devsets"

# name -> (the project, what its docs are like, where its pages are)
SETS = {
    "mkdocs": ("MkDocs", "a static-site generator; call-outs, ::: directives, tables, raw HTML",
               QUESTIONS / "mkdocs" / "docs"),
    "pip": ("pip", "Python's package installer; MyST with Sphinx directives, reference pages",
            downloads.folder("devsets/pip")),
    "hatch": ("Hatch", "a project manager; MkDocs Material tabs, admonitions, many small pages",
              downloads.folder("devsets/hatch")),
    "black": ("Black", "a code formatter; MyST, long prose, style rules",
              downloads.folder("devsets/black")),
    "structlog": ("structlog", "a logging library; MyST with API roles and code examples",
                  downloads.folder("devsets/structlog")),
}
DEVSET = QUESTIONS / "mkdocs"          # the first set, whose pages the repository carries


def pages(name: str) -> Path:
    """The folder of a set's pages; FileNotFoundError naming the fetch when it is not there."""
    if name not in SETS:
        raise ValueError(f"unknown development set {name!r}: choose from {', '.join(SETS)}")
    folder = SETS[name][2]
    if not folder.is_dir() or not any(folder.iterdir()):
        raise FileNotFoundError(f"the {SETS[name][0]} pages are not here ({folder}): run "
                                f"`{downloads.FETCH}` once")
    return folder


def questions(name: str) -> Path:
    """The JSON Lines file of a set's questions and gold facts."""
    return QUESTIONS / name / "questions.jsonl"


def available() -> list[str]:
    """The sets whose pages are here."""
    return [name for name in SETS if SETS[name][2].is_dir() and any(SETS[name][2].iterdir())]
