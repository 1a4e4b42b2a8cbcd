"""
check.py: grade the five functions of lab/starter.py, with a hint for each one that fails.

    python lab/check.py                              # grade lab/starter.py
    python lab/check.py --module my_copy.py          # grade another file
    python lab/check.py --module rag_from_scratch    # grade the reference: all PASS
    LAB_MODULE=rag_from_scratch python -m pytest lab # the same checks through pytest

Every check compares your function with a trusted reference: values worked out by hand, the
tutorial's printed figures, NumPy and scikit-learn. No torch, no network. Your code runs in a
child process (graded_process.py) that calls your functions and sends back what they return
as plain data (JSON); the checks run here, on those values. A function imported from
rag_from_scratch.py, the reference, is a FAIL. Each function has a time limit (--time-limit,
10 s) and, on Linux, a memory limit (--memory-mb, 1024): sys.exit(), an endless loop, a list
that grows without end or a crash is that function's FAIL with a hint and the line it came
from. What your code prints appears on stderr behind "  | ", its first 20 lines.
Exit status 0 only when all five pass; 130 on Ctrl-C.

What the grader promises, and what it does not:
- A learner who is trying gets honest feedback: a FAIL says what went wrong and gives a hint,
  and a crash, a hang or a runaway loop fails that function, not the grader.
- An instructor who grades submitted files gets a guard of the machine: time, memory and the
  number of processes are bounded, and nothing the file started runs on once the grader exits
  (lab/INSTRUCTOR.md says what holds as root and what as a normal user).
- The verdict can be forged. The graded code runs in a process the learner controls: it can
  write the replies the checks expect (worked out with the reference) onto the reply pipe,
  replace this file's functions in the child, edit this file, or print "5/5 functions pass"
  itself. Nothing in a process can stop code running in that same process from doing so. For
  marks, grade with hidden inputs and read the code: run the learner's functions on documents
  and questions they have not seen, and read what they wrote.
"""

from __future__ import annotations

import sys
from pathlib import Path

LAB = Path(__file__).resolve().parent
ROOT = LAB.parent
# The given parts come from rag_from_scratch.py, the child process from graded_process.py.
# Both folders go last on the path: a learner's numpy.py there cannot stand in for NumPy.
sys.path += [str(ROOT), str(LAB)]

import argparse  # noqa: E402
import contextlib
import importlib.util
import io
import itertools
import json
import os
import signal
import textwrap
import time
import traceback

import numpy as np

import rag_from_scratch as rag
from graded_process import GradedProcess, drop_root, limit
from ragkit.support import leave, one_line, OneLineParser, printable, refuse_empty, run_cli

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


def module_spec(spec: str | None = None) -> str:
    """The module to grade as the child imports it: an absolute .py path or a module name."""
    spec = spec or os.environ.get("LAB_MODULE") or str(LAB / "starter.py")
    if not spec.endswith(".py"):
        return spec
    for path in (Path(spec).expanduser(), ROOT / spec):    # as given, else from the repository
        if path.is_file():
            return str(path.resolve())
    raise FileNotFoundError(f"no file {spec} to grade: give a .py path or a module name")


def load_module(spec: str, source: bytes | None = None):
    """Import the module to grade: a module name such as rag_from_scratch, or a .py path whose
    `source` was read beforehand (the child reads it before it gives up root)."""
    if not spec.endswith(".py"):
        return importlib.import_module(spec)
    found = importlib.util.spec_from_file_location(f"graded_{Path(spec).stem}", spec)
    module = importlib.util.module_from_spec(found)
    exec(compile(source, spec, "exec", dont_inherit=True), vars(module))
    return module


def is_reference(spec: str) -> bool:
    """True if `spec` names rag_from_scratch itself: the one module that may be the reference."""
    if spec.endswith(".py"):
        return Path(spec).resolve() == Path(rag.__file__).resolve()
    return spec == rag.__name__


# ---------------------------------------------------------------------------
# What search and evaluate_retrieval are given: the tutorial's TF-IDF index, and a toy one
# ---------------------------------------------------------------------------
class ToyEmbedder(dict):
    """Maps a few known texts to hand-picked vectors, so every score is easy to follow."""

    backend = "toy"

    def encode(self, texts: list[str], sparse: bool = False) -> np.ndarray:
        """One unit-length row per text."""
        rows = np.array([self[t] for t in texts], dtype=float)
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


