"""
check.py: grade the five functions of lab/starter.py, with a hint for each one that fails.

    python lab/check.py                              # grade lab/starter.py
    python lab/check.py --module my_copy.py          # grade another file
    python lab/check.py --module rag_from_scratch    # grade the reference: all PASS
    LAB_MODULE=rag_from_scratch python -m pytest lab # the same checks through pytest

Every check compares your function with a trusted reference: values worked out by hand,
the tutorial's printed figures, NumPy and scikit-learn. It needs no torch and no network
(search and evaluation are checked with TF-IDF vectors and a tiny hand-made embedder).

Your code runs in a child process, each function with a time limit (--time-limit, 10 s) and,
on Linux, a memory limit (--memory-mb, 1024): sys.exit(), an endless loop, a list that grows
without end or a crash is that function's FAIL with a hint. Exit status 0 only when all five
were graded and pass, 1 otherwise, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib
import importlib.util
import io
import json
import os
import sys

if __name__ == "__main__":      # Ctrl-C while the imports below load: held until run_cli
    import signal
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})

import textwrap  # noqa: E402
from pathlib import Path

import numpy as np

LAB = Path(__file__).resolve().parent
ROOT = LAB.parent
sys.path.insert(0, str(ROOT))            # the given parts come from rag_from_scratch.py

import rag_from_scratch as rag  # noqa: E402
from rag_cli import OneLineParser, leave, one_line, run_cli  # noqa: E402

STARTER = LAB / "starter.py"
FUNCTIONS = ("chunk_text", "cosine_similarity", "search", "build_prompt", "evaluate_retrieval")

# One hint per function, in words: what to do, never the code.
HINTS = {
    "chunk_text": "split the text on whitespace into words; the window takes chunk_size words "
                  "and moves forward by chunk_size - overlap words each time; stop after the "
                  "first window that reaches the last word, so no chunk is a tail of the one "
                  "before; check the arguments first and raise ValueError for impossible ones.",
    "cosine_similarity": "divide the dot product by the product of the two lengths (L2 norms), "
                         "so only the angle counts; turn lists into arrays first and return a "
                         "plain float.",
    "search": "embed the question (encode takes a list of texts), score every chunk at once "
              "with one matrix-vector product (rows are unit length, so that is the cosine), "
              "keep the k highest scores best first, and return new dicts with the chunk's "
              "fields plus a float 'score'; reject an empty question and a k outside "
              "1..len(chunks) with ValueError.",
    "build_prompt": "'Context:' on the first line, then one block per retrieved chunk: "
                    "'[doc_id] title' on one line and the chunk text on the next, blocks "
                    "separated by an empty line; after the last block an empty line, "
                    "'Question: <question>' and 'Answer:' (the docstring shows it).",
    "evaluate_retrieval": "for each question call your search, take the doc_id of each result, "
                          "then hit = any relevant doc found, recall = share of the relevant "
                          "docs found, reciprocal rank = 1/position of the first relevant result "
                          "(0 when none); average each over ALL questions, misses included.",
}


# ---------------------------------------------------------------------------
# Loading the module to grade
# ---------------------------------------------------------------------------
def module_spec(spec: str | None = None) -> str:
    """The module to grade as a child process imports it: an absolute .py path or a module name."""
    spec = spec or os.environ.get("LAB_MODULE") or str(STARTER)
    if not spec.endswith(".py"):
        return spec
    path = Path(spec).expanduser()
    if not path.is_file() and (ROOT / spec).is_file():
        path = ROOT / spec
    if not path.is_file():
        raise FileNotFoundError(f"no file {spec} to grade: give a .py path or a module name")
    return str(path.resolve())


def load_module(spec: str | None = None):
    """Import the module to grade: a .py path, or a module name such as rag_from_scratch."""
    spec = module_spec(spec)
    if not spec.endswith(".py"):
        return importlib.import_module(spec)
    path = Path(spec)
    module_spec_ = importlib.util.spec_from_file_location(f"graded_{path.stem}", path)
    module = importlib.util.module_from_spec(module_spec_)
    module_spec_.loader.exec_module(module)
    return module


def describe(spec: str) -> str:
    """The graded module as a learner would name it: a path relative to the repo, or its name."""
    if not spec.endswith(".py"):
        return spec
    path = Path(spec).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


# ---------------------------------------------------------------------------
# Shared fixtures: the tutorial's TF-IDF index, and a toy embedder worked out by hand
# ---------------------------------------------------------------------------
def tfidf_setup():
    """Tutorial chunks (50 words, overlap 10), a fitted TF-IDF embedder and its index."""
    chunks = rag.build_chunks(rag.CORPUS, 50, 10)
    embedder = rag.Embedder("tfidf")
    return chunks, embedder, rag.build_index(chunks, embedder)


class ToyEmbedder:
    """Maps a few known texts to hand-picked vectors, so every score is easy to follow."""

    backend = "toy"

    def __init__(self, vectors: dict[str, list[float]]):
        self.vectors = vectors

    def encode(self, texts: list[str], sparse: bool = False) -> np.ndarray:
        """One unit-length row per text."""
        unknown = [t for t in texts if t not in self.vectors]
        if unknown:
            raise ValueError(f"the toy embedder does not know {unknown[0]!r}: pass the text itself")
        rows = np.array([self.vectors[t] for t in texts], dtype=float)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


# Four one-chunk documents A-D whose vectors are the axes, so a question's score for chunk X
# is just its weight on axis X: the ranking can be read straight off the weights.
TOY_CHUNKS = [{"chunk_id": f"{d}#0", "doc_id": d, "title": f"Toy doc {d}", "text": f"toy text {d}"}
              for d in "ABCD"]
TOY_QUESTIONS = [   # question, weights on A B C D -> ranking, relevant docs -> their ranks
    ("toy q1: A ranks first", [4, 3, 2, 1], {"A"}),        # A B C D: A at 1
    ("toy q2: A ranks second", [3, 4, 2, 1], {"A"}),       # B A C D: A at 2
    ("toy q3: A ranks last", [1, 2, 3, 4], {"A"}),         # D C B A: A at 4
    ("toy q4: C first, A third", [2, 1, 4, 3], {"A", "C"}),  # C D A B: C at 1, A at 3
]
# Worked out by hand from the ranks above (hit, recall, reciprocal rank averaged over 4):
#   k=1: hit (1+0+0+1)/4=0.50  recall (1+0+0+.5)/4=0.375  MRR (1+0+0+1)/4=0.50
#   k=2: hit 3/4=0.75          recall (1+1+0+.5)/4=0.625  MRR (1+.5+0+1)/4=0.625
#   k=3: hit 0.75              recall (1+1+0+1)/4=0.75    MRR 0.625
#   k=4: hit 1.00              recall 1.00                MRR (1+.5+.25+1)/4=0.6875
TOY_EXPECTED = {1: (0.5, 0.375, 0.5), 2: (0.75, 0.625, 0.625),
                3: (0.75, 0.75, 0.625), 4: (1.0, 1.0, 0.6875)}


def toy_setup():
    """The toy chunks, embedder, dense index and labelled questions."""
    vectors = {c["text"]: np.eye(4)[i].tolist() for i, c in enumerate(TOY_CHUNKS)}
    vectors.update({q: w for q, w, _ in TOY_QUESTIONS})
    embedder = ToyEmbedder(vectors)
    index = embedder.encode([c["text"] for c in TOY_CHUNKS])
    eval_set = [{"question": q, "relevant": set(rel)} for q, _, rel in TOY_QUESTIONS]
    return copy.deepcopy(TOY_CHUNKS), embedder, index, eval_set


def expect_value_error(call, description: str) -> None:
    """Fail unless call() raises ValueError."""
    try:
        call()
    except ValueError:
        return
    except NotImplementedError:
        raise
    except Exception as exc:
        raise AssertionError(f"{description} raised {type(exc).__name__}, expected ValueError")
    raise AssertionError(f"{description} returned normally, expected ValueError")


def close(a, b, tol: float = 1e-6) -> bool:
    """True if two numbers agree within tol."""
    return abs(float(a) - float(b)) <= tol


# ---------------------------------------------------------------------------
# The checks: each raises AssertionError with a sentence saying what went wrong
# ---------------------------------------------------------------------------
def check_chunk_text(mod) -> None:
    """Hand-made cases, the tutorial's chunk counts, and the overlap property on every document."""
    f = mod.chunk_text
    ten = " ".join(f"w{i}" for i in range(1, 11))
    cases = [   # (text, chunk_size, overlap) -> expected, all worked out by hand
        (("a b c d e f g", 4, 1), ["a b c d", "d e f g"]),
        (("a b c d e f", 3, 0), ["a b c", "d e f"]),
        ((ten, 4, 2), ["w1 w2 w3 w4", "w3 w4 w5 w6", "w5 w6 w7 w8", "w7 w8 w9 w10"]),
        (("a b c", 10, 2), ["a b c"]),
        (("one  two\n three\t", 5, 0), ["one two three"]),
        (("", 5, 1), []),
    ]
    for args, expected in cases:
        got = f(*args)
        assert got == expected, f"chunk_text{args!r} returned {got!r}, expected {expected!r}"

    counts = {(50, 10): 17, (12, 0): 49, (12, 4): 69}     # the tutorial's printed figures
    for (size, overlap), expected in counts.items():
        got = sum(len(f(doc["text"], size, overlap)) for doc in rag.CORPUS)
        assert got == expected, (f"the tutorial corpus at chunk_size={size}, overlap={overlap} "
                                 f"gives {expected} chunks, yours gives {got}")

    for doc in rag.CORPUS:
        words, pieces = doc["text"].split(), [p.split() for p in f(doc["text"], 50, 10)]
        for i, (this, after) in enumerate(zip(pieces, pieces[1:])):
            assert len(this) == 50, f"{doc['doc_id']} chunk {i} has {len(this)} words, expected 50"
            assert this[-10:] == after[:10], (f"{doc['doc_id']}: chunk {i + 1} should start with "
                                              f"the last 10 words of chunk {i}")
        rebuilt = pieces[0] + [w for p in pieces[1:] for w in p[10:]]
        assert rebuilt == words, f"{doc['doc_id']}: the chunks do not cover the text exactly once"

    expect_value_error(lambda: f("a b c", 0, 0), "chunk_text('a b c', 0, 0)")
    expect_value_error(lambda: f("a b c", 3, -1), "chunk_text('a b c', 3, -1)")
    expect_value_error(lambda: f("a b c", 3, 3), "chunk_text('a b c', 3, 3)")


