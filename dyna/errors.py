"""Typed errors of dyna.

Every error the library raises on bad input derives from :class:`DynaError`, so the CLI can
turn it into one line and exit status 2. Each error also derives from the matching builtin
(``ValueError``, ``KeyError``, ``FileNotFoundError``) so ordinary ``except`` clauses work.
"""

from __future__ import annotations

import math
from collections.abc import Callable


show_value: Callable[[object], str] = repr
"""How a message shows the value it refuses: ``repr``; once :mod:`dyna.redact` is imported
(every module that takes stored or user text imports it, and the CLI and the MCP server
redact each message they show), ``repr`` with every secret a detector finds redacted.
Numbers, names and labels without a secret are shown as given. This module imports nothing
of dyna: :mod:`dyna.redact` installs its function here."""


class DynaError(Exception):
    """Base class of every error dyna raises on bad input or bad state."""


class ConfigError(DynaError, ValueError):
    """A configuration value is invalid.

    Attributes
    ----------
    field : str
        Dotted name of the offending field, e.g. ``"variants.dyna_q.alpha"``.
    value : object
        The value that was given.
    """

    def __init__(self, field: str, value: object, reason: str):
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"{field}={_shown(value)}: {reason}")

    def __reduce__(self):
        # rebuilt from its fields, so it crosses process boundaries (process pools, Ray)
        return (type(self), (self.field, self.value, self.reason))


#: The most characters of a refused value an error message shows.
SHOWN_CHARS = 200


def _shown(value: object) -> str:
    """``value`` as a message shows it (:data:`show_value`): an integer of more than 30
    digits as the text ``'~1e<digits - 1>'`` (``10**40`` -> ``'~1e40'``), and any value
    whose text is longer than :data:`SHOWN_CHARS` cut there, with its length said (a list
    of huge numbers, a pasted file): its size is the point, not its digits."""
    if type(value) is int and abs(value) >= 10 ** 30:
        value = f"{'-' if value < 0 else ''}~1e{int(math.log10(abs(value)))}"
    text = show_value(value)
    if len(text) > SHOWN_CHARS:
        text = f"{text[:SHOWN_CHARS - 40]}... ({len(text):,} characters)"
    return text


class ConfirmationError(ConfigError):
    """A command that deletes data was not confirmed: no terminal to ask on, and not the
    flag that confirms it (``field``, e.g. ``--yes``). The message is ``reason`` alone
    (it names the flag); ``value`` is what the flag was (False)."""

    def __init__(self, field: str, value: object, reason: str):
        self.field = field
        self.value = value
        self.reason = reason
        DynaError.__init__(self, reason)


class UnknownEnvError(ConfigError):
    """An environment id that neither dyna nor the installed Gymnasium knows."""


class MissingFileError(DynaError, FileNotFoundError):
    """A file (or folder) named by the user does not exist; ``reason`` replaces the default
    text "no such file"."""

    def __init__(self, field: str, path: object, reason: str | None = None):
        self.field = field
        self.value = path
        self.reason = reason
        super().__init__(f"{field}={str(path)!r}: {reason or 'no such file'}")

    def __reduce__(self):
        return (type(self), (self.field, self.value, self.reason))


def check_range(field: str, value, lo=None, hi=None, *, lo_open=False, hi_open=False,
                integer=False):
    """Validate a scalar and return it; raise :class:`ConfigError` naming ``field``.

    Parameters
    ----------
    field : str
        Name used in the error message.
    value : int or float
        Value to check. ``bool`` is refused where a number is expected; NaN is always refused.
    lo, hi : float, optional
        Bounds; closed unless ``lo_open`` / ``hi_open``.
    integer : bool
        Require an integral value (returned as ``int``).
    """
    t = type(value)
    if t is int:     # the common case, checked first (bool is not int here)
        pass
    elif t is float:
        if integer:
            if not value.is_integer():
                raise ConfigError(field, value, "must be an integer")
            value = int(value)
        elif value != value:
            raise ConfigError(field, value, "must not be NaN")
    else:
        import math
        import numbers

        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            kind = "an integer" if integer else "a number"
            raise ConfigError(field, value, f"must be {kind}"
                              + (", not a boolean" if isinstance(value, bool) else ""))
        if integer:
            if isinstance(value, float) and not value.is_integer():
                raise ConfigError(field, value, "must be an integer")
            value = int(value)
        elif math.isnan(value):
            raise ConfigError(field, value, "must not be NaN")
    if lo is not None and (value < lo or (lo_open and value == lo)):
        raise ConfigError(field, value, f"must be {'>' if lo_open else '>='} {lo}")
    if hi is not None and (value > hi or (hi_open and value == hi)):
        raise ConfigError(field, value, f"must be {'<' if hi_open else '<='} {hi}")
    return value


