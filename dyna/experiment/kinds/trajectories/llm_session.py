"""Kind ``trajectories``: a job whose loop variant is reviewed by the ``[llm]`` model.

:func:`run_llm_job` starts the local model server when ``base_url = "local"`` (not when
replaying), and for each run index of the job replays the recorded runs through the loop
with an :class:`LLMSession`: an :class:`~dyna.loops.llm.LLMReviewer` on a
:class:`~dyna.experiment.kinds.trajectories.llm.TimedClient` (answering from the
recording of ``payload["replay"]`` when set) and a
:class:`~dyna.experiment.kinds.trajectories.review_log.ReviewLog`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable


from dyna.experiment.kinds.trajectories.llm import LOCAL, TimedClient, endpoint_of
from dyna.experiment.kinds.trajectories.review_log import ReviewLog

__all__ = ["LLMSession", "recorded_exchanges", "run_llm_job"]


class LLMSession:
    """The model reviewer of one replay (one run index) and what it did.

    Parameters
    ----------
    llm : dict
        The checked ``[llm]`` table.
    base_url : str or None
        The started local server's URL (None: the table's ``base_url``).
    run : int
        The run index.
    recorded : list of dict, optional
        This replay's recorded exchanges (``llm_exchanges`` rows): answer from them.
    """

    def __init__(self, llm: dict, base_url: str | None, run: int, recorded=None):
        self.llm = llm
        self.client = TimedClient(endpoint_of(llm, base_url), llm["max_new_tokens"],
                                  recorded)
        self.log = ReviewLog(run)
        self._reviewer = None

    def reviewer(self, store: str, run: int):
        """The :class:`~dyna.loops.llm.LLMReviewer` for ``store`` (``run`` is the run
        index, which the model reviewer does not use: it is the same for every index)."""
        from dyna.loops.llm import LLMReviewer
        llm = self.llm
        self._reviewer = LLMReviewer(self.client, store, max_lessons=llm["max_lessons"],
                                     max_tokens=llm["review_max_tokens"],
                                     max_turns=llm["review_max_turns"])
        return self._reviewer

    def finish(self, loop, ctx, digest, trajectory, values):
        """``loop.finish(ctx, digest)``, logged (:meth:`ReviewLog.add`; what the reviewer
        was shown: the system prompt, the digest and the tool's schema)."""
        n = len(self.client.seconds)
        rec = loop.finish(ctx, digest)
        shown = "\n".join([m["content"] for m in self._reviewer.messages(digest, None)]
                          + [json.dumps(self._reviewer.tool, ensure_ascii=False)])
        self.log.add(len(self.log.reviews) + 1, trajectory, digest, rec.review,
                     sum(self.client.seconds[n:]), shown, values)
        return rec

    def close(self) -> None:
        """Close the model client and its connections; the session is not used after."""
        self.client.close()


def recorded_exchanges(folder: str, variant: str) -> dict[int, list]:
    """Run index -> that replay's recorded exchanges, from
    ``folder/llm_exchanges.parquet``."""
    import polars as pl
    t = pl.read_parquet(f"{folder}/llm_exchanges.parquet").filter(
        pl.col("variant") == variant)
    out: dict[int, list] = {}
    for row in t.iter_rows(named=True):
        out.setdefault(int(row["run"]), []).append(row)
    return out


def _server(llm: dict, replaying: bool):
    """The local model server for ``base_url = "local"`` (a context manager), else a
    context that gives None."""
    if llm["base_url"] != LOCAL or replaying:
        return contextlib.nullcontext(None)
    from dyna.llm_local import LocalServer
    return LocalServer(n_ctx=llm["n_ctx"], threads=llm["threads"])


def _check_replayed(payload: dict, run: int, asked: int, recorded: int) -> None:
    """Raise unless a replay asked exactly the recorded requests (a request missing from
    the recording ends that review ``failed`` inside the loop, which never raises).

    Raises
    ------
    ReplayError
        Field ``--replay``, naming the variant, the run and both counts.
    """
    if asked != recorded:
        from dyna.loops.llm import ReplayError
        raise ReplayError("--replay", payload["replay"],
                          f"variant {payload['variant_name']!r}, run {run}: {asked} of "
                          f"{recorded} recorded requests were answered from the recording "
                          "(the code or the recording differ)")


def run_llm_job(job, replay_one: Callable) -> dict:
    """Every run index of a loop job with the model reviewer.

    Parameters
    ----------
    job : Job
    replay_one : callable
        ``replay_one(run_index, session) -> (row, episode_columns)``.

    Returns
    -------
    dict
        ``runs`` (a row dict per run index), ``episodes`` (the episode columns of each
        run index, in order; the caller stacks them), ``llm_reviews`` and ``llm_lessons``
        (lists of row dicts) and ``exchanges`` (one list per run index).

    Raises
    ------
    ReplayError
        Replaying, and a run asked other requests than the recorded ones.
    """
    p = job.payload
    recorded = recorded_exchanges(p["replay"], p["variant_name"]) if p.get("replay") \
        else None
    rows, eps, reviews, lessons, exchanges = [], [], [], [], []
    with _server(p["llm"], recorded is not None) as server:
        for r in job.run_indices:
            session = LLMSession(p["llm"], server.base_url if server else None, r,
                                 None if recorded is None else recorded.get(r, []))
            try:
                row, ep = replay_one(r, session)
            finally:
                session.close()
            if recorded is not None:
                _check_replayed(p, r, len(session.client.seconds), len(recorded.get(r, [])))
            rows.append(row)
            eps.append(ep)
            reviews += session.log.reviews
            lessons += session.log.lessons
            exchanges.append(session.client.exchanges())
    return {"runs": rows, "episodes": eps, "llm_reviews": reviews, "llm_lessons": lessons,
            "exchanges": exchanges}
