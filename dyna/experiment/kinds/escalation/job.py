"""Kind ``escalation``: data files, task streams, policies and the job (a group for a block
of runs)."""

from __future__ import annotations

import functools
import hashlib
import zlib
from pathlib import Path

import numpy as np
import polars as pl

from dyna.errors import ConfigError, MissingFileError
from dyna.experiment.backends import Job
from dyna.experiment.kinds.escalation.metrics import optimal_aurc, oracle_actions, risk_coverage

__all__ = ["cached_log", "checkpoints_for", "crc_key", "file_sha", "load_dates",
           "resolve_data_path", "run_job"]


# =========================================================================== data

def resolve_data_path(path: str, field_name: str, base_dir: str | Path | None = None) -> Path:
    """A data path of an experiment file: absolute as given, relative against
    ``base_dir`` (the experiment file's folder; None: the working directory).

    Raises
    ------
    MissingFileError
        No such file; when it is missing beside the experiment file but a file of that
        name exists from the working directory, the message names both (paths in an
        experiment file are relative to its folder, so the run is the same from anywhere).
    """
    p = Path(path)
    if p.is_absolute() or base_dir is None:
        if p.is_file():
            return p.resolve()
        raise MissingFileError(field_name, path)
    cand = Path(base_dir) / p
    if cand.is_file():
        return cand.resolve()
    if p.is_file():
        raise MissingFileError(field_name, path, f"no such file {str(cand)!r} (paths are "
                               "relative to the experiment file's folder); a file "
                               f"{str(p.resolve())!r} exists from the working directory")
    raise MissingFileError(field_name, path, f"no such file {str(cand)!r} (relative to the "
                           "experiment file's folder)")


@functools.lru_cache(maxsize=8)
def cached_log(path: str, sha: str):
    """Outcome log, its :class:`envs.escalation.ReplayIndex` and per-(system, type) true
    rates, cached per process (keyed by path and content hash)."""
    from envs.escalation import ReplayIndex, load_outcomes

    frame = load_outcomes(path)
    rates = frame.group_by("system", "task_type").agg(pl.col("success").mean())
    rate = {(s, t): float(r) for s, t, r in rates.iter_rows()}
    return frame, ReplayIndex(frame), rate


def load_dates(path: str | None) -> dict | None:
    """System -> release date (text) from a CSV with columns ``system`` and ``date``; None
    without a path.

    Raises
    ------
    ConfigError
        Field ``systems_file``: the file lacks one of the two columns.
    """
    if not path:
        return None
    frame = pl.read_csv(path, infer_schema_length=0)
    if "system" not in frame.columns or "date" not in frame.columns:
        raise ConfigError("systems_file", path, "needs columns 'system' and 'date'")
    return dict(zip(frame.get_column("system").to_list(), frame.get_column("date").to_list()))


def file_sha(path: Path) -> str:
    """SHA-256 (hex) of a file's bytes: the cache key and manifest record of a data file."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def crc_key(*parts) -> int:
    """CRC-32 of the parts' texts joined by a unit separator: a stable integer naming a
    stream (scenario, system) in a run's seed."""
    return zlib.crc32("\x1f".join(str(p) for p in parts).encode())


# =========================================================================== the job

def checkpoints_for(T: int, n: int) -> np.ndarray:
    """Checkpoint steps in 1..T: ``n`` log-spaced and ``n`` evenly spaced ones (unique,
    increasing, T included), so curves read well on log and on linear axes."""
    ck = np.unique(np.r_[np.round(np.geomspace(1, T, n)), np.round(np.linspace(1, T, n))]
                   .astype(np.int64))
    return ck[(ck >= 1) & (ck <= T)]


def _stream(payload: dict, run: int) -> dict:
    """The stream of one run (same for every policy and feedback mode)."""
    from envs.escalation import synthetic_stream

    rng = np.random.default_rng([payload["seed"], payload["stream_key"], run])
    if payload["source"] == "synthetic":
        prm = payload["params"]
        s = synthetic_stream(rng=rng, n_steps=prm["steps"],
                             **{k: v for k, v in prm.items() if k != "steps"})
        s["rates_tk"] = s["rates"]
        s["c_act"] = None
        return s
    _, index, rate = cached_log(payload["data"], payload["data_sha"])
    names = index.type_names
    if payload["system"] == "all_by_date":
        s = index.date_order(rng, order=payload["order"], dates=payload["dates"])
    else:
        s = index.stream(payload["system"], rng, order=payload["order"])
    systems = s["system"]
    s["p"] = np.array([rate[(sy, names[k])] for sy, k in zip(systems, s["types"])])
    # true rate of every type at every step: the current system's rate (NaN if absent)
    sys_rates = {}
    rt = np.empty((len(systems), len(names)))
    for t, sy in enumerate(systems):
        if sy not in sys_rates:
            sys_rates[sy] = np.array([rate.get((sy, n), np.nan) for n in names])
        rt[t] = sys_rates[sy]
    s["rates_tk"] = rt
    s["verified"] = np.ones(len(systems), dtype=bool)
    s["change_at"] = s.get("change_at", [])
    c = payload["costs"]
    s["c_act"] = s["cost_usd"] * c["act_cost_scale"] if c["act_cost"] == "cost_usd" else None
    return s


