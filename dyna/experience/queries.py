"""The read operations of the experience store: search, recommendation, competence, replay.

:class:`StoreQueries` holds the operations of :class:`dyna.experience.ExperienceStore` that
read a tenant's episodes and change nothing: every one runs on the live view caught up with
the backend (:class:`dyna.experience.view.LiveView`), scoped to one ``tenant_id`` matched
exactly (``get_stats`` and ``get_data_consumption`` may span tenants when none is given).
"""

from __future__ import annotations

import hashlib

import numpy as np

from dyna.buffer import CATEGORICAL_FIELDS, DICT_FIELDS, ExperienceBuffer
from dyna.competence import BetaCompetence, beta_interval
from dyna.errors import ConfigError
from dyna.escalation import RISK_CLASSES, should_escalate
from dyna.experience.cached_search import CachedSearch
from dyna.experience.episodes import (SUCCESS, check_tenant, checked, float64s, positive_int,
                                      query_vector, selection)
from dyna.experience.operations import MAX_BATCH_SIZE, MAX_BIN_COUNT, MAX_K
from dyna.experience.stored import stored_json
from dyna.experience.times import utc_time
from dyna.experience.view import LiveView
from dyna.store.backend import StoreBackend

__all__ = ["StoreQueries"]


def _hash_bins(texts, bin_count: int) -> np.ndarray:
    """Each state's canonical JSON text hashed (BLAKE2b) into one of ``bin_count`` bins."""
    out = np.empty(len(texts), dtype=np.int64)
    for i, t in enumerate(texts):
        h = hashlib.blake2b(("null" if t is None else t).encode(), digest_size=8)
        out[i] = int.from_bytes(h.digest(), "little") % bin_count
    return out


def _state_values(texts, name: str, state_key: str, where: str) -> np.ndarray:
    """``state[state_key]`` of each stored state as float64 (NaN when not a number)."""
    out = np.full(len(texts), np.nan)
    for i, t in enumerate(texts):
        if t is None:
            continue
        v = stored_json(t, name, where)
        v = v.get(state_key) if isinstance(v, dict) else None
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[i] = float(v)
    return out


def _value_bins(before, after, bin_count: int, state_key: str, where: str):
    """``(from bins, to bins, kept rows, edges)``: states binned by the numeric value
    ``state[state_key]`` into equal-width bins over the range of all values seen."""
    v0 = _state_values(before, "state_before", state_key, where)
    v1 = _state_values(after, "state_after", state_key, where)
    keep = np.isfinite(v0) & np.isfinite(v1)
    both = np.concatenate([v0[keep], v1[keep]])
    lo, hi = (float(both.min()), float(both.max())) if both.size else (0.0, 1.0)
    if hi == lo:
        hi = lo + 1.0
    edges = np.linspace(lo, hi, bin_count + 1)
    b0 = np.clip(np.searchsorted(edges, v0, side="right") - 1, 0, bin_count - 1)
    b1 = np.clip(np.searchsorted(edges, v1, side="right") - 1, 0, bin_count - 1)
    return b0, b1, keep, edges


def _transitions(acts, b0, b1, reward, names, bin_count: int) -> list[dict]:
    """Counts and mean reward per (action, from bin, to bin), sorted."""
    a = acts.astype(np.int64)
    key = (a * bin_count + b0) * bin_count + b1
    uniq, inv, cnt = np.unique(key, return_inverse=True, return_counts=True)
    rsum = np.bincount(inv, weights=reward, minlength=uniq.size)
    trans = []
    for j, kv in enumerate(uniq.tolist()):
        act, rest = divmod(kv, bin_count * bin_count)
        fb, tb = divmod(rest, bin_count)
        trans.append({"action_type": names[act], "from_bin": fb, "to_bin": tb,
                      "count": int(cnt[j]), "mean_reward": float(rsum[j] / cnt[j])})
    trans.sort(key=lambda t: (t["action_type"], t["from_bin"], t["to_bin"]))
    return trans


