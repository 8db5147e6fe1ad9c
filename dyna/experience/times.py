"""Times in the experience store's answers.

An episode's ``timestamp`` is stored as float seconds since the Unix epoch (UTC), the unit
every backend keeps and sorts by. An answer that reports a time as a time (``get_stats``'s
``oldest`` and ``newest``) gives it as a timezone-aware :class:`datetime.datetime` in UTC
(:func:`utc_time`), and as ISO 8601 text with microseconds and the UTC offset in a JSON
answer (``dispatch``, so the MCP tools and ``dyna store stats``:
:func:`dyna.experience.operations.json_ready`), the text exports write
(:func:`dyna.store.columns.iso_times`). The MCP tools give an episode's own ``timestamp``
(``query_similar``, ``replay_experience``, ``export_data`` inline) as that text too
(:func:`iso_utc`).
"""

from __future__ import annotations

import datetime as _dt

from dyna.store.columns import micros_from_seconds

__all__ = ["iso_utc", "utc_time"]

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def utc_time(seconds, field: str = "timestamp") -> _dt.datetime | None:
    """``seconds`` since the Unix epoch as a timezone-aware UTC datetime, to the
    microsecond (rounded half to even, as exports round:
    :func:`dyna.store.columns.micros_from_seconds`); None for None.

    >>> utc_time(86400.5)
    datetime.datetime(1970, 1, 2, 0, 0, 0, 500000, tzinfo=datetime.timezone.utc)

    Raises
    ------
    ConfigError
        A time that is not finite or outside the years 1 to 9999 (field ``field[0]``);
        every stored timestamp is inside them.
    """
    if seconds is None:
        return None
    micros = int(micros_from_seconds(field, [seconds])[0])
    return _EPOCH + _dt.timedelta(microseconds=micros)


def iso_utc(seconds, field: str = "timestamp") -> str | None:
    """``seconds`` since the Unix epoch as ISO 8601 text in UTC with microseconds and the
    offset, as a JSON answer gives a time (:func:`utc_time`, then
    :meth:`~datetime.datetime.isoformat`); None for None.

    >>> iso_utc(86400.5)
    '1970-01-02T00:00:00.500000+00:00'

    Raises
    ------
    ConfigError
        As :func:`utc_time`.
    """
    when = utc_time(seconds, field)
    return None if when is None else when.isoformat(timespec="microseconds")
