"""The notebook runs top to bottom in a real Jupyter kernel and shows the demo's figures."""
import json
from pathlib import Path

import pytest

import rag_from_scratch as rag

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "rag_from_scratch.ipynb"


def run_in_kernel(nb, home):
    """Run every cell of nb with nbclient in an ipykernel of this interpreter; return nb."""
    nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed "
                                   "(pip install -r requirements-dev.txt)")
    with pytest.MonkeyPatch.context() as mp:
        # Only this environment's "python3" kernel and no personal IPython start-up files;
        # the inline backend draws figures into the outputs and opens no window.
        mp.setenv("JUPYTER_DATA_DIR", str(home / "data"))
        mp.setenv("JUPYTER_CONFIG_DIR", str(home / "config"))
        mp.setenv("JUPYTER_RUNTIME_DIR", str(home / "runtime"))
        mp.setenv("IPYTHONDIR", str(home / "ipython"))
        mp.delenv("JUPYTER_PATH", raising=False)
        mp.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
        client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                         resources={"metadata": {"path": str(NOTEBOOK.parent)}})
        client.execute()
    return nb


def read_notebook():
    nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed "
                                   "(pip install -r requirements-dev.txt)")
    return nbformat.read(NOTEBOOK, as_version=4)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The notebook as shipped (TF-IDF), after every cell ran."""
    return run_in_kernel(read_notebook(), tmp_path_factory.mktemp("jupyter"))


def stderr_of(nb):
    return "".join(o["text"] for o in outputs(nb, "stream") if o["name"] == "stderr")


def outputs(nb, kind):
    """Every output of one type ('stream', 'display_data', 'error', ...), in cell order."""
    return [o for cell in nb.cells for o in cell.get("outputs", []) if o["output_type"] == kind]


def test_the_committed_notebook_has_no_outputs():
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(c["outputs"] == [] and c["execution_count"] is None for c in code)
    assert nb["metadata"]["kernelspec"]["name"] == "python3"


@pytest.mark.slow
def test_the_notebook_prints_the_demos_tfidf_figures(executed):
    text = "".join(o["text"] for o in outputs(executed, "stream") if o["name"] == "stdout")
    assert "backend tfidf" in text
    assert "cos(q,d1)=0.889  cos(q,d2)=0.667" in text
    assert "10 documents -> 17 chunks (chunk_size=50 words, overlap=10)" in text
    assert "backend=tfidf  index shape=(17, 525)  first row norm=1.000" in text
    assert "  0.313  IT-01#0   Passwords and account security" in text
    assert "MISS want=['HR-04'] got=[IT-02]  How much time off do new fathers get?" in text
    assert "k=1: hit_rate=0.90  recall=0.85  precision=0.90  mrr=0.90" in text
    assert "k=3: hit_rate=1.00  recall=1.00" in text
    assert "chunk_size= 12  overlap= 2  chunks= 58  hit@1=0.70" in text
    assert "chunk_size= 50  overlap=10  chunks= 17  hit@1=0.90" in text
    assert "\n  0.000  " not in text and "more at 0.000: they share no word" in text   # as the CLI


def test_the_notebooks_legend_keeps_whole_words():
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    cell = next("".join(c["source"]) for c in nb["cells"] if "ax.legend" in "".join(c["source"]))
    assert "textwrap.shorten(" in cell and '["question"][:' not in cell
    import textwrap
    labels = [textwrap.shorten(q["question"], 45, placeholder=" ...") for q in rag.EVAL_SET[:5]]
    assert all(label.split(" ...")[0] in q["question"] for label, q in zip(labels, rag.EVAL_SET))
    assert "How many vacation days do I get each yea" not in labels


@pytest.mark.slow      # a second or more
def test_the_notebook_draws_three_pictures_and_writes_no_error_or_warning(executed):
    assert outputs(executed, "error") == []
    pictures = [o for o in outputs(executed, "display_data") if "image/png" in o["data"]]
    assert len(pictures) == 3
    assert stderr_of(executed) == ""


@pytest.mark.slow
def test_switching_to_minilm_raises_no_iprogress_warning(tmp_path):
    # sentence-transformers imports tqdm.autonotebook, which warns in a kernel without
    # ipywidgets; the notebook's first cell settles that before the model is loaded.
    nbformat = pytest.importorskip("nbformat")
    nb = read_notebook()
    setup = nb.cells[1]
    assert setup.source.startswith('BACKEND = "tfidf"   # or "minilm"')
    setup.source = setup.source.replace('BACKEND = "tfidf"', 'BACKEND = "minilm"', 1)
    nb.cells = [setup, nbformat.v4.new_code_cell("import sentence_transformers\nprint('loaded')")]
    run_in_kernel(nb, tmp_path)
    assert "backend minilm" in nb.cells[0].outputs[0]["text"]
    assert nb.cells[1].outputs[0]["text"] == "loaded\n"
    assert outputs(nb, "error") == [] and stderr_of(nb) == ""
