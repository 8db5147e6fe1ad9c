"""The shape of the code a newcomer reads: sizes, private names, history, the README.

Read from the source with :mod:`ast`, never by importing it. The rules, for every module of
``dyna/``, ``envs/`` and ``benchmarks/``:

* a module has at most :data:`MAX_MODULE_LINES` lines;
* a class spans at most :data:`MAX_CLASS_LINES` lines and defines at most
  :data:`MAX_METHODS` methods;
* a function has at most :data:`MAX_FUNCTION_CODE_LINES` code lines (lines holding code,
  its ``def`` line included: not blank, not only a comment, not a docstring);
* no private name (``_name``, not a dunder) is imported from another module of the project
  (a private *module*, such as ``dyna._lazy``, may be imported inside its package);
* no comment or docstring tells the history (:data:`HISTORY_PHRASES`): that goes in commit
  messages and CHANGELOG.md. An env's "Version history" docstring section is allowed, as
  Gymnasium keeps one. This rule covers the tests (``tests/``) too;

and the README has at most :data:`MAX_README_LINES` lines. Import circles are the import
graph's test (``tests/test_import_graph.py``).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("dyna", "envs", "benchmarks")
#: Where the history rule applies: the packages and their tests.
HISTORY_PACKAGES = (*PACKAGES, "tests")
MAX_MODULE_LINES = 800
MAX_CLASS_LINES = 500
MAX_METHODS = 30
MAX_FUNCTION_CODE_LINES = 80
MAX_README_LINES = 200

#: Phrases that tell the code's past or who found what, case-insensitive.
HISTORY_PHRASES = (
    r"\bissues? #?\d+",
    r"\bsession \d+",
    r"\bno longer\b",
    r"\bused to (be|do|read|write|keep|give|take|return|count|call|raise|use)\b",
    r"\bformerly\b",
    r"\bpreviously\b",
    r"\bthe reviewer'?s find",
    r"\bwas (changed|fixed|renamed|removed|added|replaced|moved|rewritten)\b",
    r"\b(bug|case) (report )?#\d+",
    r"\bcases/",
)
HISTORY = re.compile("|".join(HISTORY_PHRASES), re.IGNORECASE)
VERSION_HISTORY = re.compile(r"^\s*Version history\s*$", re.MULTILINE)


def module_files(packages: tuple[str, ...] = PACKAGES) -> list[Path]:
    """Every ``.py`` file of ``packages`` (folders of the repository), sorted."""
    return sorted(p for package in packages for p in (REPO / package).rglob("*.py")
                  if "__pycache__" not in p.parts)


def module_name(path: Path) -> str:
    """Dotted name of a file under the repository root."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def docstring_lines(tree: ast.AST) -> set[int]:
    """Line numbers of every module, class and function docstring in ``tree``."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return lines


def code_lines(source: str) -> set[int]:
    """Line numbers holding a token other than a comment, newline or indentation."""
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
            tokenize.DEDENT, tokenize.ENDMARKER}
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in skip:
            lines.update(range(token.start[0], token.end[0] + 1))
    return lines


def function_code_lines(node: ast.AST, code: set[int], docs: set[int]) -> int:
    """Code lines of one function, its docstrings excluded."""
    span = range(node.lineno, node.end_lineno + 1)
    return sum(1 for line in span if line in code and line not in docs)


def size_problems(path: Path) -> list[str]:
    """Every size rule ``path`` breaks, one message each."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    problems = []
    n_lines = len(source.splitlines())
    if n_lines > MAX_MODULE_LINES:
        problems.append(f"module has {n_lines} lines > {MAX_MODULE_LINES}")
    code, docs = code_lines(source), docstring_lines(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            span = node.end_lineno - node.lineno + 1
            methods = sum(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                          for n in node.body)
            if span > MAX_CLASS_LINES or methods > MAX_METHODS:
                problems.append(f"class {node.name}: {span} lines, {methods} methods")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = function_code_lines(node, code, docs)
            if n > MAX_FUNCTION_CODE_LINES:
                problems.append(f"function {node.name} (line {node.lineno}): {n} code lines")
    return problems


def imported_module(path: Path, node: ast.ImportFrom) -> str:
    """The absolute dotted module an ``ImportFrom`` reads from."""
    if not node.level:
        return node.module or ""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[:len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def is_module(dotted: str) -> bool:
    """Whether ``dotted`` names a module or package of the repository."""
    base = REPO.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def private_imports(path: Path) -> list[str]:
    """Private names ``path`` imports from another project module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        source = imported_module(path, node)
        if source.split(".")[0] not in PACKAGES or source == module_name(path):
            continue
        for alias in node.names:
            name = alias.name
            if name.startswith("_") and not name.startswith("__") \
                    and not is_module(f"{source}.{name}"):
                found.append(f"{name} from {source}")
    return found


def history_lines(path: Path) -> list[str]:
    """Comment and docstring lines of ``path`` that tell the history."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    text_lines = set(docstring_lines(tree))
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            text_lines.add(token.start[0])
    lines = source.splitlines()
    allowed: set[int] = set()
    for match in VERSION_HISTORY.finditer(source):
        start = source.count("\n", 0, match.start()) + 1
        end = start
        while end < len(lines) and '"""' not in lines[end]:
            end += 1
        allowed.update(range(start, end + 2))
    return [f"{n}: {lines[n - 1].strip()}" for n in sorted(text_lines)
            if n not in allowed and HISTORY.search(lines[n - 1])]


FILES = module_files()
IDS = [str(p.relative_to(REPO)) for p in FILES]
HISTORY_FILES = module_files(HISTORY_PACKAGES)
HISTORY_IDS = [str(p.relative_to(REPO)) for p in HISTORY_FILES]


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_sizes(path):
    assert size_problems(path) == []


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_no_private_name_imported_across_modules(path):
    assert private_imports(path) == []


@pytest.mark.parametrize("path", HISTORY_FILES, ids=HISTORY_IDS)
def test_no_history_in_comments_or_docstrings(path):
    assert history_lines(path) == []


def test_readme_is_a_first_screen():
    n = len((REPO / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= MAX_README_LINES


def test_the_rules_catch_what_they_name(tmp_path, monkeypatch):
    """Each rule flags a hand-built offender and passes its fixed version."""
    big = "def f():\n" + "    x = 1\n" * MAX_FUNCTION_CODE_LINES  # with its def line: 81
    path = tmp_path / "m.py"
    path.write_text(big, encoding="utf-8")
    assert size_problems(path) == [f"function f (line 1): {MAX_FUNCTION_CODE_LINES + 1} code lines"]
    path.write_text('def f():\n    """Doc."""\n    # note\n\n' + "    x = 1\n" * 79,
                    encoding="utf-8")
    assert size_problems(path) == []
    path.write_text('"""Doc."""\n# this used to be fast\nx = 1  # see issue 12\n',
                    encoding="utf-8")
    assert [line.split(":")[0] for line in history_lines(path)] == ["2", "3"]
    path.write_text('"""Env.\n\nVersion history\n    v1: issue 3 fixed.\n"""\n', encoding="utf-8")
    assert history_lines(path) == []