def setups() -> dict:
    """By name, the (eval_set, index, chunks, embedder) the graded functions are given."""
    chunks = rag.build_chunks(rag.CORPUS, 50, 10)        # the tutorial's 17 chunks
    tfidf = rag.Embedder("tfidf")
    toy = ToyEmbedder({c["text"]: np.eye(4)[i].tolist() for i, c in enumerate(TOY_CHUNKS)})
    toy_index = toy.encode(list(toy))
    toy.update({q: weights for q, weights, _ in TOY_QUESTIONS})
    return {"tfidf": (rag.EVAL_SET, rag.build_index(chunks, tfidf), chunks, tfidf),
            "toy": ([{"question": q, "relevant": rel} for q, _, rel in TOY_QUESTIONS], toy_index,
                    [dict(c) for c in TOY_CHUNKS], toy)}


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
# The checks run here, on the plain values the graded functions returned in the child
# (mod.search(q, k, on="tfidf") is search(q, index, chunks, embedder, k) on that setup);
# each raises AssertionError with a sentence saying what went wrong
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

    for bad in ((0, 0), (3, -1), (3, 3)):
        expect_value_error(lambda: f("a b c", *bad), f"chunk_text('a b c', {bad[0]}, {bad[1]})")


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
        assert close(got, expected), (f"cosine_similarity({a}, {b}) = {got!r}, "
                                      f"expected {expected:.6f}")
    assert close(f([0.2, -1.0, 3.0], [2.0, -10.0, 30.0]), 1.0), (
        "a vector and 10 times that vector point the same way: cosine 1.0, yours is not "
        "(is it the raw dot product?)")
    from sklearn.metrics.pairwise import cosine_similarity as reference
    rng = np.random.default_rng(7)
    for _ in range(5):
        a, b = rng.normal(size=384), rng.normal(size=384)
        got, expected = f(a.tolist(), b.tolist()), reference([a], [b])[0, 0]
        assert close(got, expected), (f"on random 384-number vectors yours gives {got:.6f}, "
                                      f"scikit-learn gives {expected:.6f}")


def check_search(mod) -> None:
    """Scores and order against scikit-learn's cosine on TF-IDF, the toy index, and bad input."""
    from sklearn.metrics.pairwise import cosine_similarity as reference
    _, _, chunks, embedder = setups()["tfidf"]
    chunk_vectors = embedder.encode([c["text"] for c in chunks])
    questions = ["I forgot my password. How do I reset it?",
                 "How much time off do new fathers get?",
                 "How do I book flights for a client visit and claim the costs afterwards?"]
    for question in questions:
        expected = reference(chunk_vectors, embedder.encode([question]))[:, 0]
        best = np.sort(expected)[::-1]
        for k in (1, 3, 5):
            results = mod.search(question, k, on="tfidf")
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
    got = [(r["chunk_id"], round(r["score"], 3)) for r in mod.search(questions[1], 2, on="tfidf")]
    assert got == [("IT-02#0", 0.087), ("HR-04#0", 0.070)], (
        f"TF-IDF for the fathers question should give IT-02#0 0.087 then HR-04#0 0.070 "
        f"(the tutorial's figures), yours gives {got}")
    assert mod.last["chunks"] == chunks, "search changed the chunk dicts: return new dicts instead"

    ranked = [r["doc_id"] for r in mod.search("toy q4: C first, A third", 4, on="toy")]
    assert ranked == ["C", "D", "A", "B"], (f"on a dense NumPy index the order should be "
                                            f"C, D, A, B; yours is {', '.join(ranked)}")

    expect_value_error(lambda: mod.search("   ", 3, on="tfidf"), "search('   ', ...)")
    for k in (0, len(chunks) + 1):
        expect_value_error(lambda: mod.search(questions[0], k, on="tfidf"),
                           f"search(..., k={k}) with {len(chunks)} chunks")


