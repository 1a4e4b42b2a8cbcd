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
