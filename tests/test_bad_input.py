"""Bad input at every entry point: one line on stderr, a non-zero exit, no traceback, and
nothing under the paths it was given touched. Then Ctrl-C at the collection and experiment
scripts, and the embedding cache's folder and damaged files."""
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, command, entry_points, press_ctrl_c

import rag_experiments as rx
import rag_from_scratch as rag
from ragbench import readers as shapes
from rageval import ir_scores as rc
from ragkit import documents, readers, support

# (script, arguments, a phrase the one error line must hold). In the arguments:
# {missing} a path that does not exist, {foreign} a folder of the user's own files,
# {file} a file of the user's, {docs} a folder of two notes, {cisi} the shipped collection,
# {broken} a collection folder whose relevance file has a grade of inf, {tiny} a collection
# with one judged query (too few for 5-fold cross-validation), {zero_model}, {fifo_model} and
# {cut_model} model folders that cannot be read (see bad_models).
ROWS = [
    # rag_from_scratch.py: the lesson's demo and --docs
    ("rag_from_scratch.py", "--backend tfidf --bogus", "unrecognized arguments"),
    ("rag_from_scratch.py", "--backend tfidf --k abc", "invalid int value"),
    ("rag_from_scratch.py", "--backend tfidf --k 0", "--k must be between 1 and 100, got 0"),
    ("rag_from_scratch.py", "--backend tfidf --docs {docs} --k 100000000000000000000000", "--k must be between 1 and 100"),
    ("rag_from_scratch.py", "--backend tfidf --chunk-size 100000000000000000000000", "--chunk-size must be between 1 and 10,000"),
    ("rag_from_scratch.py", "--backend tfidf --question q --generator local --max-tokens 100000000000000000000000",
     "argument --max-tokens: 100000000000000000000000 is not between 1 and 32,768"),
    ("rag_from_scratch.py", "--backend tfidf --question q --generator local --threads 100000000000000000000000",
     "argument --threads: 100000000000000000000000 is not between 1 and"),
    ("rag_from_scratch.py", "--backend tfidf --chunk-size 10 --overlap 10", "overlap must be"),
    ("rag_from_scratch.py", "--backend nope", "invalid choice"),
    ("rag_from_scratch.py", "--backend tfidf --no-context=yes", "ignored explicit argument"),
    ("rag_from_scratch.py", "--backend tfidf --docs {file}", "is a file: pass the folder"),
    ("rag_from_scratch.py", "--backend tfidf --question q --generate --model-id x --generator extractive",
     "choose one"),
    ("rag_from_scratch.py", "--backend tfidf --question ''", "question is empty"),
    ("rag_from_scratch.py", "--backend tfidf --question q --stream", "add --generator NAME"),
    ("rag_from_scratch.py", "--backend tfidf --question q --cite sentences",
     "unrecognized arguments: --cite sentences"),       # one answer form: the quotes, checked
    ("rag_from_scratch.py", "--backend tfidf --question q --generater local",
     "unrecognized arguments: --generater local (did you mean --generate or --generator?)"),
    ("rag_from_scratch.py", "--backend tfidf --generator local --question " + "w" * 2001,
     "--question is 2,001 characters, more than the 2,000 a question may be"),
    ("rag_from_scratch.py", "--backend tfidf --interactive --question q", "choose one: --question Q"),
    ("rag_from_scratch.py", "--backend tfidf --interactive=yes", "ignored explicit argument"),
    ("rag_from_scratch.py", "--backend tfidf --docs {missing}", "not found"),
    ("rag_from_scratch.py", "--backend tfidf --docs ''", "empty string"),
    ("rag_from_scratch.py", "--backend tfidf --docs {docs} --index {foreign}", "did not create"),
    ("rag_from_scratch.py", "--backend tfidf --docs {docs} --index {file}", "not a folder"),
    ("rag_from_scratch.py", "--backend tfidf --docs {docs} --eval {missing}", "not found"),
    ("rag_from_scratch.py", "--backend tfidf --index {missing}", "work with --docs"),
    ("rag_from_scratch.py", "--backend tfidf --exclude '*.md'", "work with --docs"),
    ("rag_from_scratch.py", "--backend tfidf --docs {docs} --exclude ''", "needs a pattern"),
    ("rag_from_scratch.py", "--backend tfidf --docs {docs} --exclude '*.md'", "no readable .md or .txt"),
    ("rag_from_scratch.py", "--backend tfidf --docs {docs} --max-pages 0", "argument --max-pages: 0 is not between 1 and 100,000"),
    ("rag_from_scratch.py", "--backend tfidf --docs {docs} --max-pages 100000000000000000000000",
     "argument --max-pages: 100000000000000000000000 is not between 1 and 100,000"),
    ("rag_from_scratch.py", "--backend tfidf --docs {docs} --max-pages abc", "invalid int value"),
    ("rag_from_scratch.py", "--backend tfidf --max-pages 5", "work with --docs"),
    ("rag_from_scratch.py", "--backend tfidf --docs {docs} --max-folder-mb 0",
     "argument --max-folder-mb: 0 is not between 1 and 1,000,000"),
    ("rag_from_scratch.py", "--backend tfidf --docs {docs} --max-folder-mb -5",
     "argument --max-folder-mb: -5 is not between 1 and 1,000,000"),
    ("rag_from_scratch.py", "--backend tfidf --docs {docs} --max-folder-mb lots", "invalid int value: 'lots'"),
    ("rag_from_scratch.py", "--backend tfidf --docs {docs} --max-folder-mb 100000000000000000000000",
     "argument --max-folder-mb: 100000000000000000000000 is not between 1 and 1,000,000"),
    ("rag_from_scratch.py", "--backend tfidf --max-folder-mb 50", "work with --docs"),
    ("rag_from_scratch.py", "--backend tfidf --notebook-outputs", "work with --docs"),
    ("rag_from_scratch.py", "--backend minilm --model someone/not-here", "no local copy of someone/not-here"),
    ("rag_from_scratch.py", "--backend minilm --model {missing}", "model folder not found"),
    ("rag_from_scratch.py", "--backend minilm --model {zero_model}", "pytorch_model.bin is not a regular file"),
    ("rag_from_scratch.py", "--backend auto --model {fifo_model} --docs {docs} --index {missing}",
     "pytorch_model.bin is not a regular file"),
    ("rag_from_scratch.py", "--backend minilm --model {cut_model}", "model.safetensors is cut short"),
    # rag_vector_db.py
    ("rag_vector_db.py", "--backend tfidf --bogus", "unrecognized arguments"),
    ("rag_vector_db.py", "--backend tfidf --k 0", "argument --k: 0 is not between 1 and 100"),
    ("rag_vector_db.py", "--backend tfidf --chunk-size 100000000000000000000000", "argument --chunk-size: 100000000000000000000000 is not between 1 and 10,000"),
    ("rag_vector_db.py", "--backend tfidf --overlap -1", "argument --overlap: -1 is not between 0 and 9,999"),
    ("rag_vector_db.py", "--backend tfidf --host localhost --port 100000000000000000000000", "argument --port: 100000000000000000000000 is not between 1 and 65,535"),
    ("rag_vector_db.py", "--backend tfidf --chunk-size 5 --overlap 5", "overlap must be"),
    ("rag_vector_db.py", "--backend tfidf --question ''", "question is empty"),
    ("rag_vector_db.py", "--backend tfidf --persist {missing} --host localhost", "not allowed with"),
    ("rag_vector_db.py", "--backend tfidf --persist {foreign}", "did not create"),
    ("rag_vector_db.py", "--backend tfidf --persist {file}", "{file}"),
    ("rag_vector_db.py", "--backend tfidf --only NOPE", "known document ids"),
    ("rag_vector_db.py", "--backend tfidf --port abc", "invalid int value"),
    # rag_experiments.py
    ("rag_experiments.py", "--bogus", "unrecognized arguments"),
    ("rag_experiments.py", "--only Z", "unknown experiment Z"),
    ("rag_experiments.py", "--only ''", "unknown experiment"),
    ("rag_experiments.py", "--only B --plot {file}", "not a folder"),
    ("rag_experiments.py", "--only B --plot {foreign}", "did not create"),
    ("rag_experiments.py", "--only B --plot /proc/rag-plots", "cannot write to --plot"),
    ("rag_experiments.py", "--only B --plot ''", "empty string"),
    ("rag_experiments.py", "--json", "--json goes with --collection"),
    ("rag_experiments.py", "--cache {missing}", "--cache goes with --collection"),
    ("rag_experiments.py", "--collection {missing}", "collection folder not found"),
    ("rag_experiments.py", "--collection ''", "empty string"),
    ("rag_experiments.py", "--collection {cisi} --only A", "does not go with --collection"),
    ("rag_experiments.py", "--collection {cisi} --plot {missing}", "does not go with --collection"),
    ("rag_experiments.py", "--collection {cisi} --cache {foreign}", "did not create"),
    ("rag_experiments.py", "--collection {cisi} --cache {file}", "not a folder"),
    ("rag_experiments.py", "--collection {cisi} --cache /proc/rag-cache", "cannot write to --cache"),
    ("rag_experiments.py", "--collection {cisi} --grades sideways", "unknown grade reading"),
    ("rag_experiments.py", "--collection {broken}", "not a finite number"),
    ("rag_experiments.py", "--collection {tiny}", "needs at least 2 judged queries"),
    # rageval/ir_scores.py
    ("rageval.ir_scores", "{missing}", "collection folder not found"),
    ("rageval.ir_scores", "''", "empty string"),
    ("rageval.ir_scores", "{foreign}", "no documents file"),
    ("rageval.ir_scores", "{broken}", "not a finite number"),
    ("rageval.ir_scores", "{cisi} --bogus", "unrecognized arguments"),
    ("rageval.ir_scores", "{cisi} --cache {missing}", "--cache goes with --embed"),
    ("rageval.ir_scores", "{cisi} --embed --cache {foreign}", "did not create"),
    ("rageval.ir_scores", "{cisi} --embed --cache {file}", "not a folder"),
    ("rageval.ir_scores", "{cisi} --embed --cache ''", "empty string"),
    # ragbench/search.py
    ("ragbench.search", "--bogus", "unrecognized arguments"),
    ("ragbench.search", "--k abc", "invalid int value"),
    ("ragbench.search", "--k 0 --sizes 1000 --tfidf-chunks 0 --minilm-chunks 0", "--k: 0 is not between 1 and 100"),
    ("ragbench.search", "--sizes 3 --tfidf-chunks 0 --minilm-chunks 0", "must be larger than k"),
    ("ragbench.search", "--sizes 100000000000000000000000", "argument --sizes: 100000000000000000000000 is not between 1 and 100,000,000"),
    ("ragbench.search", "--repeats 100000000000000000000000", "argument --repeats: 100000000000000000000000 is not between 1 and 1,000"),
    ("ragbench.search", "--bandwidth-mb 100000000000000000000000", "argument --bandwidth-mb: 100000000000000000000000 is not between 1 and 65,536"),
    ("ragbench.search", "--tfidf-chunks 100000000000000000000000", "argument --tfidf-chunks: 100000000000000000000000 is not between 0 and"),
    ("ragbench.search", "--minilm-chunks -1", "argument --minilm-chunks: -1 is not between 0 and"),
    ("ragbench.search", "--collection {missing} --sizes --minilm-chunks 0", "not found"),
    ("ragbench.search", "--rescore 0 --sizes 1000", "argument --rescore: 0 is not between 1 and 10,000"),
    ("ragbench.search", "--rescore abc", "invalid int value"),
    ("ragbench.search", "--real-vectors=yes", "ignored explicit argument"),
    ("rageval.quantized", "--rescore 4 0", "argument --rescore: 0 is not between 1 and 10,000"),
    ("rageval.quantized", "--rescore 100000000000000000000000", "argument --rescore: 100000000000000000000000 is not between 1 and 10,000"),
    # rageval/quantized.py
    ("rageval.quantized", "--bogus", "unrecognized arguments"),
    ("rageval.quantized", "--rescore 0", "argument --rescore: 0 is not between 1 and 10,000"),
    ("rageval.quantized", "--rescore abc", "invalid int value"),
    ("rageval.quantized", "--collection {missing}", "collection folder not found"),
    # rageval/generation.py
    ("rageval.answer_tuning", "--sets nope", "unknown development set 'nope'"),
    ("rageval.answer_tuning", "--collect --threads 0", "argument --threads: 0 is not between 1 and"),
    ("rageval.answer_tuning", "--collect --local-model {missing}", "model file not found"),
    ("rageval.answer_tuning", "--plan some", "argument --plan: invalid choice"),
    ("rageval.answer_tuning", "--questions 0", "argument --questions: 0 is not between 1 and"),
    ("rageval.generation", "--bogus", "unrecognized arguments"),
    ("rageval.generation", "--generators nope", "unknown generator 'nope'"),
    ("rageval.generation", "--k 0 --generators extractive", "argument --k: 0 is not between 1 and 100"),
    ("rageval.generation", "--max-tokens 100000000000000000000000", "argument --max-tokens: 100000000000000000000000 is not between 1 and 32,768"),
    ("rageval.generation", "--threads 0", "argument --threads: 0 is not between 1 and"),
    ("rageval.generation", "--serve --port 100000000000000000000000", "argument --port: 100000000000000000000000 is not between 0 and 65,535"),
    ("rageval.generation", "--max-tokens abc", "invalid int value"),
    ("rageval.generation", "--gold {missing} --generators extractive", "gold file not found"),
    ("rageval.generation", "--gold {file} --generators extractive", "line 1"),
    ("rageval.generation", "--docs {docs} --generators extractive", "--docs needs --gold"),
    ("rageval.generation", "--port 5 --generators extractive", "--port goes with --serve"),
    # lab/check.py and lab/lab_tasks.py
    ("lab/check.py", "--bogus", "unrecognized arguments"),
    ("lab/check.py", "--module {missing}", "to grade"),
    ("lab/check.py", "--module ''", "empty"),
    ("lab/check.py", "--time-limit -1", "positive"),
    ("lab/check.py", "--time-limit nan", "positive"),
    ("lab/check.py", "--time-limit inf", "positive"),
    ("lab/check.py", "--memory-mb 99999999999999", "positive"),
    ("lab/check.py", "--memory-mb abc", "invalid int value"),
    ("lab/check.py", "--child abc", "invalid int value"),
    ("lab/check.py", "--module no_such_module", "cannot load the module to grade: ModuleNotFoundError"),
    ("lab/check.py", "--module {typo}", "cannot load the module to grade: SyntaxError"),
    ("lab/check.py", "--module {stopper}",
     "cannot load the module to grade: Stop: no thanks (line 3 of stopper.py"),
    ("lab/lab_tasks.py", "--task 9", "invalid choice"),
    ("lab/lab_tasks.py", "--backend nope", "invalid choice"),
    ("lab/lab_tasks.py", "--bogus", "unrecognized arguments"),
    ("lab/lab_tasks.py", "--backend minilm --model {missing}", "model folder not found"),
    ("lab/lab_tasks.py", "--backend minilm --model {fifo_model}", "is not a regular file"),
    ("rageval.devset", "--backend nope", "invalid choice"),
    ("rageval.cited_runs", "--bogus", "unrecognized arguments"),
    ("rageval.cited_runs", "--questions 0", "argument --questions: 0 is not between 1 and 1,000"),
    ("rageval.cited_runs", "--threads abc", "invalid int value"),
    ("rageval.cited_runs", "--sets nope", "unknown development set 'nope'"),
    ("ragbench.ann", "--bogus", "unrecognized arguments"),
    ("ragbench.walk", "--bogus", "the traced command failed: error: unrecognized arguments: --bogus"),
    ("ragbench.ann", "--sizes 100000000000000000000000", "argument --sizes: 100000000000000000000000 is not between 1 and 10,000,000"),
    ("ragbench.ann", "--ef 0", "argument --ef: 0 is not between 1 and 10,000"),
    ("ragbench.ann", "--k 100000000000000000000000", "argument --k: 100000000000000000000000 is not between 1 and 100"),
    ("ragbench.ann", "--queries 100000000000000000000000", "argument --queries: 100000000000000000000000 is not between 1 and 10,000"),
    ("ragbench.ann", "--noise inf", "argument --noise: inf is not between 0.001 and 10"),
    ("ragbench.learner", "--files 1", "argument --files: 1 is not between 2 and 100,000"),
    ("ragbench.learner", "--files 100000000000000000000000", "argument --files: 100000000000000000000000 is not between 2 and 100,000"),
    ("ragbench.learner", "--repeats 100000000000000000000000", "argument --repeats: 100000000000000000000000 is not between 1 and 1,000"),
    ("ragbench.learner", "--part exits --model llama", "argument --model: invalid choice: 'llama'"),
    ("ragbench.learner", "--abstracts 100000000000000000000000", "argument --abstracts: 100000000000000000000000 is not between 1 and 1,460"),
    ("ragbench.learner", "--part nope", "invalid choice"),
    ("ragbench.learner", "--part stream --max-tokens 1", "argument --max-tokens: 1 is not between 2 and 32,768"),
    ("rageval.devset", "--backend tfidf --docs {missing} --questions {file}", "not found"),
    ("rageval.devset", "--backend tfidf --docs {docs} --questions {missing}", "gold file not found"),
    ("rageval.devset", "--backend tfidf --docs {docs} --questions {file}", "not JSON"),
    ("rageval.devset", "--sets nope", "unknown development set 'nope'"),
    ("rageval.devset", "--docs {docs}", "--docs and --questions go together"),
    ("rageval.devset", "--show-answers many", "invalid int value"),
    ("rageval.devset", "--sample 0", "argument --sample: 0 is not between 1 and"),
    ("rageval.devset", "--show-answers 100000000000000000000000", "argument --show-answers: 100000000000000000000000 is not between 0 and 1,000"),
    ("rageval.downloads", "--bogus", "unrecognized arguments"),
    ("rageval.tuning", "--bogus", "unrecognized arguments"),
    ("rageval.tuning", "--part nope", "invalid choice"),
    ("ragbench.markdown", "--mb 0", "--mb must be between 0 and 20"),
    ("ragbench.markdown", "--mb lots", "invalid float value"),
    ("ragbench.readers", "--bogus", "unrecognized arguments"),
    ("ragbench.readers", "--files 0", "argument --files: 0 is not between 1 and"),
    # verify_bedrock_request.py takes no flags
    ("verify_bedrock_request.py", "--bogus", "unrecognized arguments"),
]