def check_build_prompt(mod) -> None:
    """The exact prompt layout for one and for two retrieved chunks, as the lesson writes it."""
    retrieved = [
        {"chunk_id": "HR-01#0", "doc_id": "HR-01", "title": "Annual leave policy",
         "text": "You get 24 days.", "score": 0.61},
        {"chunk_id": "FIN-02#0", "doc_id": "FIN-02", "title": "Business travel policy",
         "text": "Book travel 7 days ahead.", "score": 0.33},
    ]
    question = "How many days of leave do I get?"
    for chosen in (retrieved, retrieved[:1]):
        got, expected = mod.build_prompt(question, chosen), rag.build_prompt(question, chosen)
        if got != expected:            # name the first line that differs
            lines = enumerate(itertools.zip_longest(expected.split("\n"), str(got).split("\n")), 1)
            n, want, have = next((n, w, h) for n, (w, h) in lines if w != h)
            want, have = ("(nothing)" if line is None else line for line in (want, have))
            raise AssertionError(f"with {len(chosen)} chunk(s), line {n} of the prompt should "
                                 f"be {want!r} but is {have!r}")


def check_evaluate_retrieval(mod) -> None:
    """Hand-computed hit rate, recall and MRR on the toy set, then the tutorial's TF-IDF figures."""
    for k, (hit, recall, mrr) in TOY_EXPECTED.items():
        m = mod.evaluate_retrieval(k=k, verbose=False, on="toy")
        missing = {"k", "hit_rate", "recall", "mrr"} - set(m)
        assert not missing, f"the result lacks {sorted(missing)}"
        assert m["k"] == k, f"the result says k={m['k']}, expected {k}"
        for key, want in (("hit_rate", hit), ("recall", recall), ("mrr", mrr)):
            assert isinstance(m[key], float), f"{key} must be a plain float"
            assert close(m[key], want), (f"on the 4 toy questions at k={k}, {key} should be "
                                         f"{want} (worked out by hand in check.py), yours is "
                                         f"{m[key]:.4f}")
        assert not mod.last["printed"], "verbose=False should print nothing"

    mod.evaluate_retrieval(k=1, verbose=True, on="toy")
    lines = [line.strip() for line in mod.last["printed"].splitlines() if line.strip()]
    assert len(lines) == len(TOY_QUESTIONS), (f"verbose=True should print one line per question "
                                              f"({len(TOY_QUESTIONS)}), yours printed {len(lines)}")
    for line, (question, _, _), expected in zip(lines, TOY_QUESTIONS, "HIT MISS MISS HIT".split()):
        assert line.split()[0] == expected and question in line, (
            f"the verbose line for {question!r} should start with {expected} and show "
            f"the question; yours is {line!r}")

    tutorial = {1: (0.90, 0.85, 0.90), 3: (1.00, 1.00, 0.95)}   # TF-IDF, tutorial corpus
    for k, (hit, recall, mrr) in tutorial.items():
        m = mod.evaluate_retrieval(k=k, on="tfidf")
        got = (round(m["hit_rate"], 2), round(m["recall"], 2), round(m["mrr"], 2))
        assert got == (hit, recall, mrr), (f"TF-IDF on the tutorial set at k={k} should give "
                                           f"hit_rate, recall, mrr = {(hit, recall, mrr)}, "
                                           f"yours gives {got}")


CHECKS = {"chunk_text": check_chunk_text, "cosine_similarity": check_cosine_similarity,
          "search": check_search, "build_prompt": check_build_prompt,
          "evaluate_retrieval": check_evaluate_retrieval}


def run_check(name: str, mod) -> str | None:
    """None if the function passes, else why it fails followed by its hint."""
    try:
        CHECKS[name](mod)
        return None
    except NotImplementedError as exc:           # its message: the function that raised it
        reason = ("still a TODO (it raises NotImplementedError)" if str(exc) == name else
                  f"it calls {exc}(), which is still a TODO: finish that first")
    except (AssertionError, Copied) as exc:
        reason = str(exc)
    except SystemExit as exc:
        reason = (f"it calls sys.exit({exc.code}), which ends the whole program: "
                  f"return the result instead")
    except MemoryError:
        reason = ("it ran out of memory: does every loop move forward and stop? "
                  "(print the loop variable for a small input)")
    except Exception as exc:                     # a crash is a FAIL with its message
        reason = f"it raised {type(exc).__name__}: {exc}"
    return fail(name, reason)


def fail(name: str, reason: str) -> str:
    """A FAIL for `name`: the reason, then its hint. The reason may quote the graded code (an
    exception's message): its control characters and line breaks are written out, so it can
    neither forge a line nor drive the terminal."""
    return f"{printable(reason, lines=False)}\nhint: {HINTS[name]}"