def check_time(field: str, value):
    """A timezone-aware :class:`datetime.datetime` in UTC; raise :class:`ConfigError`
    naming ``field`` otherwise.

    Every time dyna keeps is timezone-aware, and every date it derives from one is the UTC
    date (``check_time(field, now).date()``). A time at UTC offset 0 is returned as given;
    another offset is converted to UTC.

    Raises
    ------
    ConfigError
        ``value`` is not a datetime (its type is named), or is naive (no timezone: its UTC
        date cannot be known).
    """
    import datetime as _dt

    if not isinstance(value, _dt.datetime):
        raise ConfigError(field, type(value).__name__, "must return a datetime.datetime")
    offset = value.utcoffset()
    if offset is None:
        raise ConfigError(field, _dt.datetime.isoformat(value), "must be timezone-aware (a naive "
                          "datetime has no UTC date); use datetime.now(timezone.utc)")
    return value if not offset else value.astimezone(_dt.timezone.utc)


class StoreError(DynaError, OSError):
    """A persistence store could not do what was asked (disk full, read-only, bad schema)."""


class StoreBusyError(StoreError, TimeoutError):
    """Another writer held the store's lock longer than the busy timeout.

    Retryable: the failed write was rolled back as a whole, nothing of it is stored.
    """


class StoreDamagedError(StoreError):
    """A store file is damaged (SQLite reports corruption, or it is not a database at all).

    Nothing is renamed, created or written: the file is left exactly as it is, so its
    readable rows can still be copied out (``dyna store recover DB --out NEW``).

    Attributes
    ----------
    path : str
        The damaged file.
    detail : str
        What SQLite found (``quick_check`` / ``integrity_check`` lines or the error text).
    """

    def __init__(self, path: object, detail: str):
        self.path = str(path)
        self.detail = detail
        super().__init__(f"DB={self.path}: damaged SQLite store: {detail}; recover the "
                         f"readable rows with: dyna store recover {self.path} --out NEW")

    def __reduce__(self):
        return (type(self), (self.path, self.detail))


class NotAStoreError(StoreError):
    """A file is a SQLite database but not a dyna experience store; nothing was written."""

    def __init__(self, path: object, reason: str, field: str = "DB"):
        self.path = str(path)
        self.reason = reason
        self.field = field
        super().__init__(f"{field}={self.path}: not a dyna experience store ({reason}); "
                         "nothing was written to it")

    def __reduce__(self):
        return (type(self), (self.path, self.reason, self.field))


class StoreReadOnlyError(StoreError):
    """A write was asked of a store opened read-only; nothing was written."""


class StoreWriteError(StoreError):
    """A write did not reach the store's file (a full disk, a read-only file or folder, an
    I/O error): nothing of it was stored, and the caller's in-memory state holds nothing of
    it either. An acknowledged write (one that returned) is on disk; this error is how a
    caller learns that one was not.

    Attributes
    ----------
    path : str
        The file that was written (``":memory:"`` for an in-memory store, or a JSONL file).
    detail : str
        What went wrong, in SQLite's (or the OS's) words, e.g. ``"database or disk is full"``.
    field : str
        How the file was named to the caller (``"DB"``, ``"path"``).
    """

    def __init__(self, path: object, detail: str, field: str = "DB"):
        self.path = str(path)
        self.detail = str(detail)
        self.field = field
        super().__init__(f"{field}={self.path}: write failed ({self.detail}); nothing of it "
                         "was stored")

    def __reduce__(self):
        return (type(self), (self.path, self.detail, self.field))


class LocalModelError(DynaError, RuntimeError):
    """The local model server (:mod:`dyna.llm_local`) cannot be used: the base of
    :class:`MissingExtraError`, :class:`ModelChecksumError` and :class:`ServerStartError`.
    The message is one line naming what and why."""


class MissingExtraError(LocalModelError):
    """A package of the ``local-llm`` extra is not installed; the message names the module
    and the command that installs the extra."""


class ModelChecksumError(LocalModelError):
    """The model file's SHA-256 is not the one committed in the code: the file is not used.

    Attributes
    ----------
    path : str
    expected, actual : str
        Hex SHA-256 digests.
    """

    def __init__(self, path: object, expected: str, actual: str):
        self.path = str(path)
        self.expected = expected
        self.actual = actual
        super().__init__(f"model={self.path}: sha256 {actual} is not the expected {expected}; "
                         "the file was not used (remove it to assemble it again)")

    def __reduce__(self):
        return (type(self), (self.path, self.expected, self.actual))


class ServerStartError(LocalModelError):
    """The local model server exited, or did not answer within its start-up timeout; it
    was stopped (its whole process group)."""