def check_cosine_similarity(mod) -> None:
    """Hand-computed cosines, scale invariance, and scikit-learn on random vectors."""
    f = mod.cosine_similarity
    cases = [([1, 2, 2], [2, 1, 2], 8 / 9),        # the tutorial's hand example
             ([1, 2, 2], [0, 6, 0], 12 / 18),       # bigger dot product, wider angle
             ([3, 4], [4, 3], 24 / 25),
             ([1, 0], [0, 1], 0.0),
             ([1, 0], [-2, 0], -1.0)]
    for a, b, expected in cases:
        got = f(a, b)
        assert isinstance(got, float), f"cosine_similarity returned {type(got).__name__}, not float"
        assert close(got, expected), f"cosine_similarity({a}, {b}) = {got!r}, expected {expected:.6f}"
    a = np.array([0.2, -1.0, 3.0])
    assert close(f(a, 10 * a), 1.0), ("a vector and 10 times that vector point the same way: "
                                       "cosine 1.0, yours is not (is it the raw dot product?)")
    from sklearn.metrics.pairwise import cosine_similarity as reference
    rng = np.random.default_rng(7)
    for _ in range(5):
        a, b = rng.normal(size=384), rng.normal(size=384)
        expected = reference([a], [b])[0, 0]
        assert close(f(a, b), expected), (f"on random 384-number vectors yours gives {f(a, b):.6f}, "
                                           f"scikit-learn gives {expected:.6f}")


