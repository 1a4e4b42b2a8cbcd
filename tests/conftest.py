"""Shared test setup: nothing here may reach the network, and the model loads once."""
import os
import sys
from pathlib import Path

import pytest

# Set before boto3, huggingface_hub or chromadb are imported by any test.
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"   # boto3 must not probe the metadata address
os.environ["ANONYMIZED_TELEMETRY"] = "False"       # chromadb must not phone home
os.environ.setdefault("HF_HUB_OFFLINE", "1")       # the model comes from a local copy only
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import rag_from_scratch as rag  # noqa: E402
from ir_test_collections import DEFAULT_COLLECTION  # noqa: E402

# CISI as the repository carries it (data/cisi); until that copy is merged, the shared one
# beside the checkout. Tests only: the scripts themselves default to data/cisi.
CISI = DEFAULT_COLLECTION          # data/cisi, shipped with the repository


@pytest.fixture(scope="session")
def minilm():
    """The real all-MiniLM-L6-v2 model, loaded once for the whole test run."""
    return rag.Embedder("minilm")


@pytest.fixture(scope="session")
def chunks():
    """The tutorial's 17 chunks (50 words, overlap 10)."""
    return rag.build_chunks(rag.CORPUS, 50, 10)


@pytest.fixture(scope="session")
def minilm_index(minilm, chunks):
    return rag.build_index(chunks, minilm)


@pytest.fixture()
def tfidf_setup(chunks):
    """A fresh TF-IDF embedder fitted on the tutorial chunks, with its index."""
    embedder = rag.Embedder("tfidf")
    return embedder, rag.build_index(chunks, embedder)


@pytest.fixture()
def silent_server():
    """A port on 127.0.0.1 that accepts connections (the kernel's backlog) and never answers."""
    import socket
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    yield listener.getsockname()[1]
    listener.close()


def like_a_terminal():
    """Popen(preexec_fn=...): Ctrl-C reaches the child as it would from a terminal, even when
    the test run itself was started in the background (where SIGINT is ignored and inherited)."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_alone(folder, *args, timeout=120):
    """Run rag_from_scratch.py copied alone into `folder`, as in an empty folder on a machine
    where none of the companion files exists (not even installed with `pip install -e .`)."""
    import shutil
    import subprocess
    shutil.copy(ROOT / "rag_from_scratch.py", folder)
    others = sorted(p.stem for p in ROOT.glob("*.py") if p.stem != "rag_from_scratch")
    code = ("import runpy, sys\n"
            "class NotHere:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            f"        if name.split('.')[0] in {others!r}:\n"
            "            raise ImportError(f'No module named {name!r}')\n"
            "sys.meta_path.insert(0, NotHere())\n"
            "sys.argv = ['rag_from_scratch.py'] + sys.argv[1:]\n"
            "runpy.run_path('rag_from_scratch.py', run_name='__main__')\n")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          cwd=folder, timeout=timeout)
