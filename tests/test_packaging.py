"""pyproject.toml installs every top-level module and package, and they import from anywhere."""
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_py_modules_and_packages_list_every_top_level_module_and_package():
    on_disk = sorted(p.stem for p in ROOT.glob("*.py"))
    assert sorted(PYPROJECT["tool"]["setuptools"]["py-modules"]) == on_disk
    packages = sorted(p.parent.name for p in ROOT.glob("*/__init__.py"))
    assert sorted(PYPROJECT["tool"]["setuptools"]["packages"]) == packages


def test_commands_point_at_existing_main_functions():
    import importlib
    for command, target in PYPROJECT["project"]["scripts"].items():
        module, function = target.split(":")
        assert callable(getattr(importlib.import_module(module), function)), command


@pytest.mark.slow
def test_wheel_holds_the_modules_and_imports_outside_the_repository(tmp_path):
    # Built from a copy, so the build leaves nothing in the repository.
    source = tmp_path / "source"
    source.mkdir()
    modules = [f"{m}.py" for m in PYPROJECT["tool"]["setuptools"]["py-modules"]]
    for name in ["pyproject.toml", "README.md", "LICENSE", *modules]:
        shutil.copy(ROOT / name, source / name)
    for package in PYPROJECT["tool"]["setuptools"]["packages"]:
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index",
                            "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"), str(source)],
                           capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stderr
    wheel = next((tmp_path / "dist").glob("rag_from_scratch-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert {"rag_from_scratch.py", "rageval/ir_scores.py", "ragkit/cli.py", "rag_vector_db.py"} <= set(names)
    assert not any(n.startswith(("tests/", "lab/", "data/", "notebooks/")) for n in names)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert "License-Expression: MIT" in metadata and "Requires-Dist: numpy" in metadata

    # The unpacked wheel on sys.path stands in for site-packages; run from an empty folder.
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    probe = subprocess.run([sys.executable, "-c", "import rag_from_scratch as r, ragkit.cli as c; "
                            "print(r.__file__); print(c.__file__)"],
                           cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    assert [Path(p) for p in probe.stdout.split()] == [site / "rag_from_scratch.py", site / "ragkit" / "cli.py"]


def test_ci_runs_exactly_the_readmes_test_command():
    import re
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Two commands"):]
    section = section[:section.index("\n## ", 1)]
    demo, tests = re.findall(r"```bash\n(.*?)\n```", section, re.S)
    assert "\n" not in demo and "\n" not in tests                # one command line each
    for command in (demo, tests):                                # torch alone from the CPU index
        assert ("pip install --no-deps --index-url https://download.pytorch.org/whl/cpu "
                "torch==2.13.0 && ") in command
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert ci == tests