def check_search(mod) -> None:
    """Scores and order against scikit-learn's cosine on TF-IDF, the toy index, and bad input."""
    from sklearn.metrics.pairwise import cosine_similarity as reference
    chunks, embedder, index = tfidf_setup()
    pristine = copy.deepcopy(chunks)
    chunk_vectors = embedder.encode([c["text"] for c in chunks])
    questions = ["I forgot my password. How do I reset it?",
                 "How much time off do new fathers get?",
                 "How do I book flights for a client visit and claim the costs afterwards?"]
    for question in questions:
        expected = reference(chunk_vectors, embedder.encode([question]))[:, 0]
        best = np.sort(expected)[::-1]
        for k in (1, 3, 5):
            results = mod.search(question, index, chunks, embedder, k)
            assert isinstance(results, list) and len(results) == k, (
                f"search(..., k={k}) returned {len(results)} results, expected a list of {k}")
            for r in results:
                missing = {"chunk_id", "doc_id", "title", "text", "score"} - set(r)
                assert not missing, f"a result lacks {sorted(missing)}: keep the chunk's fields"
                assert isinstance(r["score"], float), "each 'score' must be a plain float"
                i = next(j for j, c in enumerate(chunks) if c["chunk_id"] == r["chunk_id"])
                assert close(r["score"], expected[i], 1e-5), (
                    f"{r['chunk_id']} scored {r['score']:.4f}, its cosine with the question "
                    f"is {expected[i]:.4f}")
            scores = [r["score"] for r in results]
            assert np.allclose(scores, best[:k], atol=1e-5), (
                f"for {question!r} at k={k} you returned scores {np.round(scores, 3).tolist()}, "
                f"the best {k} are {np.round(best[:k], 3).tolist()} (highest first)")
    fathers = mod.search(questions[1], index, chunks, embedder, 2)
    got = [(r["chunk_id"], round(r["score"], 3)) for r in fathers]
    assert got == [("IT-02#0", 0.087), ("HR-04#0", 0.070)], (
        f"TF-IDF for the fathers question should give IT-02#0 0.087 then HR-04#0 0.070 "
        f"(the tutorial's figures), yours gives {got}")
    assert chunks == pristine, "search changed the chunk dicts: return new dicts instead"

    toy_chunks, toy, toy_index, _ = toy_setup()
    ranked = [r["doc_id"] for r in mod.search("toy q4: C first, A third", toy_index, toy_chunks, toy, 4)]
    assert ranked == ["C", "D", "A", "B"], (f"on a dense NumPy index the order should be "
                                            f"C, D, A, B; yours is {', '.join(ranked)}")

    expect_value_error(lambda: mod.search("   ", index, chunks, embedder, 3), "search('   ', ...)")
    expect_value_error(lambda: mod.search(questions[0], index, chunks, embedder, 0),
                       "search(..., k=0)")
    expect_value_error(lambda: mod.search(questions[0], index, chunks, embedder, len(chunks) + 1),
                       f"search(..., k={len(chunks) + 1}) with {len(chunks)} chunks")