# Rows that take a second or more in this process: they start the grader's child process, or
# import chromadb, llama.cpp's bindings or sentence-transformers before they refuse.
SLOW_ROWS = {("lab/check.py", "--module {missing}"), ("lab/check.py", "--module no_such_module"),
             ("lab/check.py", "--module {typo}"), ("lab/check.py", "--module {stopper}"),
             ("rageval.generation", "--generators nope"),
             ("rag_vector_db.py", "--backend tfidf --persist {foreign}"),
             ("rag_vector_db.py", "--backend tfidf --persist {file}"),
             ("rageval.devset", "--backend tfidf --docs {docs} --questions {missing}"),
             ("rag_from_scratch.py", "--backend minilm --model someone/not-here")}


def params(rows=ROWS):
    """ROWS as pytest params, named by script and arguments."""
    for script, args, expected in rows:
        marks = [pytest.mark.slow] if (script, args) in SLOW_ROWS else []
        yield pytest.param(script, args, expected, id=f"{script} {args}", marks=marks)


# Each script's first row runs as a learner runs it, a process of its own: its exit status is
# what `python` returns. The others call the script's main() in this process (a fresh Python
# for each of 190 rows took minutes): the same parser, the same one error path.
FIRST_ROWS = list({script: (script, args, expected) for script, args, expected in reversed(ROWS)}.values())
OTHER_ROWS = [row for row in ROWS if row not in FIRST_ROWS]


