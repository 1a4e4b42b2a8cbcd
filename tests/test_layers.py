"""The modules in layers: every import, at module level or inside a function, goes down a layer;
the lesson's main() handing unknown flags to the kit's CLI is the one door up."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The layers, lowest first. A module may import only modules on lower layers.
LAYERS = {
    # 0: the lesson itself, and what every module shares (ragkit/support.py: text, child
    # processes, deadlines, how a command ends, progress, JSON Lines, storage)
    "rag_from_scratch": 0, "ragkit.support": 0,
    # 1-3: files and models on disk, read: every file type (Markdown too), the local model file
    # and llama.cpp; your documents as chunks; the grounded prompt and its check
    "ragkit.readers": 2, "ragkit.llama": 2,
    "ragkit.documents": 3, "ragkit.chunking": 3, "ragkit.answering": 3,
    # 4-5: the embedding model and the index of a folder; retrieval (its
    # reranker is found and loaded by folder_index's model code), the generators (the extractive one too)
    "ragkit.folder_index": 4,
    "ragkit.retrieval": 5, "ragkit.generators": 5,
    # 6: the command line on top
    "ragkit.cli": 6,
    # 7: what only the evaluation and the companions share
    "rageval.arguments": 7, "rageval.citations": 7,
    # 8-: the scripts: evaluation, the design card's companions, benchmarks, the lab
    "rageval.ir_collection": 8, "rageval.downloads": 8, "rageval.answer_variants": 8,
    "rageval.score_matrices": 8, "rageval.embedding_cache": 8, "rageval.devsets": 9,
    "rageval.ir_scores": 10, "rageval.generation": 10,
    "rageval.devset": 11, "rageval.tuning": 12, "rageval.answer_tuning": 12, "rageval.quantized": 11,
    "rageval.cited_runs": 12,
    "rag_experiments": 11, "rag_vector_db": 11, "verify_bedrock_request": 11,
    "ragbench.ann": 12, "ragbench.walk": 12, "ragbench.learner": 12, "ragbench.markdown": 12, "ragbench.readers": 12, "ragbench.search": 13,
    "lab.keeper": 13, "lab.graded_process": 13,
    "lab.lab_tasks": 14, "lab.check": 14, "lab.starter": 14,
    "lab.handouts.chunk_text": 14, "lab.handouts.build_prompt": 14,
}
HOOK = ("rag_from_scratch", "ragkit.cli")     # the lesson's main() hands unknown flags to the kit
PACKAGES = ("ragkit", "rageval", "ragbench")


def kit_files() -> dict:
    """module name -> path, for every Python file of the kit (tests and lab's tests excepted)."""
    files = {p.stem: p for p in ROOT.glob("*.py")}
    for folder in (*PACKAGES, "lab", "lab/handouts"):
        for p in (ROOT / folder).glob("*.py"):
            if p.stem not in ("__init__", "conftest") and not p.stem.startswith("test_"):
                files[f"{folder.replace('/', '.')}.{p.stem}"] = p
    return files


def imports(path: Path, known: set) -> set:
    """The kit's modules that `path` imports anywhere in it (module level or in a function)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        found |= {name for name in names if name in known}
    return found


def graph() -> dict:
    """module -> the kit's modules it imports."""
    files = kit_files()
    return {name: imports(path, set(files)) - {name} for name, path in files.items()}


def test_every_module_has_a_layer():
    assert sorted(set(kit_files()) - set(LAYERS)) == []


def test_no_module_imports_one_on_its_own_layer_or_above():
    upward = sorted(f"{module} (layer {LAYERS[module]}) imports {target} (layer {LAYERS[target]})"
                    for module, targets in graph().items() for target in targets
                    if LAYERS[target] >= LAYERS[module] and (module, target) != HOOK)
    assert upward == []


def test_the_only_cycle_is_the_cores_hook_into_the_cli():
    edges = graph()
    edges["rag_from_scratch"] = edges["rag_from_scratch"] - {HOOK[1]}
    state = {}

    def visit(module, path):           # depth-first: a module met again on its own path closes a loop
        state[module] = "open"
        for target in sorted(edges[module]):
            if state.get(target) == "open":
                pytest.fail("import cycle: " + " -> ".join(path + [module, target]))
            if target not in state:
                visit(target, path + [module])
        state[module] = "done"
    for module in sorted(edges):
        if module not in state:
            visit(module, [])
    assert HOOK[1] in graph()["rag_from_scratch"]       # the hook itself is still there


def test_the_cli_is_imported_only_by_the_cores_hook():
    assert sorted(m for m, targets in graph().items() if "ragkit.cli" in targets) == ["rag_from_scratch"]