def check_build_prompt(mod) -> None:
    """The exact prompt layout for one and for two retrieved chunks, written out by hand."""
    retrieved = [
        {"chunk_id": "HR-01#0", "doc_id": "HR-01", "title": "Annual leave policy",
         "text": "You get 24 days.", "score": 0.61},
        {"chunk_id": "FIN-02#0", "doc_id": "FIN-02", "title": "Business travel policy",
         "text": "Book travel 7 days ahead.", "score": 0.33},
    ]
    question = "How many days of leave do I get?"
    expected_two = ("Context:\n"
                    "[HR-01] Annual leave policy\nYou get 24 days.\n\n"
                    "[FIN-02] Business travel policy\nBook travel 7 days ahead.\n\n"
                    f"Question: {question}\nAnswer:")
    expected_one = ("Context:\n[HR-01] Annual leave policy\nYou get 24 days.\n\n"
                    f"Question: {question}\nAnswer:")
    for chosen, expected in ((retrieved, expected_two), (retrieved[:1], expected_one)):
        got = mod.build_prompt(question, chosen)
        if got != expected:
            want_lines, got_lines = expected.split("\n"), str(got).split("\n")
            n = next((i for i, (w, g) in enumerate(zip(want_lines, got_lines)) if w != g),
                     min(len(want_lines), len(got_lines)))
            want = want_lines[n] if n < len(want_lines) else "(nothing)"
            have = got_lines[n] if n < len(got_lines) else "(nothing)"
            raise AssertionError(f"with {len(chosen)} chunk(s), line {n + 1} of the prompt should "
                                 f"be {want!r} but is {have!r}")


