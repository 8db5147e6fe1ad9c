"""Kind ``tabular``: our results against the reference implementation's per-run values.

The reference implementation is the widely used code of Sutton & Barto's Chapter 8 maze
experiments (GitHub ``ShangtongZhang/reinforcement-learning-an-introduction``,
``chapter08/maze.py``). Its per-run values, measured by running it, are in
``data/sutton_barto_reference/`` (provenance, licence and its differences from the book in
the README there). They are "reference implementation" values, not the book's: the book
publishes curves, not per-run data.

The summaries compared are declared here, before any of our numbers were set against them
(:data:`DECLARED`); the report prints the same declaration as its method text:

* **Figure 8.2** (check ``figure_8_2``), per planning steps n in {0, 5, 50}: the steps of
  episode 2, and each run's mean steps per episode over episodes 41-50.
* **Figure 8.4** (check ``blocking``), Dyna-Q and Dyna-Q+: cumulative reward at time steps
  1000 and 2900 (the reference's last index, 2999, is inflated by about 1).
* **Figure 8.5** (check ``shortcut``), Dyna-Q and Dyna-Q+: cumulative reward at 3000 and
  5900.
* **Example 8.4** (check ``prioritized_sweeping``), Dyna-Q and prioritized sweeping, per
  resolution k in 1..5: updates until the greedy path is accepted as optimal.

Tests: every summary by Welch's two-sample t-test (unequal variances, two-sided; Welch
1947) of our runs against the reference's, the family of one check corrected by Holm's
step-down method at level 0.05 (:func:`dyna.experiment.stats.holm`): "differs" when the
adjusted p-value is below 0.05. A non-significant difference is not evidence of sameness, so
the Figure 8.2 plateau (episodes 41-50) also gets a TOST equivalence test (two one-sided
Welch tests; Schuirmann 1987) with the margin stated in :data:`DECLARED` (1 step per
episode), Holm-corrected over its own family: "equivalent" when the adjusted p-value is
below 0.05.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from dyna.errors import ConfigError, MissingFileError

__all__ = ["ALPHA", "DECLARED", "REFERENCE_DIR", "Comparison", "Summary", "applies", "compare",
           "reference_values", "tost", "welch"]


#: Where the copied per-run values live (the repository's ``data/`` folder).
REFERENCE_DIR = Path(__file__).resolve().parents[4] / "data" / "sutton_barto_reference"

#: Family-wise level of the Holm-corrected tests.
ALPHA = 0.05

_FILES = {"figure_8_2": "figure_8_2_per_run.csv",
          "blocking": "figure_8_4_per_run_every100.csv",
          "shortcut": "figure_8_5_per_run_every100.csv",
          "prioritized_sweeping": "example_8_4_per_run.csv"}

#: Our agent names -> the reference files' method names.
METHODS = {"dyna_q": "Dyna-Q", "dyna_q_plus": "Dyna-Q+",
           "prioritized_sweeping": "Prioritized Sweeping"}


@dataclass(frozen=True)
class Summary:
    """One declared summary of one run.

    Attributes
    ----------
    check : str
        The report check it belongs to (``figure_8_2``, ``blocking``, ``shortcut``,
        ``prioritized_sweeping``).
    kind : {"episode", "window", "cumulative_reward", "updates_to_optimal"}
        ``episode``: steps in episode ``at``; ``window``: mean steps per episode over
        episodes ``at`` to ``until``; ``cumulative_reward``: at time step ``at``;
        ``updates_to_optimal``: at resolution ``at``.
    who : int or str
        Planning steps n (Figure 8.2) or our agent name.
    at, until : int
    margin : float
        TOST equivalence margin in the summary's unit (0: no equivalence test).
    """

    check: str
    kind: str
    who: object
    at: int
    until: int = 0
    margin: float = 0.0

    @property
    def label(self) -> str:
        """Readable name, e.g. ``n = 5, steps in episode 2``."""
        who = f"n = {self.who}" if self.check == "figure_8_2" else METHODS.get(self.who,
                                                                                 self.who)
        what = {"episode": f"steps in episode {self.at}",
                "window": f"mean steps per episode, episodes {self.at}-{self.until}",
                "cumulative_reward": f"cumulative reward at step {self.at}",
                "updates_to_optimal": f"updates until optimal, k = {self.at}"}[self.kind]
        return f"{who}, {what}"


def _declare() -> tuple:
    out = []
    for n in (0, 5, 50):
        out.append(Summary("figure_8_2", "episode", n, 2))
        out.append(Summary("figure_8_2", "window", n, 41, 50, margin=1.0))
    for check, steps in (("blocking", (1000, 2900)), ("shortcut", (3000, 5900))):
        for agent in ("dyna_q", "dyna_q_plus"):
            out += [Summary(check, "cumulative_reward", agent, t) for t in steps]
    for agent in ("dyna_q", "prioritized_sweeping"):
        out += [Summary("prioritized_sweeping", "updates_to_optimal", agent, k)
                for k in range(1, 6)]
    return tuple(out)


#: The summaries compared, declared before our numbers were compared with them.
DECLARED: tuple = _declare()


def _is_dyna_maze(env_id: str, kwargs: dict) -> bool:
    """Whether the env is the Dyna maze of Figure 8.2 at some resolution: ``dyna/DynaMaze-v0``,
    or ``dyna/AsciiMaze-v0`` with its default layout and no layout change."""
    from envs.maze import DYNA_MAZE

    if env_id == "dyna/DynaMaze-v0":
        return True
    if env_id != "dyna/AsciiMaze-v0":
        return False
    layouts = kwargs.get("layouts", DYNA_MAZE)
    if isinstance(layouts, (list, tuple)) and len(layouts) == 1:
        layouts = layouts[0]
    return layouts == DYNA_MAZE and not kwargs.get("change_at")


def applies(check: str, env_id: str, env_kwargs: dict | None = None) -> bool:
    """Whether a book check is about this env: the maze its book figure shows.

    ``figure_8_2``: the Dyna maze at resolution 1; ``prioritized_sweeping`` (Example 8.4): the
    Dyna maze at any resolution; ``blocking`` and ``shortcut``: ``dyna/BlockingMaze-v0``
    changing at step 1000 and ``dyna/ShortcutMaze-v0`` changing at step 3000. A kwarg left
    out takes the env's default.

    Parameters
    ----------
    check : str
        A check of ``analysis.checks``.
    env_id : str
        The requested env id.
    env_kwargs : dict, optional
        The env kwargs at one sweep point (the file's ``[env] kwargs`` with the point's).

    Raises
    ------
    ConfigError
        An unknown check (field ``check``).
    """
    kwargs = dict(env_kwargs or {})
    if check == "figure_8_2":
        return _is_dyna_maze(env_id, kwargs) and kwargs.get("resolution", 1) == 1
    if check == "prioritized_sweeping":
        return _is_dyna_maze(env_id, kwargs)
    if check == "blocking":
        return env_id == "dyna/BlockingMaze-v0" and kwargs.get("change_at", 1000) == 1000
    if check == "shortcut":
        return env_id == "dyna/ShortcutMaze-v0" and kwargs.get("change_at", 3000) == 3000
    raise ConfigError("check", check, f"expected one of {', '.join(_FILES)}")


def _read(check: str, folder: Path | None = None) -> pl.DataFrame:
    path = Path(folder or REFERENCE_DIR) / _FILES[check]
    if not path.is_file():
        raise MissingFileError("reference data", str(path))
    st = path.stat()
    return _read_csv(str(path.resolve()), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)
def _read_csv(path: str, mtime_ns: int, size: int) -> pl.DataFrame:
    """One file read once per version, keyed by its path, mtime and size (a rewritten file
    gets a new mtime): a report compares six summaries of one file, and the frame is never
    modified, only filtered into new ones."""
    return pl.read_csv(path)


def reference_values(summary: Summary, folder: str | Path | None = None) -> np.ndarray:
    """The reference implementation's per-run values of one summary.

    Returns
    -------
    ndarray of float64, shape (runs,)

    Raises
    ------
    MissingFileError
        The data file is not in ``folder`` (default :data:`REFERENCE_DIR`).
    ConfigError
        A summary the files do not hold (field ``summary``).
    """
    f = _read(summary.check, folder)
    if summary.kind in ("episode", "window"):
        f = f.filter(pl.col("planning_steps_n") == summary.who)
        cols = ([f"ep{summary.at}"] if summary.kind == "episode"
                else [f"ep{e}" for e in range(summary.at, summary.until + 1)])
        if f.height == 0 or any(c not in f.columns for c in cols):
            raise ConfigError("summary", summary.label, "not in the reference data")
        return f.select(cols).to_numpy().astype(np.float64).mean(axis=1)
    method = METHODS.get(summary.who)
    f = f.filter(pl.col("method") == method)
    if summary.kind == "cumulative_reward":
        col = f"t{summary.at}"
        if f.height == 0 or col not in f.columns:
            raise ConfigError("summary", summary.label, "not in the reference data")
        return f.get_column(col).to_numpy().astype(np.float64)
    f = f.filter(pl.col("resolution") == summary.at)
    if f.height == 0:
        raise ConfigError("summary", summary.label, "not in the reference data")
    return f.get_column("updates_until_optimal").to_numpy().astype(np.float64)


def welch(ours, ref, *, confidence: float = 0.95) -> dict:
    """Welch's two-sided t-test of mean(ours) - mean(ref) (scipy.stats.ttest_ind,
    ``equal_var=False``).

    Returns
    -------
    dict
        ``diff`` (float), ``low``/``high`` (Welch confidence interval of the difference),
        ``t``, ``df``, ``p`` (NaN when either sample has fewer than 2 values or both have
        zero variance).
    """
    from scipy import stats

    x, y = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    nan = {"diff": float(x.mean() - y.mean()) if x.size and y.size else math.nan,
           "low": math.nan, "high": math.nan, "t": math.nan, "df": math.nan, "p": math.nan}
    if x.size < 2 or y.size < 2 or (x.var() == 0 and y.var() == 0):
        return nan
    with warnings.catch_warnings():  # nearly constant samples: scipy warns, values stand
        warnings.simplefilter("ignore", RuntimeWarning)
        res = stats.ttest_ind(x, y, equal_var=False)
        ci = res.confidence_interval(confidence)
    return {"diff": float(x.mean() - y.mean()), "low": float(ci.low), "high": float(ci.high),
            "t": float(res.statistic), "df": float(res.df), "p": float(res.pvalue)}


def tost(ours, ref, margin: float) -> float:
    """p-value of the TOST equivalence test |mean(ours) - mean(ref)| < ``margin`` (two one-
    sided Welch t-tests; the larger of their p-values). NaN as :func:`welch`."""
    from scipy import stats

    x, y = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    if x.size < 2 or y.size < 2 or (x.var() == 0 and y.var() == 0):
        return math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lower = stats.ttest_ind(x + margin, y, equal_var=False, alternative="greater").pvalue
        upper = stats.ttest_ind(x - margin, y, equal_var=False, alternative="less").pvalue
    return float(max(lower, upper))


@dataclass(frozen=True)
class Comparison:
    """One summary, ours against the reference implementation's (see :func:`compare`)."""

    summary: Summary
    ours_mean: float
    ours_sem: float
    ours_n: int
    ref_mean: float
    ref_sem: float
    ref_n: int
    welch: dict
    p_holm: float
    tost_p: float = math.nan
    tost_p_holm: float = math.nan

    @property
    def differs(self) -> bool | None:
        """True when the Holm-adjusted Welch p-value is below :data:`ALPHA` (None: no test)."""
        return None if not math.isfinite(self.p_holm) else self.p_holm < ALPHA

    @property
    def equivalent(self) -> bool | None:
        """True when the Holm-adjusted TOST p-value is below :data:`ALPHA` (None: none)."""
        return None if not math.isfinite(self.tost_p_holm) else self.tost_p_holm < ALPHA


