"""What every dyna environment does when ``step`` is called with no episode running.

An episode runs from ``reset`` until a step returns ``terminated`` or ``truncated`` (a
truncation by the env's own step budget; a :class:`gymnasium.wrappers.TimeLimit` around it
truncates in the wrapper, which the env does not see). A ``step`` before the first
``reset``, or after the step that ended the episode, changes nothing and raises
:class:`EpisodeOverError`: Gymnasium leaves that step's result undefined, and its
``OrderEnforcing`` wrapper raises :class:`gymnasium.error.ResetNeeded` for a step before
reset, so the error is one of those too.
"""

from __future__ import annotations

from gymnasium.error import ResetNeeded

from dyna.errors import ConfigError

__all__ = ["EpisodeOverError"]


class EpisodeOverError(ConfigError, ResetNeeded):
    """``step`` was called with no episode running (before the first ``reset``, or after
    the episode terminated or was truncated); call ``reset()``.

    A :class:`dyna.errors.ConfigError` (field ``"step"``, value the action) and a
    :class:`gymnasium.error.ResetNeeded`. Nothing changed.
    """

    def __init__(self, action):
        super().__init__("step", action, "no episode is running (it ended, or reset() was "
                         "never called): call reset()")

    def __reduce__(self):
        # rebuilt from the action, so it crosses process boundaries (vector envs' workers)
        return (type(self), (self.value,))