def check_evaluate_retrieval(mod) -> None:
    """Hand-computed hit rate, recall and MRR on the toy set, then the tutorial's TF-IDF figures."""
    chunks, toy, index, eval_set = toy_setup()
    for k, (hit, recall, mrr) in TOY_EXPECTED.items():
        quiet = io.StringIO()
        with contextlib.redirect_stdout(quiet):
            m = mod.evaluate_retrieval(eval_set, index, chunks, toy, k=k, verbose=False)
        missing = {"k", "hit_rate", "recall", "mrr"} - set(m)
        assert not missing, f"the result lacks {sorted(missing)}"
        assert m["k"] == k, f"the result says k={m['k']}, expected {k}"
        for key, want in (("hit_rate", hit), ("recall", recall), ("mrr", mrr)):
            assert isinstance(m[key], float), f"{key} must be a plain float"
            assert close(m[key], want), (f"on the 4 toy questions at k={k}, {key} should be "
                                         f"{want} (worked out by hand in check.py), yours is "
                                         f"{m[key]:.4f}")
        assert not quiet.getvalue(), "verbose=False should print nothing"

    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        mod.evaluate_retrieval(eval_set, index, chunks, toy, k=1, verbose=True)
    lines = [line.strip() for line in shown.getvalue().splitlines() if line.strip()]
    assert len(lines) == len(eval_set), (f"verbose=True should print one line per question "
                                         f"({len(eval_set)}), yours printed {len(lines)}")
    for line, item, expected in zip(lines, eval_set, ("HIT", "MISS", "MISS", "HIT")):
        assert line.split()[0] == expected and item["question"] in line, (
            f"the verbose line for {item['question']!r} should start with {expected} and show "
            f"the question; yours is {line!r}")

    chunks, embedder, index = tfidf_setup()
    tutorial = {1: (0.90, 0.85, 0.90), 3: (1.00, 1.00, 0.95)}   # TF-IDF, tutorial corpus
    with contextlib.redirect_stdout(io.StringIO()):
        for k, (hit, recall, mrr) in tutorial.items():
            m = mod.evaluate_retrieval(rag.EVAL_SET, index, chunks, embedder, k=k)
            got = (round(m["hit_rate"], 2), round(m["recall"], 2), round(m["mrr"], 2))
            assert got == (hit, recall, mrr), (f"TF-IDF on the tutorial set at k={k} should give "
                                               f"hit_rate, recall, mrr = {(hit, recall, mrr)}, "
                                               f"yours gives {got}")


# The lab functions each graded function calls: it is graded with the reference versions of
# these, so a FAIL names the function that is wrong (a buggy search must not fail
# evaluate_retrieval, which only calls it).
CALLS = {"evaluate_retrieval": ("search",), "search": ("cosine_similarity",)}


@contextlib.contextmanager
def with_reference_calls(module, name: str):
    """While `name` is graded, the functions it calls are the reference ones (then put back)."""
    saved = {f: getattr(module, f) for f in CALLS.get(name, ()) if hasattr(module, f)}
    for f in CALLS.get(name, ()):
        setattr(module, f, getattr(rag, f))
    try:
        yield
    finally:
        for f in CALLS.get(name, ()):
            if f in saved:
                setattr(module, f, saved[f])


CHECKS = {"chunk_text": check_chunk_text, "cosine_similarity": check_cosine_similarity,
          "search": check_search, "build_prompt": check_build_prompt,
          "evaluate_retrieval": check_evaluate_retrieval}


# ---------------------------------------------------------------------------
# Running the checks
# ---------------------------------------------------------------------------
def todo_origin(exc: BaseException) -> str:
    """Name of the function whose body raised NotImplementedError (the innermost frame)."""
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_name


def run_check(name: str, module) -> str | None:
    """None if the function passes, else why it fails followed by its hint."""
    if not callable(getattr(module, name, None)):
        reason = f"the module has no function {name}"
    else:
        try:
            with with_reference_calls(module, name):
                CHECKS[name](module)
            return None
        except NotImplementedError as exc:
            origin = todo_origin(exc)
            reason = ("still a TODO (it raises NotImplementedError)" if origin == name else
                      f"it calls {origin}(), which is still a TODO: finish that first")
        except AssertionError as exc:
            reason = str(exc)
        except SystemExit as exc:                    # sys.exit() would end the grader itself
            reason = (f"it calls sys.exit({exc.code!r}), which ends the whole program: "
                      f"return the result instead")
        except MemoryError:
            reason = ("it ran out of memory: does every loop move forward and stop? "
                      "(print the loop variable for a small input)")
        except Exception as exc:                     # a crash is a FAIL with its message
            reason = f"it raised {type(exc).__name__}: {exc}"
    return f"{reason}\nhint: {HINTS[name]}"


