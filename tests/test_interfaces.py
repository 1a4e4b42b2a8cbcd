"""The kit passes plain data (docs STYLE: "Data, not decorated closures"), read from the code with
`ast`: no attribute is set on a function or a closure, or read back from one with getattr; no
branch compares with a ranking's display string; no regular expression reads a prompt's markers
back (the passages travel beside the prompt, in ragkit/answering.py's GroundedPrompt). Each check
is also run on a few lines of the old code it forbids, so it is known to fail."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KIT = sorted((ROOT / "ragkit").glob("*.py"))
# The attributes a decorated closure carried; getattr(x, "name") of one reads a decoration back.
DECORATIONS = {"ranking", "runtime", "truncated", "streams", "report", "name", "usage", "path",
               "bare", "timing"}
RE_CALLS = {"compile", "search", "match", "fullmatch", "finditer", "findall", "sub", "subn", "split"}
FENCE_FILTER = ("answering.py", "FENCE_MARKER")  # the guard's output filter: markers a reply echoes


def functions_in_scope(tree: ast.AST) -> dict:
    """node -> names bound by def or lambda in its scope or an enclosing one (closures see them)."""
    seen = {}

    def visit(node, names):
        body = list(ast.iter_child_nodes(node))
        own = {n.name for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        own |= {t.id for n in body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Lambda)
                for t in n.targets if isinstance(t, ast.Name)}
        names = names | own if not isinstance(node, ast.ClassDef) else names
        for child in body:
            seen[child] = names
            visit(child, names)
    seen[tree] = set()
    visit(tree, set())
    return seen


def targets(node: ast.AST) -> list:
    """The expressions an assignment writes to, tuples unpacked."""
    found = list(node.targets) if isinstance(node, ast.Assign) else [node.target]
    out = []
    while found:
        t = found.pop()
        found += t.elts if isinstance(t, (ast.Tuple, ast.List)) else []
        out += [t] if not isinstance(t, (ast.Tuple, ast.List)) else []
    return out


def decorated_functions(source: str, where: str = "") -> list[str]:
    """`f.attr = ...` and setattr(f, ...) where f is a function or closure in scope, and
    getattr/hasattr of one, or of a decoration's name. A function's own __name__ and __doc__
    (what functools.wraps sets) are no decoration."""
    tree = ast.parse(source)
    scope = functions_in_scope(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            found += [f"{where}:{node.lineno} sets {t.value.id}.{t.attr}" for t in targets(node)
                      if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                      and t.value.id in scope[node] and not t.attr.startswith("__")]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("setattr", "getattr", "hasattr") and node.args:
            first, rest = node.args[0], node.args[1:]
            on_function = isinstance(first, ast.Name) and first.id in scope[node]
            decoration = rest and isinstance(rest[0], ast.Constant) and rest[0].value in DECORATIONS
            if on_function or (node.func.id != "setattr" and decoration):
                found.append(f"{where}:{node.lineno} {node.func.id}({ast.unparse(first)}, ...)")
    return found


def display_string_branches(source: str, where: str = "") -> list[str]:
    """Comparisons with a string literal starting "ranked by", or with a retriever's .ranking."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            shown = any(isinstance(s, ast.Constant) and isinstance(s.value, str)
                        and s.value.startswith("ranked by") for s in sides)
            ranking = any(isinstance(s, ast.Attribute) and s.attr == "ranking" for s in sides)
            if shown or ranking:
                found.append(f"{where}:{node.lineno} {ast.unparse(node)}")
    return found


def prompt_parsers(source: str, where: str = "") -> list[str]:
    """Regular expressions over a prompt's <<BEGIN markers (the guard's output filter aside), and
    a prompt's text cut at its "Question:" line to read the question back."""
    tree, found = ast.parse(source), []
    allowed = {id(n) for node in ast.walk(tree) if isinstance(node, ast.Assign)
               and where.endswith(FENCE_FILTER[0])
               and any(isinstance(t, ast.Name) and t.id == FENCE_FILTER[1] for t in node.targets)
               for n in ast.walk(node.value)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        texts = [n.value for a in node.args for n in ast.walk(a)
                 if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        is_re = isinstance(node.func.value, ast.Name) and node.func.value.id == "re" \
            and node.func.attr in RE_CALLS
        if is_re and id(node) not in allowed and any("<<BEGIN" in t for t in texts):
            found.append(f"{where}:{node.lineno} a regex over the prompt's markers")
        if node.func.attr in ("partition", "rpartition", "split", "index", "find", "rfind") \
                and any("Question:" in t for t in texts):
            found.append(f"{where}:{node.lineno} the question read back from the prompt")
    return found


CHECKS = [decorated_functions, display_string_branches, prompt_parsers]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_the_kit_passes_plain_data(check):
    found = [f for path in KIT for f in check(path.read_text(encoding="utf-8"), f"ragkit/{path.name}")]
    assert found == []


# What the kit did before these types, in its own words: each check must flag it.
OLD_CODE = {
    decorated_functions: [
        "def make():\n    def retrieve(q, k):\n        retrieve.timing['n'] += 1\n"
        "    retrieve.timing, retrieve.report = {}, False\n    return retrieve",
        "def guarded(llm_fn):\n    def safe(p, s):\n        safe.truncated = llm_fn.truncated\n    return safe",
        "def streaming(pieces_fn):\n    def llm_fn(p, s):\n"
        "        llm_fn.truncated = getattr(pieces_fn, 'bare', pieces_fn).truncated\n    return llm_fn",
        "def f():\n    pass\nsetattr(f, 'runtime', 'x')",
        "fn = lambda p, s: p\nfn.streams = True",
    ],
    display_string_branches: [
        "if retrieve.ranking != 'ranked by cosine similarity':\n    pass",
        "plain = 'ranked by cosine similarity' == name",
    ],
    prompt_parsers: [
        "PASSAGE = re.compile(r'^<<BEGIN (\\w+) \\[(\\d+)\\] source=\"([^\"\\n]*)\">>\\n(.*?)\\n<<END \\1>>$')",
        "found = re.search(r'^<<BEGIN (\\w+) ', prompt, flags=re.M)",
        "question = prompt.rpartition('\\nQuestion: ')[2].split('\\n', 1)[0]",
    ],
}


@pytest.mark.parametrize("check, code", [(c, code) for c in CHECKS for code in OLD_CODE[c]],
                         ids=lambda x: x.__name__ if callable(x) else x.splitlines()[-1][:40])
def test_each_check_flags_the_old_code_it_forbids(check, code):
    assert check(code, "old.py")


def test_plain_types_and_the_guards_own_filter_pass():
    fine = ("@dataclass\nclass Retriever:\n    hybrid: object = None\n"
            "    def __call__(self, q, k, report=False):\n        self.timing['queries'] += 1\n"
            "retrieve = Retriever()\nfound = retrieve('q', 3, report=True)\nif retrieve.cosine_only:\n    pass\n"
            "x = getattr(args, name)\n")
    assert decorated_functions(fine) == display_string_branches(fine) == prompt_parsers(fine) == []
    fence = "FENCE_MARKER = re.compile(r'<<BEGIN|<<END')\n"
    assert prompt_parsers(fence, "ragkit/answering.py") == []
    assert prompt_parsers(fence, "ragkit/other.py")
