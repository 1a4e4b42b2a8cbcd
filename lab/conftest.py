"""Keeps the lab grader out of a plain `python -m pytest` run of the project.

The untouched starter fails the grader on purpose, so its tests run only when asked for:
`python -m pytest lab` (or a path inside lab/), or with LAB_MODULE set.
"""
import os
from pathlib import Path

LAB = Path(__file__).resolve().parent


def _asked_for_lab(config) -> bool:
    """True if a path given to pytest is lab/ or lies inside it."""
    here = Path(config.invocation_params.dir)
    for arg in config.args:
        target = (here / arg.split("::")[0]).resolve()
        if target == LAB or LAB in target.parents:
            return True
    return False


def pytest_ignore_collect(collection_path, config):
    """Skip the grader's test file unless the lab was asked for."""
    if Path(collection_path).name != "test_starter.py":
        return None
    if os.environ.get("LAB_MODULE") or _asked_for_lab(config):
        return None
    return True