def run_job(job: Job) -> dict:
    """Run one (variant, risk class) group at one (stream, feedback) point for a block of
    runs; top-level so process pools and Ray can pickle it.

    Returns
    -------
    dict
        Arrays with a leading run axis ``R = len(job.run_indices)`` (see
        :meth:`EscalationKind.build_tables` for the columns), ``agreement_sum`` of shape
        (T,) int64 summed over the block's runs, ``competence`` (run 0 only),
        ``change_at`` (int64, the tasks after which the stream's rates or system change)
        and ``stream_systems`` (list of str: the systems a date-ordered replay plays one
        after the other, one more than ``change_at``; empty for other streams). Both are
        the same for every run of a stream (each system contributes all its tasks).
    """
    from dyna.competence import prior_shapes
    from dyna.escalation import run_policies

    p = job.payload
    policy = p["policy"]
    R = len(job.run_indices)
    streams = [_stream(p, r) for r in job.run_indices]
    T = len(streams[0]["types"])
    K = p["n_types"]
    types = np.stack([s["types"] for s in streams])
    outcomes = np.stack([s["outcomes"] for s in streams])
    verified = np.stack([s["verified"] for s in streams])
    p_true = np.stack([s["p"] for s in streams])
    c_e, c_f, c_a = p["c_escalate"], p["c_failure"], p["c_act"]
    if streams[0]["c_act"] is not None:
        c_a = np.stack([s["c_act"] for s in streams])
    u = None
    if policy.randomised:
        u = np.stack([np.random.default_rng([p["seed"], p["stream_key"], r, 1]).random((T, 2))
                      for r in job.run_indices])
    ck = checkpoints_for(T, p["checkpoints"])
    res = run_policies([policy], np.zeros(R, dtype=np.int64), types, outcomes, n_types=K,
                       c_escalate=c_e, c_failure=c_f, c_act=c_a, verified=verified,
                       requires_provenance=p["requires_provenance"],
                       prior=prior_shapes(p["prior"]), discount=p["discount"],
                       discount_clock=p["discount_clock"], feedback=p["feedback"], u=u,
                       checkpoints=ck)
    act, cost = res["act"], res["cost"]
    c_a_arr = np.broadcast_to(np.asarray(c_a, dtype=np.float64)
                              if np.ndim(c_a) == 2 else np.float64(c_a), (R, T))
    o_act = oracle_actions(p_true, c_e, c_f, c_a_arr)
    o_cost = np.where(o_act, c_a_arr + np.where(outcomes, 0.0, c_f), c_e)
    task_cost = np.where(outcomes, np.minimum(c_e, c_a_arr), np.minimum(c_e, c_a_arr + c_f))
    gap = np.abs(c_a_arr + (1.0 - p_true) * c_f - c_e)
    pseudo = np.where(act != o_act, gap, 0.0)
    fail = act & ~outcomes
    idx = ck - 1
    cum = lambda x: np.cumsum(x, axis=1)[:, idx]  # noqa: E731
    losses = (~outcomes).astype(np.float64)
    grid = np.linspace(1.0 / p["coverage_points"], 1.0, p["coverage_points"])
    rc_rows, aurc_v, aurc_opt, aurc_type = [], [], [], []
    for i in range(R):
        cov, risk = risk_coverage(res["score"][i], losses[i])
        rc_rows.append(risk[np.ceil(grid * T).astype(np.int64) - 1])
        aurc_v.append(float(risk.mean()))
        aurc_opt.append(optimal_aurc(losses[i]))
        # the type oracle's score: the true rate of the task's type when it arrives
        aurc_type.append(float(risk_coverage(p_true[i], losses[i])[1].mean()))
    a_ck, b_ck = res["a_ck"], res["b_ck"]  # (C, R, K)
    mean_ck = a_ck / (a_ck + b_ck)
    rates_ck = np.stack([s["rates_tk"][idx] for s in streams], axis=1)  # (C, R, K)
    err = np.abs(mean_ck - rates_ck)
    abs_err = np.nanmean(err, axis=2).T  # (R, C)
    out = {
        "steps": np.full(R, T, dtype=np.int64),
        "total_cost": cost.sum(axis=1),
        "oracle_type_cost": o_cost.sum(axis=1),
        "oracle_task_cost": task_cost.sum(axis=1),
        "pseudo_regret": pseudo.sum(axis=1),
        "escalations": (~act).sum(axis=1).astype(np.int64),
        "failures": fail.sum(axis=1).astype(np.int64),
        "agent_failures": (~outcomes).sum(axis=1).astype(np.int64),
        "evidence": (a_ck[-1] + b_ck[-1]).sum(axis=1) - K * sum(prior_shapes(p["prior"])),
        "agreement": (act == o_act).mean(axis=1),
        "aurc": np.asarray(aurc_v), "aurc_optimal": np.asarray(aurc_opt),
        "aurc_type_oracle": np.asarray(aurc_type),
        "final_abs_error": abs_err[:, -1],
        "checkpoints": ck,
        "cum_cost": cum(cost), "cum_regret_type": cum(cost - o_cost),
        "cum_regret_task": cum(cost - task_cost), "cum_pseudo_regret": cum(pseudo),
        "cum_escalations": cum((~act).astype(np.float64)), "abs_error": abs_err,
        "coverage": grid, "risk": np.asarray(rc_rows),
        "agreement_sum": (act == o_act).sum(axis=0).astype(np.int64),
        "change_at": np.asarray(streams[0].get("change_at", []) or
                                p["params"].get("change_at", []), dtype=np.int64),
        # the systems one after the other (a date-ordered replay), empty for other streams
        "stream_systems": [str(x) for x in streams[0].get("systems", [])],
    }
    if 0 in job.run_indices and p["store_competence"]:
        i = job.run_indices.index(0)
        out["competence"] = {"a": a_ck[:, i], "b": b_ck[:, i], "rate": rates_ck[:, i]}
    return out
