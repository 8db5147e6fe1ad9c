"""Shared helpers of every kind's report.md: numbers, intervals, tables, labels, plot links.

Part of the experiment machinery: imports no experiment kind.
"""

from __future__ import annotations

import math
from pathlib import Path

from dyna.experiment.stats import Interval

__all__ = ["SHORT_HASH", "ci", "fmt", "label", "md_table", "plots_section", "provenance",
           "short_hash", "write_report_file"]


#: Hex digits of a sha256 shown in reports (the full digests are in manifest.json).
SHORT_HASH = 12


def short_hash(hexdigest: str | None) -> str:
    """The first :data:`SHORT_HASH` hex digits of a sha256 (``"?"`` when missing)."""
    return (hexdigest or "?")[:SHORT_HASH]


def label(name: str, detail: str) -> str:
    """``name``, followed by ``(detail)`` unless the name already says it.

    ``label("n=0", "n = 0") == "n=0"`` (spaces are ignored), ``label("direct", "n = 0") ==
    "direct (n = 0)"``, ``label("mean_min10", "mean") == "mean_min10 (mean)"``.
    """
    if "".join(str(name).split()) == "".join(str(detail).split()):
        return str(name)
    return f"{name} ({detail})"


def fmt(x) -> str:
    x = float(x)
    if not math.isfinite(x):
        return "n/a"
    if abs(x) >= 100:
        return f"{x:.1f}"
    return f"{x:.3g}"


def ci(iv: Interval) -> str:
    if not math.isfinite(float(iv.estimate)):
        return "n/a"
    if not (math.isfinite(float(iv.low)) and math.isfinite(float(iv.high))):
        return f"{fmt(iv.estimate)} (one run: no interval)"
    return f"{fmt(iv.estimate)} [{fmt(iv.low)}, {fmt(iv.high)}]"


def md_table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def plots_section(folder: Path) -> list[str]:
    plots = sorted((folder / "plots").glob("*.png"))
    if not plots:
        return []
    lines = ["", "## Plots", ""]
    for p in plots:
        lines.append(f"![{p.stem.replace('_', ' ')}](plots/{p.name})")
    per_run = sorted((folder / "plots" / "runs").glob("*.png"))
    if per_run:
        lines += ["", f"{len(per_run)} per-run plots in `plots/runs/`."]
    return lines


def write_report_file(folder: str | Path, text: str) -> Path:
    """Write ``text`` as ``folder/report.md``, whole or not at all (a reader sees the old
    report or the new one, never a part: :func:`dyna.fileio.atomic.atomic_write`), and
    return its path.

    Raises
    ------
    dyna.errors.FileWriteError, dyna.errors.MissingFileError
        The system refused the write, or ``folder`` does not exist; the old report, if
        any, is unchanged.
    """
    from dyna.fileio.atomic import atomic_write

    path = Path(folder) / "report.md"
    atomic_write(path, text, field="report.md")
    return path


def provenance(manifest: dict) -> str:
    """Where the numbers of a report come from, for its setup section: ``git commit
    `<12 hex>```` of the run (``with uncommitted changes`` when its tree was dirty) and,
    when ``dyna report`` rewrote the report at another commit, ``; this report written at
    commit `<12 hex>` from the run's tables`` (``manifest["report"]["git"]``)."""
    def at(git: dict) -> str:
        commit = git.get("commit")
        if not commit:
            return f"not a git checkout ({git.get('reason', 'no commit recorded')})"
        return f"git commit `{commit[:SHORT_HASH]}`" + (" with uncommitted changes"
                                                        if git.get("dirty") else "")
    run = manifest.get("git") or {}
    text = at(run)
    rewrite = (manifest.get("report") or {}).get("git")
    if isinstance(rewrite, dict) and rewrite != run:
        text += f"; this report written at {at(rewrite)} from the run's tables"
    return text
