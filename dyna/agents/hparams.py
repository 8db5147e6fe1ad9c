"""Names and checks of the tabular agents' hyper-parameters, without the kernels.

Split from :mod:`dyna.agents.tabular` (which re-exports every name) so that validating an
experiment config imports no numba: defining a cached kernel makes numba create its cache
folder (``~/.cache/dyna/numba/...``, :mod:`dyna.kernel_cache`), and a rejected config must
leave nothing anywhere.
"""

from __future__ import annotations

from dyna.errors import ConfigError, check_range

__all__ = ["AGENTS", "HPARAMS", "MAX_PLANNING_STEPS", "validate_hparams"]

#: Agent names and their kernel codes.
AGENTS = {"q_learning": 0, "dyna_q": 1, "dyna_q_plus": 2, "prioritized_sweeping": 3}

#: Hyper-parameters, their defaults, and which agents use them.
HPARAMS = {
    "alpha": 0.1,        # step size α
    "gamma": 0.95,       # discount γ
    "epsilon": 0.1,      # ε of the ε-greedy behaviour policy
    "n_planning": 5,     # planning steps n per real step
    "kappa": 1e-3,       # Dyna-Q+ bonus weight κ
    "theta": 1e-4,       # prioritized-sweeping threshold θ
    "q_init": 0.0,       # initial action values
    "model": "counts",   # world model: "counts" (distribution) or "last" (latest outcome)
}
#: Upper bound of ``n_planning`` (planning steps per real step).
MAX_PLANNING_STEPS = 1_000_000

_USES = {
    "q_learning": ("alpha", "gamma", "epsilon", "q_init"),
    "dyna_q": ("alpha", "gamma", "epsilon", "n_planning", "q_init", "model"),
    "dyna_q_plus": ("alpha", "gamma", "epsilon", "n_planning", "kappa", "q_init", "model"),
    "prioritized_sweeping": ("alpha", "gamma", "epsilon", "n_planning", "theta", "q_init", "model"),
}


def validate_hparams(agent: str, hparams: dict, field: str = "hparams") -> dict:
    """Check an agent name and its hyper-parameters; return the effective values.

    Every name of :data:`HPARAMS` is accepted (and checked) for every agent, so variants can
    share defaults; the returned dict holds only the ones ``agent`` uses, defaults filled in.

    Raises
    ------
    ConfigError
        Unknown agent (field ``{field}.agent``) or hyper-parameter name, ``alpha`` outside
        (0, 1], ``gamma`` or ``epsilon`` outside [0, 1], ``n_planning`` not an integer in
        [0, MAX_PLANNING_STEPS] (>= 1 for prioritized sweeping; 0 for q_learning), ``kappa`` or
        ``theta`` outside [0, 1e6], ``q_init`` outside [-1e6, 1e6], ``model`` not "counts"
        or "last".
    """
    if not isinstance(agent, str) or agent not in AGENTS:
        raise ConfigError(f"{field}.agent", agent, f"unknown agent (known: {sorted(AGENTS)})")
    if not isinstance(hparams, dict):
        raise ConfigError(field, hparams, "must be a dict of hyper-parameters")
    for key in hparams:
        if key not in HPARAMS:
            import difflib
            close = difflib.get_close_matches(key, HPARAMS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f" (known: {sorted(HPARAMS)})"
            raise ConfigError(f"{field}.{key}", hparams[key], f"unknown hyper-parameter{hint}")
    checked = {}
    for key in set(_USES[agent]) | set(hparams):
        value = hparams.get(key, HPARAMS[key])
        f = f"{field}.{key}"
        if key == "alpha":
            value = float(check_range(f, value, 0.0, 1.0, lo_open=True))
        elif key in ("gamma", "epsilon"):
            value = float(check_range(f, value, 0.0, 1.0))
        elif key == "n_planning":
            value = check_range(f, value, 0, MAX_PLANNING_STEPS, integer=True)
        elif key in ("kappa", "theta"):
            value = float(check_range(f, value, 0.0, 1e6))
        elif key == "q_init":
            value = float(check_range(f, value, -1e6, 1e6))
        elif key == "model":
            if value not in ("counts", "last"):
                raise ConfigError(f, value, 'must be "counts" (outcome distribution) or "last" '
                                  '(latest outcome)')
        checked[key] = value
    if agent == "prioritized_sweeping" and checked["n_planning"] < 1:
        raise ConfigError(f"{field}.n_planning", checked["n_planning"],
                          "must be >= 1 for prioritized_sweeping")
    out = {key: checked[key] for key in _USES[agent]}
    if agent == "q_learning":
        if hparams.get("n_planning", 0) not in (0, None):
            raise ConfigError(f"{field}.n_planning", hparams["n_planning"],
                              "q_learning does no planning (use dyna_q)")
        out["n_planning"] = 0
    return out
