"""What a kind's helper processes need (the agent-tasks figure helpers,
:mod:`dyna.experiment.kinds.agent_tasks.figure_worker`): whether they may be used, how long
a parent waits for one, the environment one is started with, and how one dies with its
parent. Imports nothing of the experiment machinery, so a kind can use it without reaching
the kind registry.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

from dyna.errors import ConfigError

__all__ = ["DEFAULT_TIMEOUT", "ENV_MODE", "ENV_TIMEOUT", "MODES", "check_environment",
           "child_environment", "die_with_parent", "helpers_allowed", "reply_timeout",
           "usable_cores"]

#: Environment variable choosing where plots are drawn: ``serial``, every figure in the
#: process that ran the experiment; ``auto`` (or unset), helper processes where a kind
#: offers them.
ENV_MODE = "DYNA_RENDER"
#: The values :data:`ENV_MODE` may take.
MODES = ("auto", "serial")
#: Environment variable: seconds a parent waits for a helper's answer.
ENV_TIMEOUT = "DYNA_RENDER_TIMEOUT"
#: Default of :data:`ENV_TIMEOUT`: generous, as per-run plots of a large sweep take minutes;
#: a helper that has not answered by then is stopped and the parent draws itself.
DEFAULT_TIMEOUT = 900.0


def helpers_allowed() -> bool:
    """Whether a kind may draw in helper processes: :data:`ENV_MODE` is not ``serial``.

    Raises
    ------
    ConfigError
        Field ``DYNA_RENDER``: a value other than auto or serial.
    """
    value = os.environ.get(ENV_MODE, "").strip() or "auto"
    if value not in MODES:
        raise ConfigError(ENV_MODE, value, f"must be one of {list(MODES)} (environment)")
    return value != "serial"


def check_environment() -> None:
    """Check :data:`ENV_MODE` and :data:`ENV_TIMEOUT` before a run starts, so a bad value
    is refused before the runs rather than when the plots are drawn.

    Raises
    ------
    ConfigError
        Field ``DYNA_RENDER`` or ``DYNA_RENDER_TIMEOUT`` (:func:`helpers_allowed`,
        :func:`reply_timeout`).
    """
    helpers_allowed()
    reply_timeout()


def reply_timeout() -> float:
    """Seconds the parent waits for a helper's answer (``DYNA_RENDER_TIMEOUT``, default
    :data:`DEFAULT_TIMEOUT`).

    Raises
    ------
    ConfigError
        Field ``DYNA_RENDER_TIMEOUT``: not a positive finite number.
    """
    raw = os.environ.get(ENV_TIMEOUT, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(ENV_TIMEOUT, raw, "must be a positive number of seconds "
                          "(environment)")
    return value


def child_environment() -> dict[str, str]:
    """The parent's environment, with the folder this dyna was imported from (a checkout)
    first on ``PYTHONPATH``, so a helper runs the same copy of dyna as its parent; an
    installed dyna (in a site-packages folder, which a helper finds anyway) adds
    nothing, as a site-packages folder on ``PYTHONPATH`` would come before the standard
    library."""
    import site

    import dyna

    root = Path(dyna.__file__).resolve().parents[1]
    sites = [*site.getsitepackages(), site.getusersitepackages()]
    if any(Path(d).resolve() == root for d in sites if d):
        return dict(os.environ)
    rest = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": str(root) + (os.pathsep + rest if rest else "")}


def die_with_parent(parent: int) -> None:
    """In a helper process: on Linux, get SIGKILL when the parent (process id ``parent``)
    exits; exit at once (status 0) if it already has."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            import signal

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)   # PR_SET_PDEATHSIG
        except (OSError, AttributeError):   # pragma: no cover -- no prctl: stdin EOF still ends it
            pass
    if os.getppid() != parent:
        sys.exit(0)


def usable_cores() -> int:
    """Cores this process may run on (``os.sched_getaffinity``; ``os.cpu_count`` where
    that does not exist), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
