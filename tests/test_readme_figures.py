"""Figures the README, its pages (docs/) and the instructor notes quote in prose, pinned to what
the code measures."""
import contextlib
import importlib.util
import io
from pathlib import Path

import rag_experiments as rx

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "lab" / "INSTRUCTOR.md"]
README = " ".join(" ".join(p.read_text(encoding="utf-8").split()) for p in PAGES)


def lab_tasks():
    """lab/lab_tasks.py by path (lab/ is a folder of scripts, not a package)."""
    spec = importlib.util.spec_from_file_location("lab_tasks_figures", ROOT / "lab" / "lab_tasks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_k2_grows_the_prompt_1_56_times_not_twice(minilm):
    with contextlib.redirect_stdout(io.StringIO()):
        words = lab_tasks().task3(minilm)["prompt_words"]
    assert [round(words[k]) for k in (1, 2)] == [68, 106]
    assert round(words[2] / words[1], 2) == 1.56
    assert "the average prompt grows from 68 to 106 words, 1.56x" in README
    assert "twice the context" not in README


def test_experiment_i_trims_19_percent_at_12_4_as_the_readme_says(minilm):
    with contextlib.redirect_stdout(io.StringIO()):
        i = rx.experiment_i(minilm)
    small, large = i["size=12 overlap=4 k=5"], i["size=50 overlap=10 k=3"]
    assert (small["words_before"], small["words_after"]) == (925, 753)
    assert f"{(753 - 925) / 925:+.0%}" == "-19%"
    assert "by 19% at 12/4 and k=5 (925 -> 753)" in README
    assert (large["words_before"], large["words_after"]) == (1475, 1376)
    assert "trims it by 7% at 50/10 and k=3 (1475 -> 1376 words" in README


def test_the_readme_links_only_pages_that_exist():
    import re
    front = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\((docs/[^)#]+)", front)
    assert links and all((ROOT / link).is_file() for link in links)
    assert {p.name for p in (ROOT / "docs").glob("*.md")} <= {link.split("/")[-1] for link in links}


def test_the_readmes_demo_lines_are_what_the_demo_prints(minilm, capsys, monkeypatch):
    import re

    import rag_from_scratch as rag
    front = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"With MiniLM[^\n]*\n\n```\n(.*?)\n```", front, re.S).group(1)
    monkeypatch.setattr(rag, "load_minilm", lambda *args, **kwargs: minilm.model)   # loaded once
    assert rag.main(["--backend", "minilm"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert all(line in printed for line in block.splitlines() if line != "...")


def test_times_and_sizes_in_the_readme_and_install_page_are_ranges_with_their_load():
    import re
    for page in (ROOT / "README.md", ROOT / "docs" / "install.md"):
        text = " ".join(page.read_text(encoding="utf-8").split())
        for claim in re.findall(r"[^.]*\b\d+(?:\.\d+)? minutes\b[^.]*\.", text):
            assert re.search(r"\d+(?:\.\d+)? to \d+(?:\.\d+)? minutes", claim) and "load" in claim, claim


def next_block() -> list[str]:
    """The lines of the README's "Next" code block."""
    import re
    front = (ROOT / "README.md").read_text(encoding="utf-8")
    section = front.split("## Next", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```bash\n(.*?)\n```", section, re.S).group(1).splitlines()


def flags_of(command: str) -> set[str]:
    import shlex
    return {word.split("=")[0] for word in shlex.split(command) if word.startswith("--")}


def test_each_next_command_that_needs_llama_cpp_comes_after_its_install_line():
    """A `--generator local` command in the README's Next block follows the install of the
    xllamacpp version the dev requirements pin and of a model the kit can find."""
    import re

    from ragkit import llama
    pin = re.search(r"^xllamacpp==(\S+)", (ROOT / "requirements-dev.txt").read_text(), re.M).group(1)
    lines = next_block()
    local = [i for i, line in enumerate(lines) if "--generator local" in line]
    assert local, "the Next block shows the local generator"
    for i in local:
        before = "\n".join(lines[:i])
        assert f".venv/bin/pip install xllamacpp=={pin}" in before, lines[i]
        assert any(install in before for install in (llama.INSTALL_QWEN, llama.INSTALL_SMOLLM)), lines[i]


def test_each_next_command_says_truly_whether_the_lesson_or_the_kit_runs_it():
    """A command under "# the lesson" uses only the tutorial's flags (so the lesson's functions
    run it); one under "# the kit" uses a flag beyond them (so the kit's CLI does); every flag is
    one the command line accepts."""
    import rag_from_scratch as rag
    from ragkit import cli
    tutorial = {s for a in rag.tutorial_parser()._actions for s in a.option_strings}
    every = {s for a in cli.parser()._actions for s in a.option_strings}
    says, seen = None, 0
    for line in next_block():
        if line.startswith("#"):
            says = "lesson" if line.startswith("# the lesson") else "kit" if line.startswith("# the kit") else says
        elif "rag_from_scratch.py" in line:
            flags = flags_of(line)
            assert flags <= every, (flags - every, line)
            assert says == ("lesson" if flags <= tutorial else "kit"), line
            seen += 1
    assert seen >= 3


def test_the_notebooks_install_line_installs_every_package_it_imports_beyond_the_demos():
    """Each package the notebook's code imports is in the standard library, in requirements.txt,
    or on the README's notebook install line."""
    import ast
    import json
    import re
    import sys
    from importlib.metadata import packages_distributions
    nb = json.loads((ROOT / "notebooks" / "rag_from_scratch.ipynb").read_text(encoding="utf-8"))
    modules = set()
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            for node in ast.walk(ast.parse("".join(cell["source"]))):
                if isinstance(node, ast.Import):
                    modules |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    modules.add(node.module.split(".")[0])
    demo = {re.split(r"[<>=\[ ]", line)[0].strip().lower()
            for line in (ROOT / "requirements.txt").read_text().splitlines() if line and line[0].isalnum()}
    front = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    line = re.search(r"`\.venv/bin/pip install (jupyterlab[^`]*)`", front).group(1).lower().split()
    assert "matplotlib" in modules                       # the figures
    for module in modules - set(sys.stdlib_module_names) - {"rag_from_scratch"}:
        dists = {d.lower() for d in packages_distributions().get(module, [module])}
        assert dists & (demo | set(line)), f"the notebook imports {module}: the README's install line lacks it"


def test_the_lab_gives_one_task5_command_and_it_names_the_model_and_threads_it_was_measured_with():
    """Every `python -m rageval.generation` command the lab pages print (the refusal tuning
    aside) is the same, and parses to SmolLM2 on one thread, so Qwen, when installed, is never
    what a student's table runs."""
    import re
    import shlex

    from rageval import generation
    commands = set()
    for page in sorted((ROOT / "lab").glob("*.md")):
        for command in re.findall(r"python -m rageval\.generation[^`\n]*", page.read_text(encoding="utf-8")):
            if "--tune-refusal" not in command:
                commands.add(command.split("#")[0].strip())
    assert len(commands) == 1, commands
    args = generation.parse_args(shlex.split(commands.pop())[3:])
    assert args.local_model == "smollm2" and args.threads == 1 and "local" in args.generators
