"""The lesson module: its functions paste into notebook cells, and the file runs alone."""
import ast
import time

import numpy as np
import pytest
from conftest import ROOT, run_alone

import rag_from_scratch as rag

SOURCE = (ROOT / "rag_from_scratch.py").read_text(encoding="utf-8")
TREE = ast.parse(SOURCE)
CLI_START = next(n.lineno for n in TREE.body
                 if isinstance(n, ast.Assign) and n.targets[0].id == "VACATION_Q")
PIPELINE = [n for n in TREE.body if n.lineno < CLI_START
            and isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.Assign))]
FUNCTIONS = [n for n in PIPELINE if isinstance(n, (ast.FunctionDef, ast.ClassDef))]


def cell(node) -> str:
    """The source of one top-level statement, as a learner copies it into a notebook cell."""
    return ast.get_source_segment(SOURCE, node)


def test_the_pipeline_has_the_tutorials_functions_in_step_order():
    names = [n.name for n in FUNCTIONS]
    order = ["cosine_similarity", "chunk_text", "build_chunks", "Embedder", "build_index",
             "search", "build_prompt", "evaluate_retrieval", "generate_with_bedrock", "rag_answer"]
    assert [n for n in names if n in order] == order


def test_the_banners_carry_the_step_numbers_the_demo_prints():
    banners = [line for line in SOURCE.splitlines() if line.startswith("# == Step")]
    assert [b.split(":")[0] for b in banners] == [f"# == Step {i}" for i in range(8)]


def test_pasted_in_file_order_into_a_fresh_kernel_they_reproduce_the_tfidf_figures():
    kernel = {"np": np}                  # a notebook that ran only `import numpy as np`
    for node in PIPELINE:
        exec(compile(cell(node), f"<cell {getattr(node, 'name', 'data')}>", "exec"), kernel)
    chunks = kernel["build_chunks"](kernel["CORPUS"])
    embedder = kernel["Embedder"]("tfidf")
    index = kernel["build_index"](chunks, embedder)
    m1 = kernel["evaluate_retrieval"](kernel["EVAL_SET"], index, chunks, embedder, k=1)
    m3 = kernel["evaluate_retrieval"](kernel["EVAL_SET"], index, chunks, embedder, k=3)
    assert len(chunks) == 17 and index.shape == (17, 525)
    assert (round(m1["hit_rate"], 2), round(m1["recall"], 2)) == (0.90, 0.85)
    assert (round(m3["hit_rate"], 2), round(m3["recall"], 2)) == (1.00, 1.00)
    prompt = kernel["rag_answer"]("How many vacation days do I get each year?", index, chunks,
                                  embedder, k=2)["prompt"]
    assert prompt.startswith("Context:\n[HR-01] Annual leave policy\n")


@pytest.mark.slow      # a second or more
def test_pasted_in_file_order_the_minilm_path_reproduces_the_tutorial(minilm):
    kernel = {"np": np}
    for node in PIPELINE:
        exec(compile(cell(node), f"<cell {getattr(node, 'name', 'data')}>", "exec"), kernel)
    chunks = kernel["build_chunks"](kernel["CORPUS"])
    embedder = kernel["Embedder"]("minilm")
    index = kernel["build_index"](chunks, embedder)
    top = kernel["search"]("I forgot my password. How do I reset it?", index, chunks, embedder)
    assert index.shape == (17, 384)
    assert [(round(r["score"], 3), r["chunk_id"]) for r in top] == [
        (0.477, "IT-01#0"), (0.273, "IT-02#0"), (0.236, "IT-02#1")]


def global_names(code) -> set:
    """The global names a function's code (and the code nested in it) looks up when it runs."""
    import dis
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            names |= global_names(const)
    return names


@pytest.mark.parametrize("node", FUNCTIONS, ids=lambda n: n.name)
def test_each_function_needs_only_numpy_and_what_stands_above_it(node):
    import builtins
    cell_globals = {"np": np}
    exec(compile(cell(node), node.name, "exec"), cell_globals)      # pasted alone: it defines
    made = cell_globals[node.name]
    codes = ([made.__code__] if callable(made) and hasattr(made, "__code__") else
             [f.__code__ for f in vars(made).values() if hasattr(f, "__code__")])
    above = {n.name if hasattr(n, "name") else n.targets[0].id for n in PIPELINE if n.lineno < node.lineno}
    needed = set().union(*(global_names(c) for c in codes)) - set(dir(builtins)) - {"np", node.name}
    assert sorted(needed - above) == []           # nothing from below it, nothing from elsewhere


def test_the_cli_shows_the_defaults_the_functions_really_use():
    args = rag.tutorial_parser().parse_args([])
    assert (args.chunk_size, args.overlap) == (50, 10) == tuple(rag.defaults(rag.build_chunks).values())
    assert args.k == rag.defaults(rag.search)["k"] == 3
    assert args.backend == rag.defaults(rag.Embedder)["backend"] == "auto"
    assert args.region == rag.defaults(rag.generate_with_bedrock)["region"]


def test_the_core_opens_with_its_docstring_and_numpy_and_never_aliases_itself():
    first = [n for n in TREE.body if not isinstance(n, ast.Expr)][0]     # after the docstring
    assert isinstance(first, ast.Import) and [(a.name, a.asname) for a in first.names] == [("numpy", "np")]
    assert "sys.modules" not in SOURCE and "signal" not in SOURCE and "os._exit" not in SOURCE


@pytest.mark.parametrize("backend, line", [
    ("tfidf", "k=1: hit_rate=0.90  recall=0.85"), ("minilm", "k=1: hit_rate=1.00  recall=0.95")])
@pytest.mark.slow
def test_copied_alone_into_an_empty_folder_the_file_prints_the_tutorials_figures(tmp_path, backend, line):
    out = run_alone(tmp_path, "--backend", backend)
    assert out.returncode == 0, out.stderr
    assert "10 documents -> 17 chunks" in out.stdout and line in out.stdout


def test_copied_alone_generate_with_the_placeholder_stops_before_any_work(tmp_path):
    out = run_alone(tmp_path, "--generate", "--backend", "tfidf")
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr == "error: --generate needs a real --model-id, not the placeholder\n"


def test_copied_alone_a_companion_flag_names_the_file_it_needs(tmp_path):
    out = run_alone(tmp_path, "--docs", "notes/")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == ("error: --docs: flags beyond the tutorial need the kit (the ragkit "
                          "folder beside this file)\n")


def test_question_answers_without_rerunning_the_demo(capsys):
    t0 = time.monotonic()
    assert rag.main(["--backend", "tfidf", "--question", "How much time off do new fathers get?"]) == 0
    elapsed = time.monotonic() - t0
    out = capsys.readouterr().out
    assert "Step 0" not in out and "Step 6" not in out
    assert out.splitlines()[0] == "10 documents -> 17 chunks, backend=tfidf"
    assert "-- the prompt a model would read --" in out and "no answer generated" in out
    print(f"--question with TF-IDF took {elapsed:.2f} s in-process")
