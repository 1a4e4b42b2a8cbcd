"""The lab grader as pytest tests: `python -m pytest lab` grades lab/starter.py.

LAB_MODULE=rag_from_scratch (or a path to a .py file) grades another module instead.
Each failing test names the function and gives the same hint as `python lab/check.py`;
the graded code runs in a child process with the same time and memory limits.
"""
import check  # lab/check.py: pytest puts this folder (no __init__.py) on the path
import pytest


@pytest.fixture(scope="module")
def results():
    """Every function of $LAB_MODULE (else lab/starter.py), graded once: {name: problem}."""
    return check.grade(check.module_spec())


@pytest.mark.parametrize("name", check.FUNCTIONS)
def test_function_matches_trusted_reference(results, name):
    problem = results[name]
    if problem is not None:
        pytest.fail(f"{name}: {problem}", pytrace=False)