# ---------------------------------------------------------------------------
# Isolation: the graded code runs in a child process with a time and a memory limit, so an
# exit, an endless loop, a runaway list or a crash is that function's FAIL, never the grader's.
# The memory limit (RLIMIT_AS) is Linux only; on Windows and macOS only the time limit applies.
# ---------------------------------------------------------------------------
TIME_LIMIT_S = 10.0          # per graded function; the reference needs well under 1 s each
MEMORY_LIMIT_MB = 1024       # on top of what the grader itself uses
START_LIMIT_S = 120.0        # the child's own imports (NumPy, scikit-learn) on a busy laptop


def limit_memory(megabytes: int) -> bool:
    """Cap this process's address space at its current size plus `megabytes` (Linux only)."""
    statm = Path("/proc/self/statm")
    try:
        import resource
    except ImportError:                              # Windows: no resource module
        return False
    if not statm.exists():                           # macOS does not enforce RLIMIT_AS
        return False
    used = int(statm.read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = used + megabytes * 2**20
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    return True


def child(spec: str, names: list[str], memory_mb: int) -> int:
    """Grade `names` in this (child) process, reporting each result as one JSON line."""
    report = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)                # what the graded code prints goes to stderr, not the reports

    def send(event: str, **fields) -> None:
        report.write(json.dumps({"event": event, **fields}) + "\n")

    try:                         # the grader's own imports come before the memory limit
        import sklearn.feature_extraction.text  # noqa: F401
        import sklearn.metrics.pairwise  # noqa: F401
        tfidf_setup()
    except Exception as exc:
        send("broken", message=f"{type(exc).__name__}: {one_line(exc)}")
        return 1
    limit_memory(memory_mb)
    send("ready")
    try:
        module = load_module(spec)
    except SystemExit as exc:
        send("exit", code=repr(exc.code))
        return 0
    except Exception as exc:                         # a typo in the file: the parent says so
        send("error", message=f"{type(exc).__name__}: {one_line(exc)}")
        return 0
    send("loaded")
    for name in names:
        send("start", name=name)
        send("done", name=name, problem=run_check(name, module))
    return 0


def start_child(spec: str, names: list[str], memory_mb: int):
    """A child process grading `names`, and a queue of its reports (None at its end)."""
    import queue
    import subprocess
    import threading
    command = [sys.executable, str(Path(__file__).resolve()), "--module", spec,
               "--memory-mb", str(memory_mb), "--child", *names]
    # its own process group: Ctrl-C reaches only the parent, which then ends the child
    group = ({"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP} if os.name == "nt"
             else {"start_new_session": True})
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            text=True, **group)
    events = queue.Queue()

    def read():                                  # a thread, since Windows pipes have no select
        for line in proc.stdout:
            with contextlib.suppress(ValueError):
                events.put(json.loads(line))
        events.put(None)

    threading.Thread(target=read, daemon=True).start()
    return proc, events


def next_event(events, seconds: float):
    """The child's next report, None when it ended, or "timeout" after `seconds`."""
    import queue
    try:
        return events.get(timeout=seconds)
    except queue.Empty:
        return "timeout"


def how_it_ended(proc) -> str:
    """The child's exit status in words."""
    code = proc.wait()
    if code >= 0:
        return f"exit status {code}"
    import signal
    with contextlib.suppress(ValueError):
        return f"killed by {signal.Signals(-code).name}"
    return f"killed by signal {-code}"


def fail(name: str, reason: str) -> str:
    """A FAIL for `name`: the reason, then its hint."""
    return f"{reason}\nhint: {HINTS[name]}"


def follow(proc, events, names: list[str], time_limit: float, report) -> None:
    """Read one child's reports, calling report(name, problem) for each function it settles."""
    ready = next_event(events, START_LIMIT_S)
    if not isinstance(ready, dict) or ready["event"] != "ready":
        detail = ready["message"] if isinstance(ready, dict) else how_it_ended(proc)
        raise RuntimeError(f"the grader cannot start its checks ({detail}): "
                           f"install numpy, scipy and scikit-learn")
    problem = import_problem(proc, next_event(events, time_limit), time_limit)
    if problem is not None:                          # nothing can run: every function fails
        for name in names:
            report(name, fail(name, problem))
        return
    for name in names:
        if not follow_one(proc, events, name, time_limit, report):
            return                                   # the caller starts a fresh child


