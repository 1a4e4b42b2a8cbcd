"""The modules in layers: every import, at module level or inside a function, goes down a layer;
the lesson's main() handing unknown flags to the kit's CLI is the one door up. Files and
functions stay within their budgets (700 and 60 lines), and the table of lines per file is
printed, so growth is visible in every run (pytest -s, or -rP)."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The layers, lowest first. A module may import only modules on lower layers.
LAYERS = {
    # 0-1: the bottom layer: the lesson itself, and what every script shares (how a command
    # ends, deadlines, progress, JSON Lines)
    "rag_from_scratch": 0, "ragkit.text": 0, "ragkit.content_words": 0, "ragkit.children": 0,
    "ragkit.deadlines": 0, "ragkit.exits": 1, "ragkit.progress": 1, "ragkit.json_lines": 1,
    # 1-3: storage and files on disk: saved indexes, embedding models, model files, readers;
    # the grounded prompt and its quote check
    "ragkit.storage": 1, "ragkit.markdown": 1,
    "ragkit.embeddings": 2, "ragkit.readers": 2, "ragkit.pdf": 3, "ragkit.saved_index": 2, "ragkit.model_files": 2,
    "ragkit.grounded": 2, "ragkit.citations": 3,
    # 4-5: your own files as chunks; the shared flags; what the kit shows of an answer
    "ragkit.documents": 4, "ragkit.chunking": 4, "ragkit.arguments": 4, "ragkit.reply_cleaning": 4,
    "ragkit.answering": 4,
    "ragkit.eval_file": 5, "ragkit.folder_index": 5, "ragkit.retrieval": 5, "ragkit.extractive": 5,
    "ragkit.bedrock": 5, "ragkit.chat_http": 5, "ragkit.llama": 5,
    # 6-7: the generators and the retrieval flags, then the command line on top
    "ragkit.llm": 6, "ragkit.retrieval_flags": 6,
    "ragkit.cli": 7,
    # 8-: the scripts: evaluation, the design card's companions, benchmarks, the lab
    "rageval.ir_collection": 8, "rageval.downloads": 8, "rageval.answer_variants": 8,
    "rageval.score_matrices": 8, "rageval.embedding_cache": 8, "rageval.devsets": 9,
    "rageval.ir_scores": 10, "rageval.generation": 10,
    "rageval.devset": 11, "rageval.tuning": 12, "rageval.answer_tuning": 12, "rageval.quantized": 11,
    "rageval.cited_runs": 12,
    "rag_experiments": 11, "rag_vector_db": 11, "verify_bedrock_request": 11,
    "ragbench.ann": 12, "ragbench.learner": 12, "ragbench.markdown": 12, "ragbench.readers": 12, "ragbench.search": 13,
    "lab.keeper": 13, "lab.graded_process": 13,
    "lab.lab_tasks": 14, "lab.check": 14, "lab.starter": 14,
    "lab.handouts.chunk_text": 14, "lab.handouts.build_prompt": 14,
}
HOOK = ("rag_from_scratch", "ragkit.cli")     # the lesson's main() hands unknown flags to the kit
PACKAGES = ("ragkit", "rageval", "ragbench")
FILE_LINES, FUNCTION_LINES = 700, 60
KIT_MODULE_LINES = 400   # a module of ragkit has one job: a reader takes it in at one sitting


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


def test_files_and_functions_stay_within_their_budgets():
    everything = sorted([*kit_files().values(), *ROOT.glob("tests/*.py"), *ROOT.glob("lab/*.py")])
    rows, over = [], []
    for path in dict.fromkeys(everything):
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        rows.append(f"{lines:6d}  {path.relative_to(ROOT)}")
        if lines > (KIT_MODULE_LINES if path.parent.name == "ragkit" else FILE_LINES):
            over.append(f"{path.relative_to(ROOT)}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > FUNCTION_LINES:
                    over.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {length} lines")
    print("\nlines per file\n" + "\n".join(rows))
    assert over == []


LINE_CHARACTERS = 110     # a line reads whole beside the tutorial, in a notebook cell or a split pane


def test_no_line_of_the_kit_or_the_lab_is_wider_than_the_budget():
    wide = [f"{path.relative_to(ROOT)}:{n}"
            for path in sorted({*kit_files().values(), *ROOT.glob("lab/*.py")})
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if len(line) > LINE_CHARACTERS]
    assert wide == []