def _sem(x: np.ndarray) -> float:
    return float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else math.nan


def _holm(p: list[float]) -> list[float]:
    from dyna.experiment.stats import holm

    idx = [i for i, v in enumerate(p) if math.isfinite(v)]
    out = [math.nan] * len(p)
    if idx:
        for i, v in zip(idx, holm([p[i] for i in idx])):
            out[i] = float(v)
    return out


def compare(ours: dict, folder: str | Path | None = None) -> list[Comparison]:
    """Compare our per-run values with the reference implementation's.

    Parameters
    ----------
    ours : dict
        :class:`Summary` -> our per-run values (array-like, one value per run); summaries
        of one check form one Holm family.
    folder : str or Path, optional
        Folder of the reference files (default :data:`REFERENCE_DIR`).

    Returns
    -------
    list of Comparison
        In the order of ``ours``.

    Raises
    ------
    MissingFileError
        A reference file is missing.
    """
    rows = []
    for s, values in ours.items():
        x = np.asarray(values, np.float64).reshape(-1)
        x = x[np.isfinite(x)]
        y = reference_values(s, folder)
        rows.append((s, x, y, welch(x, y), tost(x, y, s.margin) if s.margin else math.nan))
    out = []
    for check in dict.fromkeys(s.check for s in ours):
        mine = [r for r in rows if r[0].check == check]
        p_adj = _holm([r[3]["p"] for r in mine])
        with_tost = [i for i, r in enumerate(mine) if math.isfinite(r[4])]
        t_adj = dict(zip(with_tost, _holm([mine[i][4] for i in with_tost])))
        for i, (s, x, y, w, tp) in enumerate(mine):
            out.append(Comparison(s, float(x.mean()) if x.size else math.nan, _sem(x), x.size,
                                  float(y.mean()), _sem(y), y.size, w, p_adj[i], tp,
                                  t_adj.get(i, math.nan)))
    order = {s: j for j, s in enumerate(ours)}
    return sorted(out, key=lambda c: order[c.summary])