# ---------------------------------------------------------------------------
# The child: it loads the graded module, then answers one JSON call per line with a JSON reply
# ---------------------------------------------------------------------------
TIME_LIMIT_S = 30.0          # per graded function, on the wall clock: the reference needs well under
                             # 1 s each, idle; a check failed at 10 s on a 2-core machine at load 6
MEMORY_LIMIT_MB = 1024       # on top of what the grader itself uses
START_LIMIT_S = 120.0        # the child's own imports (NumPy, scikit-learn) on a busy laptop
MORE_PROCESSES = 8           # processes or threads the graded code may start; the lab needs none
UID_BASE = 2_000_000_000     # as root, the graded code runs as UID_BASE + the grader's pid: a
                             # user id no account has, and no other grader running at once
# The lab functions each graded function calls: it is graded with the reference versions of
# these, so a FAIL names the function that is wrong (a buggy search must not fail
# evaluate_retrieval, which only calls it).
CALLS = {"evaluate_retrieval": ("search",), "search": ("cosine_similarity",)}


def answer(module, request: dict, given: dict, watch: bool = False) -> str:
    """Run one call of the graded module; what it returned, printed or raised, as JSON. With
    `watch`, a function imported from the reference solution is refused ("copied")."""
    name, args, reply = request["name"], request["args"], {}
    if request["on"]:            # search(q, k) -> search(q, index, chunks, embedder, k)
        eval_set, index, chunks, embedder = given[request["on"]]
        first = [args.pop(0)] if name == "search" else [eval_set]
        args = first + [index, chunks, embedder] + args
        reply["chunks"] = chunks             # as the call leaves them
    function, printed = getattr(module, name, None), io.StringIO()
    callees = {f: getattr(module, f, None) for f in CALLS.get(name, ())}
    vars(module).update({f: getattr(rag, f) for f in callees})
    try:
        with contextlib.redirect_stdout(printed if name == "evaluate_retrieval" else sys.stderr):
            if not callable(function):
                raise AttributeError(f"the module has no function {name}")
            if watch and (found := borrowed(function, name)):
                return json.dumps({"copied": found})
            reply["value"] = function(*args, **request["kwargs"])
    except SystemExit as exc:
        reply["exit"] = repr(exc.code)
    except BaseException as exc:     # a TODO says which function raised it
        reply["raised"] = type(exc).__name__
        reply["message"] = (traceback.extract_tb(exc.__traceback__)[-1].name
                            if isinstance(exc, NotImplementedError) else
                            one_line(exc) + where(exc, getattr(module, "__file__", None)))
    finally:
        vars(module).update(callees)
    reply["printed"] = printed.getvalue()[:2**16]   # enough to count its lines: the reply
                                                    # must stay under the 1 MB a line may take
    try:
        return json.dumps(reply, default=lambda value: f"<{type(value).__name__}>")
    except Exception:            # a cycle, or keys JSON cannot hold: a value no check accepts
        return json.dumps({"value": "<not plain data>", "printed": ""})


def where(exc: BaseException, path: str | None) -> str:
    """The last line of the file at `path` that the error passed through, as
    " (line 12 of starter.py, in search)", or "": of a traceback, the line a learner needs."""
    mine = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == path]
    return f" (line {mine[-1].lineno} of {Path(path).name}, in {mine[-1].name})" if mine else ""


# ---------------------------------------------------------------------------
# The reference is not the student's work: a function imported from rag_from_scratch (or
# rebuilt from its code) is a FAIL that says so. A wrapper around it, or code copied from it,
# passes: telling those apart from a student's own is reading the code, not a grader's job.
# ---------------------------------------------------------------------------
REFERENCE_FILE = rag.chunk_text.__code__.co_filename    # where the reference's code comes from


def borrowed(function, name: str) -> str | None:
    """Why `function` is the reference's own function, or None."""
    code = getattr(function, "__code__", None)
    if (getattr(function, "__module__", None) == rag.__name__
            or getattr(code, "co_filename", None) == REFERENCE_FILE):
        return f"{name} comes from rag_from_scratch.py, the reference solution"
    return None


