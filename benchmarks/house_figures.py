"""The shape of the code in figures: what a newcomer meets, measured from the source.

Prints, for ``dyna/`` and ``envs/`` (read with :mod:`ast`, never imported): modules over
1,000 and over 800 lines, the five largest classes (lines, methods), ``if`` statements per
100 statements, private names imported from another project module, and the README's lines,
words and sections. The limits the tests keep are in ``tests/test_structure.py``.

    python benchmarks/house_figures.py            # this checkout
    python benchmarks/house_figures.py --root DIR # another checkout, e.g. a git worktree
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

PACKAGES = ("dyna", "envs")


def module_files(root: Path) -> list[Path]:
    """Every ``.py`` file of the measured packages under ``root``."""
    return sorted(p for package in PACKAGES for p in (root / package).rglob("*.py")
                  if "__pycache__" not in p.parts)


def private_imports(root: Path, path: Path, tree: ast.AST) -> int:
    """Private names (``_x``, not dunders, not modules) ``path`` imports from the project."""
    count = 0
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            parts = list(path.relative_to(root).parent.parts)
            parts = parts[:len(parts) - node.level + 1]
            source = ".".join(parts + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        if source.split(".")[0] not in PACKAGES:
            continue
        for alias in node.names:
            base = root.joinpath(*source.split("."), alias.name)
            is_module = base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()
            if alias.name.startswith("_") and not alias.name.startswith("__") \
                    and not is_module:
                count += 1
    return count


def figures(root: Path) -> dict:
    """The figures of one checkout (module docstring)."""
    sizes, classes = {}, []
    n_if = n_statements = n_private = 0
    for path in module_files(root):
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
        name = str(path.relative_to(root))
        sizes[name] = len(source.splitlines())
        n_private += private_imports(root, path, tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.stmt):
                n_statements += 1
            if isinstance(node, ast.If):
                n_if += 1
            if isinstance(node, ast.ClassDef):
                methods = sum(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                              for n in node.body)
                classes.append((node.end_lineno - node.lineno + 1, methods, node.name, name))
    readme = (root / "README.md").read_text(encoding="utf-8")
    return {
        "modules": len(sizes),
        "over_1000": sorted(((n, m) for m, n in sizes.items() if n > 1000), reverse=True),
        "over_800": sum(n > 800 for n in sizes.values()),
        "largest_module": max(sizes.values()),
        "largest_classes": sorted(classes, reverse=True)[:5],
        "if_per_100_statements": round(100 * n_if / n_statements, 1),
        "private_imports": n_private,
        "readme": (len(readme.splitlines()), len(readme.split()),
                   sum(line.startswith("## ") for line in readme.splitlines())),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args(argv)
    got = figures(args.root)
    print(f"modules: {got['modules']}, largest {got['largest_module']} lines, "
          f"{got['over_800']} over 800 lines")
    print("modules over 1,000 lines:",
          ", ".join(f"{m} {n}" for n, m in got["over_1000"]) or "none")
    print("largest classes:", ", ".join(f"{c} {n} lines / {k} methods"
                                        for n, k, c, _ in got["largest_classes"]))
    print(f"if per 100 statements: {got['if_per_100_statements']}")
    print(f"private names imported across modules: {got['private_imports']}")
    lines, words, sections = got["readme"]
    print(f"README: {lines} lines, {words} words, {sections} sections")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