def import_problem(proc, loaded, time_limit: float) -> str | None:
    """None if the module imported, else why importing it fails every function."""
    if loaded == "timeout":
        return (f"importing the module did not finish within {time_limit:g} s: is there an "
                f"endless loop outside the functions?")
    if loaded is None or loaded["event"] == "exit":
        how = f"sys.exit({loaded['code']})" if loaded else how_it_ended(proc)
        return (f"importing the module ends the program ({how}): remove sys.exit() or exit() "
                f"from the top level of the file")
    if loaded["event"] == "error":
        raise ValueError(f"cannot load the module to grade: {loaded['message']}")
    return None


def follow_one(proc, events, name: str, time_limit: float, report) -> bool:
    """Settle one function; False if the child is gone (or must go) before the next."""
    next_event(events, START_LIMIT_S)                # "start": sent at once
    done = next_event(events, time_limit)
    if isinstance(done, dict):
        report(name, done["problem"])
        return True
    if done == "timeout":
        reason = (f"it did not finish within {time_limit:g} s: is there a loop that never "
                  f"stops (a step of 0, a condition that stays true)?")
    else:
        reason = (f"the program ended while checking it ({how_it_ended(proc)}): a graded "
                  f"function must return its result, never exit or crash the interpreter")
    report(name, fail(name, reason))
    return False


def grade(spec: str, time_limit: float = TIME_LIMIT_S, memory_mb: int = MEMORY_LIMIT_MB,
          report=None, names=FUNCTIONS) -> dict[str, str | None]:
    """Grade each function in a child process; {name: None if it passes, else why + hint}."""
    results = {}

    def settle(name: str, problem: str | None) -> None:
        results[name] = problem
        if report:
            report(name, problem)

    while len(results) < len(names):                 # a child that died is replaced
        remaining = [name for name in names if name not in results]
        proc, events = start_child(spec, remaining, memory_mb)
        try:
            follow(proc, events, remaining, time_limit, settle)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    return results


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------
def print_result(name: str, problem: str | None) -> None:
    """PASS, or FAIL with the reason and the hint wrapped below it."""
    if problem is None:
        print(f"PASS  {name}", flush=True)
        return
    reason, hint = problem.split("\nhint: ")
    print(f"FAIL  {name}: {reason}")
    print(textwrap.fill(f"hint: {hint}", width=92, initial_indent="      ",
                        subsequent_indent="            "), flush=True)


def grade_and_print(args) -> int:
    """Grade the chosen module, print one line per function; return how many pass."""
    if not (0 < args.time_limit <= 3600 and 0 < args.memory_mb <= 1_000_000):   # nan fails too
        raise ValueError("--time-limit and --memory-mb must be positive numbers "
                         "(at most 3600 seconds and 1,000,000 MB)")
    spec = module_spec(args.module)
    print(f"grading {describe(spec)}", flush=True)
    results = grade(spec, args.time_limit, args.memory_mb, report=print_result)
    passed = sum(problem is None for problem in results.values())
    print(f"{passed}/{len(FUNCTIONS)} functions pass"
          + ("" if passed == len(FUNCTIONS) else ": fix the first FAIL, then run this again"))
    return passed


def main(argv=None) -> int:
    """Grade each function; exit status 0 only when all five were graded and pass."""
    p = OneLineParser(description="Grade the lab functions (default: lab/starter.py).")
    p.add_argument("--module", help="a .py file or a module name (default: $LAB_MODULE, "
                                    "else lab/starter.py)")
    p.add_argument("--time-limit", type=float, default=TIME_LIMIT_S, metavar="S",
                   help="seconds each function may take (default: %(default)g)")
    p.add_argument("--memory-mb", type=int, default=MEMORY_LIMIT_MB, metavar="MB",
                   help="memory each function may add, Linux only (default: %(default)d)")
    p.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args.module, args.child, args.memory_mb)
    if args.module is not None and not args.module.strip():
        p.error("--module needs a file or a module name, got an empty string")
    outcome = {"passed": 0}
    status = run_cli(lambda: outcome.update(passed=grade_and_print(args)))
    return status or (0 if outcome["passed"] == len(FUNCTIONS) else 1)


if __name__ == "__main__":
    leave(main())     # a Ctrl-C while Python shuts down is one line too