def child(spec: str, memory_mb: int, time_limit: float, uid: int) -> int:
    """Load the graded module, then answer each request read from stdin."""
    replies = os.fdopen(os.dup(1), "w", buffering=1)      # line-buffered: each reply at once
    os.dup2(2, 1)                # what the graded code prints goes to stderr, not the replies
    try:                         # the grader's own imports, data and limits come first, and
        given = setups()         # the graded file is read while we may still be root
        source = Path(spec).read_bytes() if spec.endswith(".py") else None
        tasks = len(os.listdir("/proc/self/task")) if sys.platform == "linux" else 1
        dropped = drop_root(uid)
        # Its processes count apart from anyone else's under a user id of its own (as root), or
        # in the user namespace the keeper made (a normal user's), where it is process 1
        own = dropped or os.getpid() == 1
        limit(memory_mb, int(START_LIMIT_S + time_limit * (len(FUNCTIONS) + 1)),
              tasks + MORE_PROCESSES if own else None)
    except Exception as exc:
        print(json.dumps({"broken": f"{type(exc).__name__}: {one_line(exc)}"}), file=replies)
        return 1
    print('{"ready": true}', file=replies)
    try:
        module, reply = load_module(spec, source), {"loaded": True}
    except SystemExit as exc:
        module, reply = None, {"exit": repr(exc.code)}
    except BaseException as exc:                     # a typo in the file: the parent says so
        unreadable = (" (your code runs as a user of its own here, not root: a module only "
                      "root may read cannot be imported)"
                      if dropped and isinstance(exc, ImportError) and exc.name != spec else "")
        module, reply = None, {"error": f"{type(exc).__name__}: {one_line(exc)}"
                                        f"{where(exc, spec)}{unreadable}"}
    print(json.dumps(reply), file=replies)
    watch = not is_reference(spec)
    for line in sys.stdin if module else ():
        print(answer(module, json.loads(line), given, watch), file=replies)
    return 0


# ---------------------------------------------------------------------------
# The parent: it asks the child, and trusts nothing but the plain values of its replies
# ---------------------------------------------------------------------------
class Gone(BaseException):
    """The child ended or ran out of time (no check's `except Exception` may take it)."""


class Copied(BaseException):
    """The graded function is or runs the reference solution (no check may take it either)."""


RAISED = {kind.__name__: kind for kind in (ValueError, MemoryError, NotImplementedError)}


class Graded:
    """The graded module as the checks see it: mod.f(...) runs over there; .last is its reply."""

    def __init__(self, ask):
        self.ask, self.last = ask, {}      # ask: request -> reply, in a child or (tests) here

    def __getattr__(self, name: str):
        def call(*args, on=None, **kwargs):
            self.last = reply = self.ask({"name": name, "args": list(args), "kwargs": kwargs,
                                          "on": on})
            if "copied" in reply:
                raise Copied(f"{reply['copied']}, not code of your own: write it yourself")
            if "value" in reply:
                return reply["value"]
            if "exit" in reply:
                raise SystemExit(reply["exit"])
            raised = str(reply.get("raised"))            # any name at all: type() must not fail
            kind = RAISED.get(raised) or type(raised if raised.isidentifier() else "Exception",
                                              (Exception,), {})
            raise kind(reply.get("message"))
        return call


def in_process(module) -> Graded:
    """The checks' view of a module imported in this process (tests; no isolation)."""
    given = setups()
    return Graded(lambda request: json.loads(answer(module, request, given)))


