"""A memory fact's outcomes and its Beta posterior of competence.

A fact counts the runs in which a tool call that followed it succeeded or returned an error
(:attr:`~dyna.loops.memory_format.MemoryEntry.successes`, ``failures``). Its posterior is
the one written on its line (``a``, ``b``), else the store's prior plus the counts
(:func:`fact_posterior`). One more outcome (:func:`fact_with_outcome`) is recorded by the
store's :class:`dyna.competence.BetaCompetence`: the fact's evidence decays by the store's
``discount``, then 1 is added to ``a`` (success) or ``b`` (failure). With ``discount`` 1 a
fact without a posterior of its own keeps none, since prior + counts is then its posterior.
:meth:`dyna.loops.memory.MemoryStore.record_outcomes` applies them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from dyna.competence import BetaCompetence
from dyna.errors import ConfigError
from dyna.loops._text import fact_key
from dyna.loops.memory_format import MemoryEntry

__all__ = ["check_outcomes", "fact_posterior", "fact_with_outcome"]


def fact_posterior(fact: MemoryEntry, prior: tuple[float, float]) -> tuple[float, float]:
    """The Beta posterior ``(a, b)`` of ``fact``: its own when its line carries one, else
    ``prior`` ``(a0, b0)`` plus its counts, ``(a0 + successes, b0 + failures)``."""
    if fact.a is None:
        return prior[0] + fact.successes, prior[1] + fact.failures
    return fact.a, fact.b


def fact_with_outcome(fact: MemoryEntry, ok: bool, competence: BetaCompetence) -> MemoryEntry:
    """A copy of ``fact`` with one more outcome (``ok``: a success): its counts, and its
    posterior updated by ``competence`` (kept as prior + counts, no posterior of its own,
    while ``competence`` has no discount and the fact has none)."""
    counts = dict(successes=fact.successes + ok, failures=fact.failures + (not ok))
    if fact.a is None and competence.discount == 1.0:
        return replace(fact, **counts)
    competence.set_posterior(fact.key, *fact_posterior(fact, (competence.a0, competence.b0)))
    a, b = competence.record(fact.key, ok)
    return replace(fact, a=a, b=b, **counts)


def check_outcomes(outcomes) -> None:
    """Check a run's report of outcomes: a mapping of fact texts to bools, each fact once.

    Two keys that are the same fact (equal :func:`dyna.loops._text.fact_key`, such as
    ``"Use make"`` and ``"USE MAKE"``) are refused: one run gives a fact one outcome.

    Raises
    ------
    ConfigError
        Not a mapping, a key that is not a string (field ``outcomes``), a value that is
        not a bool, or a key naming the same fact as an earlier one (field
        ``outcomes[<text>]``).
    """
    if not isinstance(outcomes, Mapping):
        raise ConfigError("outcomes", outcomes, "must map fact texts to true or false")
    seen: dict[str, str] = {}
    for text, ok in outcomes.items():
        if not isinstance(text, str):
            raise ConfigError("outcomes", text, "keys must be fact texts")
        if not isinstance(ok, (bool, np.bool_)):
            raise ConfigError(f"outcomes[{text!r}]", ok, "must be true or false")
        first = seen.setdefault(fact_key(text), text)
        if first != text:
            raise ConfigError(f"outcomes[{text!r}]", text, f"is the same fact as {first!r}: "
                              "a run gives each fact one outcome")
