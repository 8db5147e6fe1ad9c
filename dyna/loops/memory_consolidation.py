"""Consolidation of the memory store's facts: what to drop as vague, superseded or merged.

:func:`consolidation_plan` decides; :meth:`dyna.loops.memory.MemoryStore.consolidate`
applies the plan under the store's lock, records it in the history, enforces the cap and
reports it as a :class:`ConsolidationReport`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dyna.loops._text import is_concrete, jaccard_ratio, similarity_matrix, text_features
from dyna.loops.fact_attributes import ENGLISH_FACTS, FactRule
from dyna.ties import at_least

__all__ = ["ConsolidationReport", "consolidation_plan"]


@dataclass(frozen=True)
class ConsolidationReport:
    """What :meth:`MemoryStore.consolidate` changed (or, with ``dry_run``, would change).

    Attributes
    ----------
    merged : tuple of (str, tuple of str)
        ``(kept, dropped)``: near-duplicates merged into the newest.
    superseded : tuple of (str, str)
        ``(dropped, by)``: older facts giving another value for the same attribute.
    vague : tuple of str
        Dropped: no concrete command, file, value or name.
    evicted : tuple of str
        Dropped at the cap (oldest first).
    unsure : tuple of (str, str)
        Kept, flagged: pairs that may contradict each other (:func:`relation` "unsure");
        check them by hand.
    dry_run : bool
        Nothing was written.
    """

    merged: tuple = ()
    superseded: tuple = ()
    vague: tuple = ()
    evicted: tuple = ()
    unsure: tuple = ()
    dry_run: bool = False

    @property
    def changed(self) -> bool:
        """True when anything was (or, with ``dry_run``, would be) dropped or merged."""
        return bool(self.merged or self.superseded or self.vague or self.evicted)

    @property
    def n_removed(self) -> int:
        """Number of facts removed."""
        return (sum(len(d) for _, d in self.merged) + len(self.superseded) + len(self.vague)
                + len(self.evicted))

    def history_records(self, cap: int | None) -> list[tuple[str, str, str]]:
        """``(op, text, reason)`` of each fact dropped, for the store's history, in the
        order of the steps: ``drop-vague``, ``supersede``, ``merge``, ``evict`` (at
        ``cap``)."""
        out = [("drop-vague", v, "no concrete command, file, value or name")
               for v in self.vague]
        out += [("supersede", d, f"by: {b}") for d, b in self.superseded]
        out += [("merge", g, f"into: {kept}") for kept, lost in self.merged for g in lost]
        return out + [("evict", e, f"cap {cap}") for e in self.evicted]

    def __str__(self) -> str:
        lines = []
        for kept, dropped in self.merged:
            lines += [f"merged:     {d!r} -> {kept!r}" for d in dropped]
        lines += [f"superseded: {d!r} by {b!r}" for d, b in self.superseded]
        lines += [f"vague:      {v!r}" for v in self.vague]
        lines += [f"evicted:    {v!r}" for v in self.evicted]
        if not lines:
            lines = ["nothing to consolidate"]
        lines += [f"unsure:     {a!r} / {b!r} (both kept; check by hand)"
                  for a, b in self.unsure]
        return "\n".join(lines)


def _newest(entries, idx) -> int:
    """The index in ``idx`` of the newest fact of ``entries`` (date, then position)."""
    return max(idx, key=lambda i: (entries[i].date, i))


def _drop_superseded(entries, rule) -> tuple[list, list]:
    """Step 2 of :func:`consolidation_plan`: ``(kept facts, (dropped, by) text pairs)``."""
    superseded = []
    groups: dict[tuple, list[int]] = {}
    attrs = [rule.attribute(e.text) for e in entries]
    for i, a in enumerate(attrs):
        if a is not None and a.kind is not None:
            groups.setdefault((a.subject, a.kind, a.rest), []).append(i)
    drop = set()
    for idx in groups.values():
        if len(idx) < 2:
            continue
        users = [i for i in idx if entries[i].trust == "user"]
        approved = [i for i in idx if entries[i].trust == "approved"]
        keep = max(users) if users else _newest(entries, approved or idx)
        kv = attrs[keep].value
        for i in idx:
            if i == keep:
                continue
            e = entries[i]
            if e.trust == "user" and (i > keep or attrs[i].value == kv):
                continue         # a person's line goes only for their correction
            drop.add(i)
            superseded.append((e.text, entries[keep].text))
    return [e for i, e in enumerate(entries) if i not in drop], superseded


def _merge_near_duplicates(entries, similarity: float) -> tuple[list, list]:
    """Step 3 of :func:`consolidation_plan`: ``(kept facts, (kept text, dropped texts))``."""
    merged = []
    n = len(entries)
    if n < 2:
        return list(entries), merged
    feats = [text_features(e.text) for e in entries]
    sims = similarity_matrix([f.words for f in feats])
    sigs = [f.parts for f in feats]
    parent = list(range(n))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    # a float similarity above the threshold is above it exactly (division rounds
    # monotonically); one equal to it is decided on the exact ratio of the counts
    ii, jj = np.nonzero(np.triu(sims >= similarity, k=1))
    for i, j in zip(ii.tolist(), jj.tolist()):
        if sims[i, j] == similarity and not at_least(
                jaccard_ratio(feats[i].words, feats[j].words), similarity):
            continue
        if sigs[i] == sigs[j]:
            ri, rj = find(i), find(j)
            if ri != rj:
                parent[max(ri, rj)] = min(ri, rj)
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(find(i), []).append(i)
    drop = set()
    for idx in groups.values():
        if len(idx) > 1:
            users = [i for i in idx if entries[i].trust == "user"]
            keep = max(users) if users else _newest(entries, idx)
            lost = [i for i in idx if i != keep and entries[i].trust != "user"]
            if lost:
                drop.update(lost)
                merged.append((entries[keep].text, tuple(entries[i].text for i in lost)))
    return [e for i, e in enumerate(entries) if i not in drop], merged


def consolidation_plan(entries, similarity: float,
                       rule: FactRule = ENGLISH_FACTS) -> tuple[list, list, list, list]:
    """What consolidating ``entries`` drops, in three steps, each on what the previous left.

    1. *vague*: loop facts (trust other than ``user``) with no concrete command, file,
       value or name (:func:`dyna.loops._text.is_concrete`);
    2. *superseded*: of facts giving values for the same attribute (same subject, kind
       and qualifier, as ``rule`` reads them) one stays: a
       person's latest line (trust ``user``, by position) if there is one, else the newest
       approved fact, else the newest (date, then position). A person's line is dropped
       only for a later line of a person giving another value (their own correction);
    3. *merged*: facts with equal concrete parts and content-word Jaccard similarity
       >= ``similarity`` (the ratio of counts compared exactly: a tie links) are linked,
       and each connected group keeps its newest fact (a person's, if any; a person's
       lines are never merged away).

    Different groups share no link, so planning again on the kept facts drops nothing.

    Parameters
    ----------
    entries : sequence of MemoryEntry
        The facts, in file order.
    similarity : float
        Jaccard threshold of step 3, in (0, 1].
    rule : FactRule
        Reads the attribute a fact states (:mod:`dyna.loops.fact_attributes`; default the
        English rule).

    Returns
    -------
    kept : list of MemoryEntry
        The facts left, in their order (the same objects).
    vague : list of MemoryEntry
        Dropped in step 1.
    superseded : list of (str, str)
        ``(dropped, by)`` texts of step 2.
    merged : list of (str, tuple of str)
        ``(kept, dropped)`` texts of step 3.
    """
    vague = [e for e in entries if e.trust != "user" and not is_concrete(e.text)]
    gone = {id(e) for e in vague}
    kept = [e for e in entries if id(e) not in gone]
    kept, superseded = _drop_superseded(kept, rule)
    kept, merged = _merge_near_duplicates(kept, similarity)
    return kept, vague, superseded, merged
