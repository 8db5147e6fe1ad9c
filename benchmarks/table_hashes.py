"""Hash the tables and reports of every shipped experiment, to show a change kept behaviour.

Runs each ``experiments/*.toml`` with a few runs (``--runs``, default 2) on the in-process
backend and prints, as JSON, a SHA-256 per output file: each Parquet table as its CSV text,
each Markdown file (report, checks) with its volatile lines left out (a line giving a
duration in seconds or minutes, or the git commit). Two commits that give the same JSON
give the same tables and reports.

    python benchmarks/table_hashes.py --out before.json
    python benchmarks/table_hashes.py --out after.json && diff before.json after.json

Files with ``[calibration]`` run their pilot (``--pilot``) from a copy in a scratch folder
(the pilot log it appends to stays there): their confirmatory seeds are refused to anything
but the frozen file's own run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
#: Lines that differ between two runs of the same code: durations and the git commit.
VOLATILE = re.compile(r"\d(\.\d+)?\s*(s|min|seconds|minutes)\b|\btime\b|\bgit commit\b",
                      re.IGNORECASE)


def file_hash(path: Path) -> str:
    """SHA-256 of a Parquet table's CSV text or of a Markdown file without volatile lines."""
    if path.suffix == ".parquet":
        text = pl.read_parquet(path).write_csv()
    else:
        lines = path.read_text(encoding="utf-8").splitlines()
        text = "\n".join(line for line in lines if not VOLATILE.search(line))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def hash_experiment(toml: Path, runs: int, scratch: Path) -> dict[str, str]:
    """Run one experiment into ``scratch`` and hash its tables and Markdown files."""
    out = scratch / toml.stem
    command = [sys.executable, "-m", "dyna.cli", "run", str(toml), "--runs", str(runs),
               "--out", str(out), "--no-progress", "--backend", "inprocess"]
    text = toml.read_text(encoding="utf-8")
    if "[calibration]" in text:
        # a pilot appends to a log beside its file: run a copy, so the repository is untouched
        copy = scratch / "pilots" / toml.name
        copy.parent.mkdir(exist_ok=True)
        copy.write_text(text, encoding="utf-8")
        command = [sys.executable, "-m", "dyna.cli", "run", str(copy), "--pilot",
                   "--out", str(out), "--no-progress", "--backend", "inprocess"]
    done = subprocess.run(command, cwd=scratch, capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "?"}
    return {str(p.relative_to(out)): file_hash(p) for p in sorted(out.rglob("*"))
            if p.suffix in (".parquet", ".md")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--out", type=Path, help="write the JSON here (default: stdout)")
    parser.add_argument("files", nargs="*", type=Path,
                        help="experiment files (default: experiments/*.toml)")
    args = parser.parse_args(argv)
    files = args.files or sorted((ROOT / "experiments").glob("*.toml"))
    with tempfile.TemporaryDirectory() as scratch:
        hashes = {f.stem: hash_experiment(f.resolve(), args.runs, Path(scratch))
                  for f in files}
    text = json.dumps(hashes, indent=1, sort_keys=True) + "\n"
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
