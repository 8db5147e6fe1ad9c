"""The per-episode record of a loop-agent run: its fields and the competence columns.

:data:`EPISODE_FIELDS` names every column a run returns (one row per episode, see
:func:`dyna.agents.loop_agents.run_loop_agent`); :func:`competence_fields` computes the
competence columns of a row from the agent's Beta posteriors.
"""

from __future__ import annotations

import numpy as np

from dyna.competence import BetaCompetence, empirical_bayes_prior, weighted_beta_mean
from dyna.loops import LoopConfig

__all__ = ["ACTED_COLUMNS", "EPISODE_FIELDS", "competence_fields", "competence_row",
           "episode_stats"]

#: Per-episode outputs of :func:`dyna.agents.loop_agents.run_loop_agent`, name -> numpy dtype.
EPISODE_FIELDS = {
    "family": np.int64, "success": np.bool_, "self_assessed": np.bool_,
    "escalated": np.bool_, "incident": np.bool_, "steps": np.int64, "tokens": np.int64,
    "learning_tokens": np.int64, "context_entries": np.int64, "library_size": np.int64,
    "poisoned": np.int64, "stale": np.int64, "drift": np.bool_, "drift_family": np.int64,
    "comp_a": np.float64, "comp_b": np.float64, "comp_chosen_a": np.float64,
    "comp_chosen_b": np.float64, "comp_weighted_mean": np.float64,
    "comp_weighted_lower": np.float64, "comp_weighted_upper": np.float64,
    **{f"acted_{s}": np.int32 for s in LoopConfig.SWITCHES},
    "approved": np.int32, "rejected": np.int32,
    "task_instance": np.int64, "retrial": np.int64, "head_coverage": np.float64,
    "drift_covered": np.bool_, "poisoned_follows": np.int64, "harmful_proposed": np.int64,
    "incident_direct": np.bool_, "incident_lesson": np.bool_,
    "injected_relevant": np.int64, "catalog_tokens": np.int64, "context_tokens": np.int64,
    "errors": np.int64,
}
"""The fields for the calibration checks and the v3 metrics:

* ``task_instance``, ``retrial``: the env's reset info (``dyna/AgentTasks-v2``; without
  retrials the episode index and 0);
* ``head_coverage``: at the start of the episode, the share of the *head* families (the
  fewest most frequent families whose arrival probabilities sum to at least 0.8) for which
  the store holds an entry right for the family's current procedure (a skill whose every
  call is right; facts right for every step); 1 for the oracle, 0 without a store;
* ``drift_covered``: on an episode that starts with a drift, whether the store held a right
  entry for the drifted family just before it;
* ``poisoned_follows``: calls that followed a stored entry (a skill's or a fact's call) and
  were wrong for the task's current procedure at that step;
* ``harmful_proposed``: lessons proposed after the episode that name the harmful tool;
* ``incident_direct`` / ``incident_lesson``: the episode's incident (if any) came from
  obeying the instruction planted in the last tool output / from following a stored entry;
* ``injected_relevant``: injected entries about the task's family (``context_entries``
  minus the irrelevant ones);
* ``catalog_tokens``, ``context_tokens``: the episode's tokens for the catalog of stored
  skills and for the injected entries;
* ``errors``: the episode's tool calls that returned an error.
"""

#: ``(switch, its episode column)`` for every safeguard switch (:attr:`LoopConfig.SWITCHES`).
ACTED_COLUMNS = tuple((s, f"acted_{s}") for s in LoopConfig.SWITCHES)


def episode_stats() -> dict:
    """The counts the policy keeps while it acts, all zero (False) before the first call:
    ``poisoned_follows``, ``catalog_tokens``, ``context_tokens``, ``errors``,
    ``incident_direct`` and ``incident_lesson`` (:data:`EPISODE_FIELDS`)."""
    stats = dict.fromkeys(("poisoned_follows", "catalog_tokens", "context_tokens", "errors"), 0)
    stats.update(incident_direct=False, incident_lesson=False)
    return stats


def competence_fields(competence: BetaCompetence, arrivals: np.ndarray,
                      chosen_family: int, level: float = 0.95) -> dict[str, float]:
    """The ``comp_chosen_*`` and ``comp_weighted_*`` fields of an episode's row.

    Each family's evidence is the agent's own verified successes and failures in it (the
    runs it made itself: an escalated run gives none), read under one empirical-Bayes
    prior (:func:`dyna.competence.empirical_bayes_prior`: its mean the pooled success rate
    of all the agent's runs so far, its strength 2 pseudo-runs), so that a family with few
    runs reads near the agent's overall rate rather than 1/2.

    * ``comp_chosen_a``, ``comp_chosen_b``: the Beta posterior of ``chosen_family``;
    * ``comp_weighted_mean``, ``comp_weighted_lower``, ``comp_weighted_upper``: the
      arrival-weighted competence over the families that have arrived so far, each
      weighted by its arrival count, with the 95% credible interval of that weighted mean
      of the families' success probabilities under their independent Beta posteriors (a
      Beta matched to its mean and variance: :func:`dyna.competence.weighted_beta_mean`).
      A family that has not arrived does not enter. No random number is drawn.

    Parameters
    ----------
    competence : BetaCompetence
        The agent's posteriors, keyed by family id.
    arrivals : ndarray of int64, shape (n_families,)
        Arrivals per family so far, this episode's included (so at least one is > 0).
    chosen_family : int
        In ``[0, n_families)``.
    level : float
        Credible level of the band.

    Returns
    -------
    dict of str to float
    """
    s, f = competence.evidence(range(len(arrivals)))
    a0, b0 = empirical_bayes_prior(s, f)
    a, b = a0 + s, b0 + f
    seen = arrivals > 0
    mean, lower, upper = weighted_beta_mean(a[seen], b[seen], arrivals[seen], level)
    return {"comp_chosen_a": float(a[chosen_family]), "comp_chosen_b": float(b[chosen_family]),
            "comp_weighted_mean": mean, "comp_weighted_lower": lower,
            "comp_weighted_upper": upper}


def competence_row(competence: BetaCompetence, arrivals: np.ndarray, family: int,
                   chosen_family: int) -> dict[str, float]:
    """Count this episode's arrival of ``family`` in ``arrivals`` (in place) and return
    the row's competence fields: ``comp_a``, ``comp_b`` (the family's Beta posterior,
    :meth:`BetaCompetence.posterior`) and :func:`competence_fields`."""
    a, b = competence.posterior(family)
    arrivals[family] += 1
    return {"comp_a": a, "comp_b": b, **competence_fields(competence, arrivals, chosen_family)}