class Child(GradedProcess):
    """check.py --child serving the graded module, in a process of its own (graded_process.py)."""

    def __init__(self, spec: str, memory_mb: int, time_limit: float):
        uid = UID_BASE + os.getpid()
        super().__init__([sys.executable, str(Path(__file__).resolve()), "--child", str(uid),
                          "--module", spec, "--memory-mb", str(memory_mb),
                          "--time-limit", str(time_limit)], uid)
        self.time_limit, self.deadline = time_limit, 0.0

    def reply(self, seconds: float):
        """The next reply, a dict; "timeout" after `seconds`; "ended" once the child is gone."""
        line = self.next_line(seconds)
        if line is None:
            return "timeout"
        with contextlib.suppress(ValueError, RecursionError):
            reply = json.loads(line or '"ended"')
            return reply if isinstance(reply, dict) or reply == "ended" else {}
        return {}

    def ask(self, request: dict) -> dict:
        """Send one call and wait for its reply until self.deadline."""
        self.send(json.dumps(request) + "\n")
        reply = self.reply(self.deadline - time.monotonic())
        if reply == "timeout":
            raise Gone(f"it did not finish within {self.time_limit:g} s: is there a loop that "
                       f"never stops (a step of 0, a condition that stays true)?")
        if reply == "ended":
            raise Gone(f"the program ended while checking it ({self.how_it_ended()}): a graded "
                       f"function must return its result, never exit or crash the interpreter")
        return reply

    def how_it_ended(self) -> str:
        """The child's exit status in words (killed, if it closed its output but lives on)."""
        code = self.status()
        if code >= 0:
            return f"exit status {code}"
        with contextlib.suppress(ValueError):     # never a ValueError: a check would count it
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"

    def grade(self, names: list[str]):
        """Yield (name, None or why + hint) for each function; stop early if the child is gone."""
        ready = self.reply(START_LIMIT_S)
        if ready != {"ready": True}:
            detail = ready.get("broken") if isinstance(ready, dict) else self.how_it_ended()
            raise RuntimeError(f"the grader cannot start its checks ({printable(str(detail))})")
        problem = self.import_problem(self.reply(self.time_limit))
        for name in names:
            self.deadline = time.monotonic() + self.time_limit
            try:
                yield name, fail(name, problem) if problem else run_check(name, Graded(self.ask))
            except Gone as gone:
                yield name, fail(name, str(gone))
                return

    def import_problem(self, loaded) -> str | None:
        """None if the module imported, else why importing it fails every function."""
        if loaded == {"loaded": True}:
            return None
        if loaded == "timeout":
            return (f"importing the module did not finish within {self.time_limit:g} s: is "
                    f"there an endless loop outside the functions?")
        if "error" in loaded:
            raise ValueError(f"cannot load the module to grade: {printable(str(loaded['error']))}")
        how = f"sys.exit({loaded['exit']})" if "exit" in loaded else self.how_it_ended()
        return (f"importing the module ends the program ({how}): remove sys.exit() or exit() "
                f"from the top level of the file")


def grade(spec: str, time_limit: float = TIME_LIMIT_S, memory_mb: int = MEMORY_LIMIT_MB,
          report=None, names=FUNCTIONS) -> dict[str, str | None]:
    """Grade each function in a child process; {name: None if it passes, else why + hint}."""
    results = {}
    while len(results) < len(names):                 # a child that is gone is replaced
        child = Child(spec, memory_mb, time_limit)
        try:
            for name, problem in child.grade([n for n in names if n not in results]):
                results[name] = problem
                if report:
                    report(name, problem)
        finally:
            child.end()
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
    """Grade the chosen module, one line per function; exit status 0 only if all five pass."""
    if not (0 < args.time_limit <= 3600 and 0 < args.memory_mb <= 1_000_000):   # nan fails too
        raise ValueError("--time-limit and --memory-mb must be positive numbers "
                         "(at most 3600 seconds and 1,000,000 MB)")
    refuse_empty({"--module": args.module}, "a file or a module name")
    spec = module_spec(args.module)
    title = Path(spec).relative_to(ROOT) if Path(spec).is_relative_to(ROOT) else spec
    print(f"grading {title}", flush=True)
    results = grade(spec, args.time_limit, args.memory_mb, report=print_result)
    passed = sum(problem is None for problem in results.values())
    print(f"{passed}/{len(FUNCTIONS)} functions pass"
          + ("" if passed == len(FUNCTIONS) else ": fix the first FAIL, then run this again"))
    return 0 if passed == len(FUNCTIONS) else 1


def main(argv=None) -> int:
    """Grade each function; exit status 0 only when all five were graded and pass."""
    p = OneLineParser(description="Grade the lab functions (default: lab/starter.py).")
    p.add_argument("--module", help="a .py file or a module name (default: $LAB_MODULE, "
                                    "else lab/starter.py)")
    p.add_argument("--time-limit", type=float, default=TIME_LIMIT_S, metavar="S",
                   help="seconds each function may take (default: %(default)g)")
    p.add_argument("--memory-mb", type=int, default=MEMORY_LIMIT_MB, metavar="MB",
                   help="memory each function may add, Linux only (default: %(default)d)")
    p.add_argument("--child", type=int, metavar="UID", help=argparse.SUPPRESS)  # its user id
    args = p.parse_args(argv)
    if args.child is not None:
        return child(args.module, args.memory_mb, args.time_limit, args.child)
    return run_cli(grade_and_print, args)


if __name__ == "__main__":
    leave(main())     # a Ctrl-C while Python shuts down is one line too
