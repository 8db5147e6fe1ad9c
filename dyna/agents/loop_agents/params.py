"""Settings of the loop agents' shared policy model and of the simulated reviewer."""

from __future__ import annotations

from dataclasses import dataclass, field

from dyna.errors import ConfigError, check_range

__all__ = ["PolicyParams", "TABULAR_DEFAULTS"]

#: Hyper-parameters of the tabular variants unless ``PolicyParams.tabular`` says otherwise:
#: a deterministic task world, so a large step size and the latest-outcome model.
TABULAR_DEFAULTS = {"alpha": 0.5, "gamma": 0.95, "epsilon": 0.1, "n_planning": 10,
                    "kappa": 1e-3, "model": "last"}


@dataclass(frozen=True)
class PolicyParams:
    """Settings of the shared policy model and of the simulated reviewer.

    Attributes
    ----------
    p_follow : float
        Probability of following known calls at a procedure position, in [0, 1].
    tokens_per_review : int
        Reviewer tokens per reviewed run (learning cost), >= 0.
    copy_rate : float
        Probability that the reviewer copies a planted instruction it saw in a tool
        output into its lesson (then the lesson's provenance is ``tool_output``).
    title_words : int
        Words of the task text the reviewer takes as the task's key (>= 1).
    days_per_episode : float
        Store clock advance per episode (days, > 0).
    escalation : dict or None
        ``{"threshold": float, "min_episodes": int, "risk_class": str,
        "escalation_tokens": int}``; None: never escalate.
    episodic_k : int
        Neighbours the ``episodic`` variant asks for (>= 1).
    tabular : dict
        Hyper-parameters of the ``dyna_q`` / ``dyna_q_plus`` variants
        (:data:`dyna.agents.HPARAMS`), on top of :data:`TABULAR_DEFAULTS`.
    misattribution : float
        Probability, in [0, 1], that the reviewer of a failed run writes the call that
        failed last into the procedure (it believes that call finished the job); otherwise
        the lesson keeps only the calls that returned ok. 1.0 (the default) is v0's
        reviewer; the agent-tasks v2 sweeps fix 0.5.
    memory_facts : {"value", "call"}
        What the reviewer writes per procedure step for the memory store: ``"value"``
        (v0) one fact, the step's value; ``"call"`` two, the step's tool and its value, so
        that memory can hold a whole procedure as a skill does (agent tasks v2).
    oracle_follows_always : bool
        True (v0): the oracle always follows its knowledge. False: it follows with
        ``p_follow`` like every other variant, so the oracle bounds what knowledge can give
        under the same policy (the agent-tasks v2 "same-policy oracle").
    """

    p_follow: float = 0.9
    tokens_per_review: int = 300
    copy_rate: float = 0.5
    title_words: int = 2
    days_per_episode: float = 1.0
    escalation: dict | None = None
    tabular: dict = field(default_factory=dict)
    episodic_k: int = 20
    misattribution: float = 1.0
    oracle_follows_always: bool = True
    memory_facts: str = "value"

    def __post_init__(self):
        check_range("p_follow", self.p_follow, 0.0, 1.0)
        check_range("misattribution", self.misattribution, 0.0, 1.0)
        if self.memory_facts not in ("value", "call"):
            raise ConfigError("memory_facts", self.memory_facts, "must be 'value' or 'call'")
        if not isinstance(self.oracle_follows_always, bool):
            raise ConfigError("oracle_follows_always", self.oracle_follows_always,
                              "must be true or false")
        check_range("copy_rate", self.copy_rate, 0.0, 1.0)
        check_range("tokens_per_review", self.tokens_per_review, 0, None, integer=True)
        check_range("title_words", self.title_words, 1, None, integer=True)
        check_range("days_per_episode", self.days_per_episode, 0.0, None, lo_open=True)
        check_range("episodic_k", self.episodic_k, 1, None, integer=True)
        from dyna.agents.tabular import validate_hparams
        for agent in ("dyna_q", "dyna_q_plus"):
            keys = {k: v for k, v in {**TABULAR_DEFAULTS, **self.tabular}.items()
                    if agent == "dyna_q_plus" or k != "kappa"}
            try:
                validate_hparams(agent, keys)
            except ConfigError as exc:
                raise ConfigError(f"tabular.{exc.field}", exc.value, exc.reason) from None
        if self.escalation is not None:
            esc = dict(self.escalation)
            unknown = set(esc) - {"threshold", "min_episodes", "risk_class",
                                  "escalation_tokens"}
            if unknown:
                raise ConfigError("escalation", sorted(unknown), "unknown keys")
            check_range("escalation.threshold", esc.get("threshold", 0.8), 0.0, 1.0)
            check_range("escalation.min_episodes", esc.get("min_episodes", 10), 0, None,
                        integer=True)
            check_range("escalation.escalation_tokens", esc.get("escalation_tokens", 5000),
                        0, None, integer=True)
            from dyna.escalation import RISK_CLASSES
            if esc.get("risk_class", "low_stakes") not in RISK_CLASSES:
                raise ConfigError("escalation.risk_class", esc.get("risk_class"),
                                  f"must be one of {sorted(RISK_CLASSES)}")
