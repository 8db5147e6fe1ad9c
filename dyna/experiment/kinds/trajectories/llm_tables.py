"""Kind ``trajectories``: the tables of an ``[llm]`` reviewer's run.

- ``llm_exchanges``: every request and answer, redacted, with the seconds it took
  (columns ``variant, run`` then :data:`~dyna.experiment.kinds.trajectories.llm.EXCHANGE_COLUMNS`);
  ``dyna run FILE --replay DIR`` answers from it;
- ``llm_reviews`` and ``llm_lessons``: :mod:`dyna.experiment.kinds.trajectories.review_log`.
"""

from __future__ import annotations

import polars as pl

from dyna.experiment.kinds.trajectories.llm import EXCHANGE_COLUMNS
from dyna.experiment.kinds.trajectories.review_log import LESSON_COLUMNS, REVIEW_COLUMNS

__all__ = ["llm_tables"]

_TYPES = {"run": pl.Int64, "episode": pl.Int64, "seq": pl.Int64, "turns": pl.Int64,
          "prompt_tokens": pl.Int64, "completion_tokens": pl.Int64, "personal": pl.Int64,
          "seconds": pl.Float64, "success": pl.Boolean, "quotes_digest": pl.Boolean,
          "misattributes": pl.Boolean}


def _frame(rows: list[dict], columns: tuple) -> pl.DataFrame:
    schema = {"variant": pl.String, **{c: _TYPES.get(c, pl.String) for c in columns}}
    return pl.DataFrame(rows, schema=schema)


def llm_tables(config, jobs, results) -> dict[str, pl.DataFrame]:
    """``llm_exchanges``, ``llm_reviews`` and ``llm_lessons`` of the loop jobs (module
    docstring), each sorted by variant (in the file's order), run and position."""
    order = {v: i for i, v in enumerate(config.variants)}
    ex, reviews, lessons = [], [], []
    for job, res in zip(jobs, results):
        if "llm_reviews" not in res:
            continue
        variant = config.variants[job.variant]
        for r, exchanges in zip(job.run_indices, res["exchanges"]):
            ex += [{"variant": variant, "run": int(r), **{k: e[k] for k in EXCHANGE_COLUMNS}}
                   for e in exchanges]
        reviews += [{"variant": variant, **row} for row in res["llm_reviews"]]
        lessons += [{"variant": variant, **row} for row in res["llm_lessons"]]
    rank = pl.col("variant").replace_strict(order, return_dtype=pl.Int64)
    out = {}
    for name, rows, cols, pos in (("llm_exchanges", ex, ("run",) + EXCHANGE_COLUMNS, "seq"),
                                  ("llm_reviews", reviews, REVIEW_COLUMNS, "episode"),
                                  ("llm_lessons", lessons, LESSON_COLUMNS, "episode")):
        frame = _frame(rows, cols)
        out[name] = (frame.with_columns(rank.alias("_rank"))
                     .sort(["_rank", "run", pos], maintain_order=True).drop("_rank"))
    return out