def main_of(script: str):
    """The main() that `python script` runs: a root file, a lab file or a package's module."""
    import importlib
    if script.startswith("lab/"):
        import test_lab
        return {"lab/check.py": test_lab.check, "lab/lab_tasks.py": test_lab.tasks}[script].main
    return importlib.import_module(script.removesuffix(".py")).main


@pytest.fixture(scope="module")
def bad_models(tmp_path_factory):
    """Model folders whose files cannot be a model's: a weight file that is a link to /dev/zero,
    one that is a pipe, a safetensors file cut short (its header promises 1,024 bytes of tensor,
    100 are there). Kept apart from `places`: reading them whole would never end."""
    import json
    import os
    root = tmp_path_factory.mktemp("models")
    for kind in ("zero", "fifo", "cut"):
        (root / kind).mkdir()
        (root / kind / "config.json").write_text("{}")
    (root / "zero" / "pytorch_model.bin").symlink_to("/dev/zero")
    os.mkfifo(root / "fifo" / "pytorch_model.bin")
    header = json.dumps({"w": {"dtype": "F32", "shape": [256], "data_offsets": [0, 1024]}}).encode()
    (root / "cut" / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header
                                                     + bytes(100))
    return {f"{kind}_model": root / kind for kind in ("zero", "fifo", "cut")}


