"""Keeps the lab grader out of a plain `python -m pytest` run of the project.

The untouched starter fails the grader on purpose, so its tests run only when asked for:
`python -m pytest lab` (or a path inside lab/), or with LAB_MODULE set.
"""
import os
from pathlib import Path

LAB = Path(__file__).resolve().parent


def pytest_ignore_collect(collection_path, config):
    """Skip the grader's test file unless lab/ or a path inside it was asked for."""
    if Path(collection_path).name != "test_starter.py" or os.environ.get("LAB_MODULE"):
        return None
    here = Path(config.invocation_params.dir)
    asked = [(here / arg.split("::")[0]).resolve() for arg in config.args]
    return None if any(path == LAB or LAB in path.parents for path in asked) else True
