"""Compare two ``dyna run`` output folders by content: same tables, report and manifest?

    python benchmarks/compare_outputs.py DIR_A DIR_B

Prints one line per file, ``same`` or ``differs`` with where:

- every Parquet table (found in subfolders too, matched by relative path): read with
  polars and compared with ``DataFrame.equals`` (nulls equal); also the SHA-256 of the two
  files. A table that differs names its first differing column (in DIR_A's order) and how
  many of its rows differ; a table whose content is equal but whose file bytes are not is
  ``same`` with ``file sha256 differs``.
- every Markdown file (``report.md``, checks): line by line, without the lines that give a
  duration or the git commit (:data:`table_hashes.VOLATILE`).
- ``manifest.json``: as JSON, without the keys that change between two runs of the same
  experiment (:data:`MANIFEST_VOLATILE`: created time, timing, source file and git commit).

When neither folder holds a ``manifest.json`` but their subfolders do, each pair of
subfolders of the same name is compared (lines prefixed ``name/``): point it at two
folders of runs, e.g. ``cmp/before cmp/after``. Two folders of tables without any
manifest are compared file by file.

Exit status: 0 when everything is the same, 1 when anything differs or is in one folder
only, 2 when DIR_A or DIR_B is not a folder (one line naming it).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import sys
from pathlib import Path

import polars as pl
from table_hashes import VOLATILE

from dyna.errors import MissingFileError

#: Top-level manifest keys that differ between two runs of the same experiment and code.
MANIFEST_VOLATILE = ("created_utc", "timing", "source", "git")
#: Characters of a differing report line shown.
SHOWN = 60


def sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rows_differing(a: pl.Series, b: pl.Series) -> int:
    """Number of rows where two equally long series differ (two nulls or two NaNs are equal)."""
    mask = a.ne_missing(b)
    if a.dtype.is_float() and b.dtype.is_float():
        mask = mask & ~(a.is_nan() & b.is_nan())
    return int(mask.sum())


def compare_table(path_a: Path, path_b: Path) -> tuple[bool, str]:
    """Compare two Parquet tables; return (same, the line's text after the file name)."""
    a, b = pl.read_parquet(path_a), pl.read_parquet(path_b)
    same_bytes = sha256(path_a) == sha256(path_b)
    if a.equals(b, null_equal=True):
        note = "file sha256 equal" if same_bytes else "file sha256 differs"
        return True, f"same ({a.height} rows; {note})"
    if a.height != b.height:
        return False, f"differs: {a.height} vs {b.height} rows"
    shared = [c for c in a.columns if c in b.columns]
    if shared == a.columns == b.columns:
        return False, "differs: " + first_difference(a, b)
    only_a = [c for c in a.columns if c not in b.columns]
    only_b = [c for c in b.columns if c not in a.columns]
    return False, (f"differs: columns only in A {only_a}, only in B {only_b}; "
                   f"the {len(shared)} shared columns: {first_difference(a, b, shared)}")


def first_difference(a: pl.DataFrame, b: pl.DataFrame, columns: list[str] | None = None) -> str:
    """Name the first of ``columns`` (default: all of ``a``'s) in which two equally long
    tables differ, with how many rows differ; ``"same"`` when none does."""
    for name in a.columns if columns is None else columns:
        if a[name].dtype != b[name].dtype:
            return f"column {name!r} dtype {a[name].dtype} vs {b[name].dtype}"
        if not a[name].equals(b[name], null_equal=True):
            count = rows_differing(a[name], b[name])
            return f"column {name!r} first, {count} of {a.height} rows differ"
    return "same" if columns is not None else "column order"


def stable_lines(path: Path) -> list[str]:
    """A Markdown file's lines without those that give a duration or the git commit."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if not VOLATILE.search(line)]


def compare_markdown(path_a: Path, path_b: Path) -> tuple[bool, str]:
    """Compare two Markdown files without their volatile lines."""
    a, b = stable_lines(path_a), stable_lines(path_b)
    if a == b:
        return True, f"same ({len(a)} lines without timing)"
    changes = [op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
               if op[0] != "equal"]
    removed = sum(i2 - i1 for _, i1, i2, _, _ in changes)
    added = sum(j2 - j1 for _, _, _, j1, j2 in changes)
    first = changes[0][1]
    shown = a[first][:SHOWN] if first < len(a) else "(end)"
    return False, (f"differs: {removed} lines of A replaced by {added} of B, first at "
                   f"stable line {first + 1}: {shown!r}")


def leaf_paths(value, prefix: str = "") -> dict[str, object]:
    """Flatten nested dicts and lists to {dotted path: leaf value}."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = ((str(i), v) for i, v in enumerate(value))
    else:
        return {prefix: value}
    out: dict[str, object] = {}
    for key, sub in items:
        out.update(leaf_paths(sub, f"{prefix}.{key}" if prefix else str(key)))
    return out


def compare_manifest(path_a: Path, path_b: Path) -> tuple[bool, str]:
    """Compare two manifest.json files without :data:`MANIFEST_VOLATILE` keys."""
    a, b = (json.loads(p.read_text(encoding="utf-8")) for p in (path_a, path_b))
    for key in MANIFEST_VOLATILE:
        a.pop(key, None)
        b.pop(key, None)
    flat_a, flat_b = leaf_paths(a), leaf_paths(b)
    keys = sorted(k for k in flat_a.keys() | flat_b.keys() if flat_a.get(k) != flat_b.get(k))
    ignored = ", ".join(MANIFEST_VOLATILE)
    if not keys:
        return True, f"same (without {ignored})"
    return False, f"differs: {len(keys)} values, first {keys[:3]}"


def compared_files(root: Path) -> set[str]:
    """Relative paths of the files compared in one output folder."""
    return {str(p.relative_to(root)) for p in root.rglob("*")
            if p.is_file() and (p.suffix in (".parquet", ".md") or p.name == "manifest.json")}


def compare_folders(dir_a: Path, dir_b: Path, prefix: str = "") -> list[tuple[bool, str]]:
    """Compare one pair of output folders; one (same, line) per file."""
    lines = []
    files_a, files_b = compared_files(dir_a), compared_files(dir_b)
    for rel in sorted(files_a | files_b):
        if rel not in files_b or rel not in files_a:
            lines.append((False, f"{prefix}{rel}: only in {'A' if rel in files_a else 'B'}"))
            continue
        path_a, path_b = dir_a / rel, dir_b / rel
        if rel.endswith(".parquet"):
            same, text = compare_table(path_a, path_b)
        elif rel.endswith(".md"):
            same, text = compare_markdown(path_a, path_b)
        else:
            same, text = compare_manifest(path_a, path_b)
        lines.append((same, f"{prefix}{rel}: {text}"))
    return lines


def compare(dir_a: Path, dir_b: Path) -> list[tuple[bool, str]]:
    """Compare two output folders, or each same-named pair of their output subfolders."""
    if (dir_a / "manifest.json").exists() or (dir_b / "manifest.json").exists():
        return compare_folders(dir_a, dir_b)
    names_a = {p.name for p in dir_a.iterdir() if (p / "manifest.json").exists()}
    names_b = {p.name for p in dir_b.iterdir() if (p / "manifest.json").exists()}
    if not names_a | names_b:
        return compare_folders(dir_a, dir_b)
    lines = []
    for name in sorted(names_a | names_b):
        if name in names_a and name in names_b:
            lines.extend(compare_folders(dir_a / name, dir_b / name, f"{name}/"))
        else:
            lines.append((False, f"{name}/: only in {'A' if name in names_a else 'B'}"))
    return lines


def main(argv: list[str] | None = None) -> int:
    """Command line: compare DIR_A with DIR_B and print one line per file."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Exit status: 0 all same, 1 something differs, 2 a folder does not exist.")
    parser.add_argument("dir_a", type=Path, metavar="DIR_A", help="first output folder")
    parser.add_argument("dir_b", type=Path, metavar="DIR_B", help="second output folder")
    args = parser.parse_args(argv)
    for field, path in (("DIR_A", args.dir_a), ("DIR_B", args.dir_b)):
        if not path.is_dir():
            print(MissingFileError(field, path, "not a folder"), file=sys.stderr)
            return 2
    lines = compare(args.dir_a, args.dir_b)
    for _, text in lines:
        print(text)
    return 0 if all(same for same, _ in lines) else 1


if __name__ == "__main__":
    raise SystemExit(main())