@pytest.fixture()
def places(tmp_path, bad_models):
    """The paths rows may name, made fresh for each row (the bad model folders once)."""
    foreign, docs = tmp_path / "mine", tmp_path / "docs"
    broken, tiny = tmp_path / "broken", tmp_path / "tiny"
    for folder in (foreign, docs, broken, tiny):
        folder.mkdir()
    (foreign / "notes.txt").write_text("my own notes\n")
    (tmp_path / "file.txt").write_text("my own file\n")
    (tmp_path / "typo.py").write_text("def chunk_text(text:\n")     # a learner's typo
    (tmp_path / "stopper.py").write_text(        # a BaseException of its own, not a traceback
        "class Stop(BaseException):\n    pass\nraise Stop('no thanks')\n")
    (docs / "a.md").write_text("# Backups\n\nNightly backups are kept for 35 days.\n")
    (docs / "b.md").write_text("# Printers\n\nThe printer is on the second floor.\n")
    for folder, rel in [(broken, "1 1 1\n1 2 inf\n"), (tiny, "1 1\n1 2\n")]:
        (folder / "T.ALL").write_text(".I 1\n.W\nSolar panels make power.\n"
                                      ".I 2\n.W\nWind turbines turn moving air.\n")
        (folder / "T.QRY").write_text(".I 1\n.W\nsolar power\n")
        (folder / "T.REL").write_text(rel)
    return {"missing": tmp_path / "missing", "foreign": foreign, "file": tmp_path / "file.txt",
            "docs": docs, "broken": broken, "tiny": tiny, "cisi": rc.DEFAULT_COLLECTION,
            "typo": tmp_path / "typo.py", "stopper": tmp_path / "stopper.py", **bad_models}


