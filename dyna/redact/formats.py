"""Which formats a redaction finds: a compiled set of detectors, and the set in use.

A :class:`Formats` holds the detectors in the order they run, their prefilters, the keyed
cues (:class:`~dyna.redact.detectors.KeyedCue`) and the names of the *spreading* detectors
(what one of them catches is redacted wherever else it occurs in the same object), compiled
once for scanning, with the memos of what was found in which text. :data:`GENERAL_FORMATS`,
the general formats of :mod:`dyna.redact.detectors`, is the default.

Code that handles a dataset with formats of its own (the tau-bench importer's user and
payment-method ids, :mod:`dyna.loops.trajectories.redaction`) extends it
(:meth:`Formats.extended`) and redacts under it (:func:`redaction_formats`): every
redaction in that scope, the loops' stores and the experience store included, finds them.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Iterable, Mapping, Sequence

from dyna.errors import ConfigError
from dyna.redact.detectors import DETECTORS, DOB_CUE, PREFILTERS, Detector, KeyedCue, Prefilter
from dyna.redact.keys import normalise_key
from dyna.redact.providers import PROVIDER_DETECTORS, PROVIDER_PREFILTERS

__all__ = ["Formats", "GENERAL_FORMATS", "active_formats", "redaction_formats"]

_DIGITS = b"0123456789"


def _hint_pattern(words: Iterable[str]) -> re.Pattern[str]:
    return re.compile("|".join(sorted(map(re.escape, set(words)), key=len, reverse=True)))


class Formats:
    """A set of redaction formats, compiled for scanning.

    Parameters
    ----------
    detectors : sequence of Detector
        In the order they run; each sees the text the ones before it left, and
        :func:`dyna.redact.detect` lists names in this order.
    prefilters : mapping of str to Prefilter
        Detector name -> a necessary condition of its pattern matching an ASCII text
        (:class:`~dyna.redact.detectors.Prefilter`); a detector without one always runs.
    cues : sequence of KeyedCue
        Mapping entries that count as a detector's catch.
    spreading : iterable of str
        Detectors whose catches (by text or by a keyed cue) :func:`dyna.redact.redact`
        also redacts wherever else they occur in the object, as whole words.

    Attributes
    ----------
    detect_cache : dict
        :func:`dyna.redact.detect`'s memo: a text's 16-byte BLAKE2b digest -> the names
        found in it (no text is held).
    clean_short : dict
        :func:`dyna.redact.scan`'s memo of short texts in which nothing was found.
    key_scans : dict
        A dict key -> the names found in it, and whether it is a cue key.
    """

    def __init__(self, detectors: Sequence[Detector], prefilters: Mapping[str, Prefilter],
                 cues: Sequence[KeyedCue] = (), spreading: Iterable[str] = ()):
        self.detectors = tuple(detectors)
        self.prefilters = dict(prefilters)
        self.cues = tuple(cues)
        self.spreading = frozenset(spreading)
        self.cue_keys = frozenset().union(*(c.keys for c in self.cues))
        #: every detector as ``(index in detectors, detector)``
        self.all_run = tuple(enumerate(self.detectors))
        # A prefilter with literals is false unless one of them is in the text: one search
        # for all of them (case as written, then in the lower-case text) rules those
        # detectors out at once; then only the detectors without literals are looked at.
        self._hints = _hint_pattern(x for p in self.prefilters.values() for x in p.literals)
        self._folded_hints = _hint_pattern(x for p in self.prefilters.values()
                                           for x in p.folded)
        self._gated = tuple((i, d, self.prefilters.get(d.name)) for i, d in self.all_run)
        self._unhinted = tuple((i, d, p if p is None else p.counts_only())
                               for i, d, p in self._gated
                               if p is None or not (p.literals or p.folded))
        self.detect_cache: dict[bytes, tuple[str, ...]] = {}
        self.clean_short: dict[str, None] = {}
        self.key_scans: dict[str, tuple[tuple[str, ...], bool]] = {}

    def extended(self, detectors: Sequence[Detector], prefilters: Mapping[str, Prefilter],
                 *, before: str, cues: Sequence[KeyedCue] = (),
                 spreading: Iterable[str] = ()) -> Formats:
        """These formats and more: ``detectors`` run just before the detector named
        ``before``; ``prefilters``, ``cues`` and ``spreading`` are added.

        Raises
        ------
        ConfigError
            No detector is named ``before`` (field ``before``).
        """
        names = [d.name for d in self.detectors]
        if before not in names:
            raise ConfigError("before", before, "must name one of the detectors")
        i = names.index(before)
        return Formats(self.detectors[:i] + tuple(detectors) + self.detectors[i:],
                       {**self.prefilters, **prefilters}, self.cues + tuple(cues),
                       self.spreading | frozenset(spreading))

    def to_run(self, text: str) -> Sequence[tuple[int, Detector]]:
        """The detectors to run on ``text``, in order, as ``(index, detector)``: on an
        ASCII text those whose prefilter passes, on any other text all."""
        if not text.isascii():
            return self.all_run
        low = text.lower()
        nd = len(text) - len(text.encode("ascii").translate(None, _DIGITS))
        pool = (self._gated if self._hints.search(text) is not None
                or self._folded_hints.search(low) is not None else self._unhinted)
        return [(i, d) for i, d, p in pool if p is None or p(text, low, nd)]

    def keyed_catch(self, key: object, value: object) -> str | None:
        """The detector a mapping entry fires as JSON text would (``"dob":
        "1990-04-05"``): its name when a cue (:attr:`cues`) catches the entry, else None.
        So parsed JSON, and redaction with no key names, catch what the detectors catch in
        the same text unparsed."""
        if not isinstance(value, str) or not isinstance(key, str) or len(value) < 6:
            return None
        canon = normalise_key(key)
        for cue in self.cues:
            if cue.catches(canon, value):
                return cue.detector
        return None


#: The general formats (:mod:`dyna.redact.detectors`, and the provider table of
#: :mod:`dyna.redact.providers` run just before ``anthropic_key``): what every redaction finds.
GENERAL_FORMATS = Formats(DETECTORS, PREFILTERS, (DOB_CUE,)).extended(
    PROVIDER_DETECTORS, PROVIDER_PREFILTERS, before="anthropic_key")

_ACTIVE: contextvars.ContextVar[Formats] = contextvars.ContextVar(
    "dyna_redaction_formats", default=GENERAL_FORMATS)


def active_formats() -> Formats:
    """The formats redaction uses here (:func:`redaction_formats`; by default
    :data:`GENERAL_FORMATS`)."""
    return _ACTIVE.get()


@contextlib.contextmanager
def redaction_formats(formats: Formats):
    """Redact with ``formats`` inside the ``with`` block (or the decorated function):
    :func:`dyna.redact.redact`, :func:`~dyna.redact.detect`, :func:`~dyna.redact.scan`,
    :func:`~dyna.redact.check_label` and everything built on them, in this thread or task.

    Raises
    ------
    ConfigError
        ``formats`` is not a :class:`Formats` (field ``formats``).
    """
    if not isinstance(formats, Formats):
        raise ConfigError("formats", type(formats).__name__, "must be a Formats")
    token = _ACTIVE.set(formats)
    try:
        yield formats
    finally:
        _ACTIVE.reset(token)