def _priority_candidates(buf: ExperienceBuffer, cand: np.ndarray, ids, priorities,
                         priority_exponent) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the caller's episode ids among the candidates, and their sampling weights
    ``|p| ** priority_exponent``; a repeated id is refused (ConfigError naming
    ``ids[j]``), never summed or silently dropped."""
    if ids is None or priorities is None:
        raise ConfigError("priorities", priorities, "strategy 'priority' needs ids "
                          "and priorities")
    ids_a = np.asarray(ids, dtype=np.int64).reshape(-1)
    first: dict[int, int] = {}
    for j, i in enumerate(ids_a.tolist()):
        if first.setdefault(i, j) != j:   # a second priority would double its weight
            raise ConfigError(f"ids[{j}]", i, f"repeats ids[{first[i]}]: each episode id "
                              "may be given once, with its one priority")
    p = float64s("priorities", priorities)
    if p.shape != ids_a.shape:
        raise ConfigError("priorities", p.size, f"must have one per id ({ids_a.size})")
    if not np.isfinite(p).all():
        raise ConfigError("priorities", "non-finite", "must be finite")
    e = checked("priority_exponent", priority_exponent, 0.0, None)
    all_ids = buf.column("id")
    pos = {int(i): r for r, i in zip(cand.tolist(), all_ids[cand].tolist())}
    missing = [int(i) for i in ids_a if int(i) not in pos]
    if missing:
        raise ConfigError("ids", missing[0], "not an episode of this tenant "
                          "(and task type)")
    return np.array([pos[int(i)] for i in ids_a], dtype=np.int64), np.abs(p) ** e


def _memory_consumption(buf: ExperienceBuffer, rows: np.ndarray, dim: int) -> dict:
    """:meth:`StoreQueries.get_data_consumption` over buffer rows (an in-memory store)."""
    size = np.full(rows.size, 24 + 4 * dim, dtype=np.int64)
    for name in CATEGORICAL_FIELDS:
        lens = np.array([len(s.encode()) for s in buf.categories(name)], dtype=np.int64)
        size += lens[buf.column(name)[rows]]
    for name in DICT_FIELDS:
        col = buf.column(name)[rows]
        size += np.fromiter((0 if s is None else len(s.encode()) for s in col),
                            dtype=np.int64, count=rows.size)
    tcode = buf.column("tenant_id")[rows].astype(np.int64)
    kcode = buf.column("task_type")[rows].astype(np.int64)
    n_task = len(buf.categories("task_type"))
    uniq, inv = np.unique(tcode * n_task + kcode, return_inverse=True)
    recs = np.bincount(inv, minlength=uniq.size)
    byts = np.bincount(inv, weights=size, minlength=uniq.size)
    tnames, knames = buf.categories("tenant_id"), buf.categories("task_type")
    items = [{"tenant_id": tnames[u // n_task], "task_type": knames[u % n_task],
              "records": int(recs[j]), "bytes": int(byts[j])}
             for j, u in enumerate(uniq.tolist())]
    items.sort(key=lambda r: (r["tenant_id"], r["task_type"]))
    return {"consumption": items, "total_records": int(rows.size),
            "total_bytes": int(size.sum())}


class StoreQueries:
    """The read operations of :class:`dyna.experience.ExperienceStore` (a part of it: the
    store's constructor sets the attributes below)."""

    dim: int
    prior: tuple[float, float]
    redact_keys: frozenset
    _db: StoreBackend | None
    _live: LiveView
    _cached: CachedSearch

    def competence(self) -> BetaCompetence:
        """Competence per ``(tenant_id, task_type)`` over every recorded outcome (kept up to
        date as episodes arrive)."""
        with self._live.hold():
            return self._live.competence()

    def query_similar(self, tenant_id: str, k: int = 5, task_type: str | None = None,
                      state_features=None, state_before=None, action_taken=None,
                      state_after=None, metadata=None) -> dict:
        """Cosine top-k episodes of a tenant most similar to a query.

        The query is ``state_features`` (length d) or the feature hash of the given dicts
        (as episodes are hashed). Results are sorted by score, ties by recency; fewer than k
        when there are fewer candidates.

        Returns
        -------
        dict
            ``results``: list of ``{"score", "episode"}``.

        Raises
        ------
        ConfigError
            ``k <= 0``, a query of the wrong dimension, no query, a zero query vector.
        StoreDamagedError
            A found episode's stored dict field is not JSON (named with the store and the
            episode id, never the text); the file is left as it was.
        """
        tenant_id = check_tenant(tenant_id)
        k = positive_int("k", k, MAX_K)
        q = query_vector(state_features, dim=self.dim, redact_keys=self.redact_keys,
                         state_before=state_before, action_taken=action_taken,
                         state_after=state_after, metadata=metadata)
        live = self._live
        with live.lock:
            hits = self._cached.search(live, tenant_id, task_type, q, k)
            if hits is not None:
                scores, eps = hits
            else:
                with live.hold():
                    rows, scores = live.buf.search(q, k, tenant_id=tenant_id,
                                                   task_type=task_type)
                    eps = live.buf.rows(rows) if len(rows) else []
        return {"results": [{"score": float(s), "episode": e} for s, e in zip(scores, eps)]}

    def get_recommendation(self, tenant_id: str, task_type: str | None = None, k: int = 50,
                           criterion: str = "success_rate", min_episodes: int = 1,
                           level: float = 0.95, state_features=None, state_before=None,
                           action_taken=None, state_after=None, metadata=None) -> dict:
        """The action type with the best success rate or mean reward.

        Candidates are the k episodes most similar to the query when one is given, else
        every episode of the tenant (and task type). Per action type: ``n``, ``n_success``,
        the Beta posterior mean of success (``success_rate``) with its equal-tailed
        interval, and ``mean_reward``. The best is the highest ``success_rate`` (or
        ``mean_reward``) among action types with at least ``min_episodes`` episodes, ties to
        the larger ``n``, then the name.

        Returns
        -------
        dict
            ``action_type`` (None when no action type qualifies), ``criterion``, ``best``
            (its statistics) and ``candidates`` (every action type's, best first).
        """
        tenant_id = check_tenant(tenant_id)
        if criterion not in ("success_rate", "mean_reward"):
            raise ConfigError("criterion", criterion, "must be success_rate or mean_reward")
        min_episodes = checked("min_episodes", min_episodes, 1, None, integer=True)
        k = positive_int("k", k, MAX_K)
        has_query = state_features is not None or any(
            v is not None for v in (state_before, action_taken, state_after, metadata))
        with self._live.hold():
            buf = self._live.buf
            if has_query:
                q = query_vector(state_features, dim=self.dim, redact_keys=self.redact_keys,
                                 state_before=state_before, action_taken=action_taken,
                                 state_after=state_after, metadata=metadata)
                rows, _ = buf.search(q, k, tenant_id=tenant_id, task_type=task_type)
            else:
                rows = self._live.rows(tenant_id, task_type=task_type)
            acts = buf.column("action_type")[rows].astype(np.int64)
            success = (buf.column("outcome")[rows] == buf.code("outcome", SUCCESS))
            reward = buf.column("reward")[rows]
            names = buf.categories("action_type")
        uniq, inv = np.unique(acts, return_inverse=True)
        n = np.bincount(inv, minlength=uniq.size)
        n_s = np.bincount(inv, weights=success, minlength=uniq.size)
        r_sum = np.bincount(inv, weights=reward, minlength=uniq.size)
        a0, b0 = self.prior
        a, b = a0 + n_s, b0 + (n - n_s)
        lo, hi = beta_interval(a, b, level) if uniq.size else (np.zeros(0), np.zeros(0))
        cands = [{"action_type": names[u], "n": int(n[j]), "n_success": int(n_s[j]),
                  "success_rate": float(a[j] / (a[j] + b[j])), "lower": float(lo[j]),
                  "upper": float(hi[j]), "mean_reward": float(r_sum[j] / n[j])}
                 for j, u in enumerate(uniq.tolist())]
        cands.sort(key=lambda c: (-c[criterion], -c["n"], c["action_type"]))
        ok = [c for c in cands if c["n"] >= min_episodes]
        return {"action_type": ok[0]["action_type"] if ok else None, "criterion": criterion,
                "best": ok[0] if ok else None, "candidates": cands, "n_episodes": int(rows.size),
                "scope": "similar" if has_query else "task"}

    def get_competence(self, tenant_id: str, task_type: str | None = None,
                       level: float = 0.95) -> dict:
        """Beta posterior of success of one task type, or of each of the tenant's.

        Returns
        -------
        dict
            ``competence``: list of ``{"task_type", "a", "b", "n_success", "n_failure",
            "mean", "lower", "upper", "level"}``. An unseen task type reads as the prior.
        """
        tenant_id = check_tenant(tenant_id)
        checked("level", level, 0.0, 1.0, lo_open=True, hi_open=True)
        with self._live.hold():
            comp = self._live.competence()
            types = [task_type] if task_type is not None else self._task_types(tenant_id)
            s = comp.summary([(tenant_id, t) for t in types], level)
        out = [{"task_type": t, **{k: (v[i] if isinstance(v, list) else v)
                                   for k, v in s.items()}} for i, t in enumerate(types)]
        return {"competence": out}

    def _task_types(self, tenant_id: str) -> list[str]:
        buf = self._live.buf
        codes = np.unique(buf.column("task_type")[self._live.rows(tenant_id)])
        names = buf.categories("task_type")
        return sorted(names[c] for c in codes.tolist())

    def list_task_types(self, tenant_id: str, level: float = 0.95) -> dict:
        """Task types of a tenant with episode counts and competence."""
        with self._live.hold():  # one state for both halves
            comp = self.get_competence(tenant_id, level=level)["competence"]
            buf = self._live.buf
            codes = buf.column("task_type")[self._live.rows(tenant_id)]
            names = buf.categories("task_type")
            counts = {names[c]: int(m) for c, m in
                      zip(*np.unique(codes, return_counts=True))}
        return {"task_types": [{"task_type": c["task_type"], "n_episodes": counts[c["task_type"]],
                                "mean": c["mean"], "lower": c["lower"], "upper": c["upper"]}
                               for c in comp]}

    def get_transition_table(self, tenant_id: str, task_type: str | None = None,
                             bin_count: int = 10, state_key: str | None = None) -> dict:
        """Transition counts between state bins per action (the world-model view).

        States are ``state_before`` and ``state_after``. With ``state_key`` the numeric value
        ``state[state_key]`` is binned into ``bin_count`` equal-width bins over the range of
        all values seen (both ends included; states without a finite value are left out).
        Without it, a state's canonical JSON text is hashed (BLAKE2b) into one of
        ``bin_count`` bins, so equal states share a bin.

        Returns
        -------
        dict
            ``bin_count``, ``edges`` (list of bin_count + 1 floats, or None when hashing),
            ``transitions``: list of ``{"action_type", "from_bin", "to_bin", "count",
            "mean_reward"}`` sorted by action, from, to; ``n_episodes`` used.
        """
        tenant_id = check_tenant(tenant_id)
        # (A * bins^2 keys must fit int64, and the table is built in memory)
        bin_count = checked("bin_count", bin_count, 1, MAX_BIN_COUNT, integer=True)
        with self._live.hold():
            buf = self._live.buf
            rows = self._live.rows(tenant_id, task_type=task_type)
            before = buf.column("state_before")[rows]
            after = buf.column("state_after")[rows]
            acts = buf.column("action_type")[rows]
            reward = buf.column("reward")[rows]
            names = buf.categories("action_type")
        edges = None
        if state_key is None:
            b0, b1 = _hash_bins(before, bin_count), _hash_bins(after, bin_count)
            keep = np.ones(rows.size, dtype=bool)
        else:
            b0, b1, keep, edges = _value_bins(before, after, bin_count, state_key,
                                              self._live.where())
        trans = _transitions(acts[keep], b0[keep], b1[keep], reward[keep], names, bin_count)
        return {"bin_count": bin_count, "edges": None if edges is None else edges.tolist(),
                "state_key": state_key, "transitions": trans, "n_episodes": int(keep.sum())}

    def should_escalate(self, tenant_id: str, task_type: str, threshold: float = 0.8,
                        min_episodes: int = 10, domain_risk_class: str = "low_stakes",
                        level: float = 0.95) -> dict:
        """Escalation decision for a tenant's task type (see :mod:`dyna.escalation`)."""
        tenant_id = check_tenant(tenant_id)
        if domain_risk_class not in RISK_CLASSES:
            raise ConfigError("domain_risk_class", domain_risk_class,
                              f"must be one of {list(RISK_CLASSES)}")
        with self._live.hold():
            buf = self._live.buf
            rows = self._live.rows(tenant_id, task_type=task_type)
            hist = {"outcome": buf.labels("outcome", rows),
                    "outcome_verified_by": buf.labels("outcome_verified_by", rows),
                    "anti_gaming_policy": buf.labels("anti_gaming_policy", rows)}
        d = should_escalate(hist, task_type, threshold, min_episodes, domain_risk_class,
                            level=level, prior=self.prior)
        return d.to_dict()

    def replay_experience(self, tenant_id: str, task_type: str | None = None,
                          batch_size: int = 32, strategy: str = "uniform",
                          half_life_seconds: float = 86400.0, ids=None, priorities=None,
                          priority_exponent: float = 1.0, seed=None) -> dict:
        """Sample episodes (with replacement) for simulated replay.

        Strategies: ``uniform``; ``recency``, weight ``2 ** (-(t_max - t) / half_life_seconds)``
        (t_max the newest candidate); ``priority``, weight ``|p| ** priority_exponent`` over
        the caller's ``ids`` with their TD-error ``priorities`` (prioritized experience
        replay, Schaul et al. 2016, eq. 1; Sutton & Barto section 8.4).

        Returns
        -------
        dict
            ``episodes`` (list of dicts) and ``ids``.

        Raises
        ------
        ConfigError
            A bad ``batch_size``, ``strategy``, ``seed``, ``half_life_seconds``,
            ``ids`` / ``priorities`` that do not match, or an id given twice (each id once,
            with its one priority: field ``ids[j]``).
        StoreDamagedError
            A sampled episode's stored dict field is not JSON (named with the store and the
            episode id, never the text); the file is left as it was.
        """
        tenant_id = check_tenant(tenant_id)
        batch_size = positive_int("batch_size", batch_size, MAX_BATCH_SIZE)
        if strategy not in ("uniform", "recency", "priority"):
            raise ConfigError("strategy", strategy, "must be uniform, recency or priority")
        if seed is not None:
            seed = checked("seed", seed, 0, None, integer=True)
        rng = np.random.default_rng(seed)
        with self._live.hold():
            buf = self._live.buf
            cand = self._live.rows(tenant_id, task_type=task_type)
            weights = None
            if strategy == "recency":
                hl = checked("half_life_seconds", half_life_seconds, 0.0, None, lo_open=True)
                ts = buf.column("timestamp")[cand]
                weights = np.exp2(-(ts.max() - ts) / hl) if cand.size else None
            elif strategy == "priority":
                cand, weights = _priority_candidates(buf, cand, ids, priorities,
                                                     priority_exponent)
            if cand.size == 0:
                return {"episodes": [], "ids": []}
            rows = buf.sample(batch_size, rng, weights=weights, candidates=cand)
            eps = buf.rows(rows)
        return {"episodes": eps, "ids": [e["id"] for e in eps]}

    def count_matching(self, tenant_id: str, task_type: str | None = None,
                       run_id: str | None = None, task_id: str | None = None,
                       request_id: str | None = None) -> int:
        """How many of a tenant's episodes match every given field exactly: what
        :meth:`delete_data` with the same arguments would delete.

        Raises
        ------
        ConfigError
            An empty tenant id, or a selector that is not a string.
        """
        tenant_id = check_tenant(tenant_id)
        sel = selection(task_type, run_id, task_id, request_id)
        with self._live.hold():
            return int(len(self._live.rows(tenant_id, **sel)))

    def tenant_ids(self) -> list[str]:
        """The tenants that have episodes, sorted."""
        with self._live.hold():
            buf = self._live.buf
            names = buf.categories("tenant_id")
            return sorted(names[c] for c in np.unique(buf.column("tenant_id")) if names[c])

    def get_stats(self, tenant_id: str | None = None) -> dict:
        """Counts (records, tenants, task types), time span, dim and store state.

        With a backend, answered from SQL (:meth:`dyna.store.backend.StoreBackend.summary`:
        counts and min / max only, no episode loaded), so it is always live; in memory, from
        the buffer. Both give the same numbers for the same rows.

        Returns
        -------
        dict
            ``n_records``, ``n_tenants``, ``n_task_types`` (int); ``oldest`` and ``newest``:
            the smallest and largest episode ``timestamp`` as timezone-aware UTC
            :class:`datetime.datetime` (:func:`dyna.experience.times.utc_time`), None
            without rows; ``dim``, ``persistent``, ``n_unpersisted``; with a backend,
            ``store`` (the file's state).
        """
        live = self._live
        if self._db is not None:
            where = None if tenant_id is None else {"tenant_id": check_tenant(tenant_id)}
            with live.lock:
                out = self._db.summary(where)
                out.update(dim=self.dim, persistent=True, n_unpersisted=live.unflushed,
                           store=self._db.stats())
            return {**out, "oldest": utc_time(out["oldest"]), "newest": utc_time(out["newest"])}
        with live.lock:
            buf = live.buf
            rows = np.arange(len(buf)) if tenant_id is None else \
                live.rows(check_tenant(tenant_id))
            ts = buf.column("timestamp")[rows]
            return {"n_records": int(rows.size),
                    "n_tenants": int(np.unique(buf.column("tenant_id")[rows]).size),
                    "n_task_types": int(np.unique(buf.column("task_type")[rows]).size),
                    "oldest": utc_time(ts.min()) if rows.size else None,
                    "newest": utc_time(ts.max()) if rows.size else None,
                    "dim": self.dim, "persistent": False, "n_unpersisted": live.unflushed}

    def get_data_consumption(self, tenant_id: str | None = None) -> dict:
        """Records and bytes per tenant and task type.

        Bytes of a record: 8 (id) + 8 (reward) + 8 (timestamp) + 4 d (features) + the UTF-8
        length of each label and of each stored JSON text.

        Returns
        -------
        dict
            ``consumption``: list of ``{"tenant_id", "task_type", "records", "bytes"}``;
            ``total_records``, ``total_bytes``.

        With a backend, summed in SQL over the texts as stored (integer sums, no episode
        loaded); in memory, over the buffer.
        """
        if self._db is not None:
            where = None if tenant_id is None else {"tenant_id": check_tenant(tenant_id)}
            items = self._db.consumption(where)
            return {"consumption": items, "total_records": sum(r["records"] for r in items),
                    "total_bytes": sum(r["bytes"] for r in items)}
        live = self._live
        with live.lock:
            rows = np.arange(len(live.buf)) if tenant_id is None else \
                live.rows(check_tenant(tenant_id))
            return _memory_consumption(live.buf, rows, self.dim)