def snapshot(folder: Path) -> dict:
    """Every file and folder under `folder` with its bytes (None for a folder)."""
    return {str(p.relative_to(folder)): (None if p.is_dir() else p.read_bytes())
            for p in sorted(folder.rglob("*"))}


def argv_of(args: str, places: dict) -> list[str]:
    import shlex
    return shlex.split(args.format(**{key: shlex.quote(str(path)) for key, path in places.items()}))


def check_one_line(status, out, err, expected, places):
    lines = [line for line in err.splitlines() if not line.startswith("waiting for")]
    assert status != 0, out[-500:]
    assert "Traceback" not in err, err[-2000:]
    assert len(lines) == 1, err
    assert expected.format(**{k: str(p) for k, p in places.items()}) in lines[0], lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("script, args, expected", list(params(FIRST_ROWS)))
def test_bad_input_to_a_command_is_one_line_and_a_nonzero_exit_status(script, args, expected,
                                                                        places, tmp_path):
    before = snapshot(tmp_path)
    done = subprocess.run([sys.executable, *command(script), *argv_of(args, places)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    check_one_line(done.returncode, done.stdout, done.stderr, expected, places)
    assert snapshot(tmp_path) == before          # nothing created, changed or deleted


@pytest.mark.parametrize("script, args, expected", list(params(OTHER_ROWS)))
def test_bad_input_is_one_line_a_nonzero_exit_and_nothing_touched(script, args, expected,
                                                                  places, tmp_path, capfd,
                                                                  monkeypatch):
    monkeypatch.chdir(ROOT)                     # where the command runs from
    before = snapshot(tmp_path)
    try:
        status = main_of(script)(argv_of(args, places))
    except SystemExit as stop:                  # argparse's exit, status 2
        status = stop.code
    captured = capfd.readouterr()
    check_one_line(status, captured.out, captured.err, expected, places)
    assert snapshot(tmp_path) == before          # nothing created, changed or deleted


def test_the_table_covers_every_entry_point_with_40_rows_or_more():
    scripts = {script for script, _, _ in ROWS}
    assert {script for script, _, _ in FIRST_ROWS} == scripts          # each one as a command too
    assert SLOW_ROWS <= {(script, args) for script, args, _ in ROWS}
    assert scripts == entry_points() | {"lab/check.py", "lab/lab_tasks.py"}
    assert len(ROWS) >= 40 and len({(s, a) for s, a, _ in ROWS}) == len(ROWS)


@pytest.mark.parametrize("kind, words", [
    ("zero_model", r"pytorch_model.bin is not a regular file \(a pipe, a device or a socket\)"),
    ("fifo_model", r"pytorch_model.bin is not a regular file"),
    ("cut_model", r"model.safetensors is cut short or damaged: its header promises 1,098 bytes, "
                  r"the file has 174; download the model again")])     # 8 + 66 (header) + 1,024 or 100
def test_a_model_folder_is_checked_before_any_file_in_it_is_read_or_hashed(bad_models, kind, words):
    from ragkit import folder_index
    for look in (folder_index.model_folder, lambda folder: folder_index.model_identity("minilm", folder)):
        with pytest.raises(ValueError, match=words):
            look(str(bad_models[kind]))


def test_a_model_folder_bigger_than_a_cpu_model_is_refused(tmp_path, monkeypatch):
    from ragkit import folder_index
    monkeypatch.setattr(folder_index, "MAX_MODEL_BYTES", 1000)
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(bytes(600))
    assert folder_index.model_folder(str(tmp_path)) == str(tmp_path)      # 602 bytes: within
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "extra.bin").write_bytes(bytes(600))     # a folder inside counts
    with pytest.raises(ValueError, match=r"the model folder .* holds more than 9.3\d+e-07 GB"):
        folder_index.model_folder(str(tmp_path))


# ---------------------------------------------------------------------------
# Checks come before slow work
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("args, expected", [
    (["--only", "B", "--plot", "/proc/rag-plots"], "cannot write to --plot"),
    (["--only", "B,Q"], "unknown experiment Q"),
    (["--collection", str(rc.DEFAULT_COLLECTION), "--cache", "/proc/rag-cache"],
     "cannot write to --cache"),
])
def test_experiments_report_a_bad_flag_before_loading_any_model(monkeypatch, capsys, args,
                                                                expected):
    def no_model(*a, **k):
        raise AssertionError("a model was loaded before the flags were checked")
    monkeypatch.setattr(rag, "Embedder", no_model)
    assert rx.main(args) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("error: ")
    assert expected in captured.err and captured.err.count("\n") == 1


def test_plots_go_into_a_folder_the_kit_marks_and_a_rerun_reuses_it(tmp_path):
    folder = tmp_path / "plots"
    assert rx.plot_folder(str(folder), claim=True) == folder
    (folder / "b_chunk_size.png").write_bytes(b"a chart")
    assert rx.plot_folder(str(folder)) == folder                # ours: accepted again



def test_a_plot_folder_holding_a_file_named_like_a_chart_is_not_ours(tmp_path):
    """A user's own d_top_k.png: a name proves nothing, so the folder is refused, untouched."""
    theirs = tmp_path / "charts"
    theirs.mkdir()
    (theirs / "d_top_k.png").write_bytes(b"my own chart")
    for claim in (False, True):
        with pytest.raises(ValueError, match="did not create"):
            rx.plot_folder(str(theirs), claim=claim)
    assert [(p.name, p.read_bytes()) for p in theirs.iterdir()] == [("d_top_k.png", b"my own chart")]


# ---------------------------------------------------------------------------
# Ctrl-C while the collection and experiment scripts start or work
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("script, args, at", [
    ("rag_experiments.py", ["--only", "A"], None),                 # before any import
    ("rag_experiments.py", ["--only", "A"], "importing sentence-transformers"),
    ("rag_experiments.py", ["--only", "A"], "loading all-MiniLM-L6-v2"),
    ("rageval.ir_scores", ["--embed"], None),
    ("rageval.ir_scores", ["--embed"], "importing sentence-transformers"),
])
@pytest.mark.slow
def test_ctrl_c_while_a_script_starts_is_one_line_and_exit_130(script, args, at, tmp_path):
    if "--embed" in args:
        args = args + ["--cache", str(tmp_path / "cache")]
    press_ctrl_c([*command(script), *args], at=at)


@pytest.mark.parametrize("script, args", [
    ("rag_vector_db.py", ["--backend", "tfidf"]), ("ragbench.ann", ["--sizes", "1000"]),
    ("ragbench.search", ["--sizes", "1000"]), ("ragbench.learner", ["--part", "update", "--files", "20"]),
    ("lab/check.py", []), ("lab/lab_tasks.py", ["--backend", "tfidf"]), ("rageval.devset", ["--backend", "tfidf"]),
])
@pytest.mark.slow      # a fresh Python each
def test_ctrl_c_before_the_imports_of_every_other_script_is_one_line_and_exit_130(script, args):
    press_ctrl_c([*command(script), *args])


@pytest.mark.slow      # MiniLM loads in the child
def test_ctrl_c_inside_the_indexing_run_stops_bench_learner_with_exit_130():
    press_ctrl_c(["-m", "ragbench.learner", "--part", "update", "--files", "20"],
                 at="building a MiniLM index")


@pytest.mark.slow
def test_ctrl_c_while_embed_encodes_leaves_no_partial_cache_file(tmp_path):
    cache = tmp_path / "cache"
    press_ctrl_c(["-m", "rageval.ir_scores", "--embed", "--cache", str(cache)],
                 at="encoding 1,458 documents with all-MiniLM-L6-v2")
    assert not list(cache.glob("*.npz")) and not list(cache.glob("*.partial"))


# ---------------------------------------------------------------------------
# The embedding cache: its folder, and damaged files
# ---------------------------------------------------------------------------
TEXTS = ["Solar panels turn light into electricity.", "Wind turbines turn moving air.",
         "Heat pumps move heat indoors."]


def damage_by_truncating(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def damage_by_flipping_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF                       # inside the vectors' bytes
    path.write_bytes(bytes(data))


@pytest.mark.slow
@pytest.mark.parametrize("damage", [damage_by_truncating, damage_by_flipping_a_byte])
def test_a_damaged_cache_file_is_ignored_with_one_line_and_rebuilt(minilm, tmp_path, capsys,
                                                                   damage):
    fresh = rc.EmbeddingCache(tmp_path).encode(minilm, TEXTS)
    path = rc.EmbeddingCache(tmp_path).path_for(minilm)
    damage(path)
    capsys.readouterr()
    cache = rc.EmbeddingCache(tmp_path)
    again = cache.encode(minilm, TEXTS)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"[info] ignoring unreadable cache {path}")
    assert err.rstrip().endswith("rebuilding it") and "Traceback" not in err
    assert (cache.misses, cache.hits) == (3, 0)
    np.testing.assert_allclose(again, fresh, atol=1e-6)
    third = rc.EmbeddingCache(tmp_path)                # the rebuilt file reads cleanly
    np.testing.assert_array_equal(third.encode(minilm, TEXTS), again)
    assert (third.hits, third.misses) == (3, 0) and capsys.readouterr().err == ""


def test_the_cache_refuses_a_folder_of_someone_elses_files(tmp_path):
    (tmp_path / "thesis.txt").write_text("mine")
    with pytest.raises(ValueError, match="did not create"):
        rc.EmbeddingCache(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["thesis.txt"]


def test_a_folder_holding_only_a_file_shaped_like_a_cache_file_is_not_ours(minilm, tmp_path):
    cache = rc.EmbeddingCache(tmp_path)
    cache.encode(minilm, TEXTS[:1])
    (tmp_path / support.MARK_FILE).unlink()         # our file's name and shape, not our mark
    (tmp_path / support.LOCK_FILE).unlink()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(ValueError, match="did not create"):
        rc.EmbeddingCache(tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_repeated_texts_are_encoded_once_and_counted(minilm, tmp_path):
    cache = rc.EmbeddingCache(tmp_path)
    vectors = cache.encode(minilm, TEXTS + TEXTS[:1])
    assert (cache.misses, cache.repeats, cache.hits) == (3, 1, 0)
    np.testing.assert_array_equal(vectors[0], vectors[3])


# == Bad files in --docs ====================================================================
# (file, how it is made, the reason its one [skip] line gives or None where it is read, cut
# where a cap says, and the caps lowered for the row). The shapes are ragbench/readers.py's, at
# sizes that still broke the readers before their caps; docs/reliability.md gives the
# benchmark's full sizes, and tests/test_readers_bounded.py each cap's own test.
FILE_ROWS = [
    ("long-word.pdf", lambda path: shapes.make_long_word_pdf(path, 60_000), None, {}),
    ("outline.pdf", lambda path: shapes.make_outline_pdf(path, 1_000, pages=1), None, {}),
    ("deep-outline.pdf", lambda path: shapes.make_deep_outline_pdf(path, 1_000), None, {}),
    ("flate-bomb.pdf", lambda path: shapes.make_flate_bomb_pdf(path, 6),
     "PDFium stopped on page 1: it needs more than the 64 MB a PDF may use", {"PDF_MEMORY": 64 << 20}),
    ("spaces.html", lambda path: shapes.make_html(path, "<p>pump" + " " * 300_000 + "primed</p>"), None, {}),
    ("space-tabs.html", lambda path: shapes.make_html(path, "<p>pump" + " \t" * 200_000 + "primed</p>"),
     None, {}),
    ("tiny-tags.html", lambda path: shapes.make_html(path, "<i>a</i>" * 400_000),
     "tags, over the 50,000 a page may hold", {}),
    ("random.html", lambda path: shapes.make_random_html(path, 4.5), "MB of markup, over the 4 MB", {}),
    ("comment.html", lambda path: shapes.make_html(path, "<p>The pump.</p><!--" + "pump " * 2_000_000),
     None, {}),
    ("url.html", lambda path: path.write_text("https://example.com/pump-manual"), None, {}),
    ("entities.docx", shapes.make_entity_docx, "its XML declares a DOCTYPE", {}),
    ("empty-paragraphs.docx", lambda path: shapes.make_paragraphs_docx(path, 20, ""),
     "over 10,000 paragraphs", {}),
    ("paragraphs.docx", lambda path: shapes.make_paragraphs_docx(path, 2), "over 10,000 paragraphs", {}),
    ("cells.ipynb", lambda path: shapes.make_cells_notebook(path, 20_000), "over 10,000 cells", {}),
    ("long-line.ipynb", lambda path: shapes.make_long_line_notebook(path, 1), None, {}),
]


@pytest.mark.parametrize("name, make, reason, caps", [
    pytest.param(*row, id=row[0], marks=[pytest.mark.slow] if row[0] == "random.html" else [])  # 4.5 MB
    for row in FILE_ROWS])
def test_a_bad_file_is_one_skip_line_or_read_and_the_note_beside_it_reads(name, make, reason, caps, tmp_path,
                                                                         monkeypatch, capfd, caplog):
    for cap, value in caps.items():
        monkeypatch.setattr(readers, cap, value)
    (tmp_path / "note.md").write_text(shapes.NOTE, encoding="utf-8")
    make(tmp_path / name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                  # a library's warning fails the file
        docs = documents.load_documents(tmp_path)
    said = [line for line in capfd.readouterr().err.splitlines()
            if not line.startswith("reading files: ")]    # the progress line, on a busy machine
    assert all(line.startswith(("[skip] ", "read ", "skipped 1: ")) for line in said), said
    skips = [line for line in said if line.startswith("[skip] ")]
    if reason:
        assert len(skips) == 1 and skips[0].startswith(f"[skip] {name}: ") and reason in skips[0], said
    else:
        assert skips == [], said
    read = sorted(doc["doc_id"].removesuffix(" p. 1") for doc in docs)
    assert read == ["note.md"] if reason else sorted(["note.md", name])
    assert caplog.messages == []                        # no library's log line either
