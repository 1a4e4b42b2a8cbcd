"""The real model, Qwen2.5-Coder-1.5B-Instruct (the --generator local default once its parts are
installed), on a few prompts: what a learner gets from `--generator local` on MkDocs' pages,
streamed and not, and Ctrl-C in the middle of a stream. Slow (a prompt of 4 passages is about
700 tokens: most of a minute on 2 threads here); skipped where the parts are not installed."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HANG_S, press_ctrl_c

from ragkit import llama

ROOT = Path(__file__).resolve().parent.parent
MKDOCS = ROOT / "data" / "devsets" / "mkdocs" / "docs"
# The pages a learner starting MkDocs reads first: a folder indexed in seconds, not 463 chunks
PAGES = ["index.md", "getting-started.md", "user-guide/installation.md", "user-guide/cli.md",
         "user-guide/choosing-your-theme.md", "user-guide/deploying-your-docs.md"]
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(llama.qwen_parts() is None,
                                 reason=f"needs Qwen2.5-Coder-1.5B: `{llama.INSTALL_QWEN}`")]


@pytest.fixture(scope="module")
def ask(tmp_path_factory):
    """`--docs` on a copy of PAGES, asking how to install MkDocs with `--generator local` (on
    the cores no other process is using, as a learner's run), with an --index the module's runs
    share, built here in this process: each run reuses it, as a learner's second question does."""
    import rag_from_scratch as rag
    folder = tmp_path_factory.mktemp("qwen")
    for page in PAGES:
        (folder / "docs" / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(MKDOCS / page, folder / "docs" / page)
    flags = ["--docs", str(folder / "docs"), "--index", str(folder / "mkdocs-index")]
    assert rag.main(flags) == 0
    return ["rag_from_scratch.py", *flags, "--question", "how do i install mkdocs", "--generator", "local"]


def test_local_loads_qwen_by_default_streams_and_shows_a_checked_quote_with_its_source(ask):
    """One streamed answer from 2 passages (a blocking one takes the same path after the model:
    tests/test_generate.py runs it with SmolLM2): it ends cleanly, then the check, then the
    sources of what it kept."""
    done = subprocess.run([sys.executable, *ask, "--stream", "--k", "2"], cwd=ROOT, capture_output=True,
                          text=True, timeout=HANG_S)   # a last resort: it ends on its own
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "loaded Qwen2.5-Coder-1.5B-Instruct Q4_K_M, xllamacpp" in done.stderr
    assert "[stream] first piece after " in done.stderr
    answer = done.stdout.split("== Step 7: the answer (local: Qwen2.5-Coder-1.5B-Instruct Q4_K_M, ")[1]
    streamed, checked = answer.split("-- checked against the passages --\n")
    # the model's reply, as it wrote it (its wording changes with the threads a busy machine leaves)
    assert "pip" in streamed and "mkdocs" in streamed.lower() and "\nQuote: " in streamed
    # then what the check kept: the quotes found in the passage they name, with their sources,
    # or the refusal and why (Qwen often gives a quote the number of another passage)
    sources = [line for line in checked.splitlines() if line.startswith("sources: ")]
    if sources:
        assert all(s.split(": ", 1)[1].split(" > ")[0].endswith(".md") for s in sources)
    else:
        assert checked.startswith("I don't know based on these documents.\n(checked: ")


# reading the prompt; writing the answer (its first "Quote:" line: the prompt, not printed without
# --show-prompt, holds none on screen). Two passages, as above: a prompt read in seconds, not a minute
@pytest.mark.parametrize("at, nth", [("== Step 7: the answer", 1), ("Quote:", 1)])
def test_ctrl_c_in_the_middle_of_a_stream_is_one_line_and_130(ask, at, nth):
    status, output = press_ctrl_c([*ask, "--stream", "--k", "2"], at=at, nth=nth)
    assert status == 130 and output.rstrip().endswith("interrupted")
