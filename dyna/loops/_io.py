"""Names of :mod:`dyna.fileio` and :class:`dyna.loops.safety_net.SafetyNet`, under the
path the memory store imports them by; new code imports them from there."""

from dyna.fileio.atomic import atomic_write
from dyna.fileio.jsonfiles import whole_record
from dyna.fileio.lock import library_lock
from dyna.loops.safety_net import SafetyNet

__all__ = ["SafetyNet", "atomic_write", "library_lock", "whole_record"]
