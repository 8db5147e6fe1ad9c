"""A run's personal data, harvested by field from its structured tool outputs.

:func:`harvest_by_field` collects a run's personal data *by field* (e-mail addresses,
address lines, dates of birth, payment-method ids, user ids), not by the redactor, so that
counting what the redactor missed is not circular; :func:`find_personal_values` finds them
in a text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from dyna.loops.trajectories.json_text import plain_json
from dyna.loops.trajectories.redaction import TOKEN_BOUNDARY
from dyna.loops.trajectories.runs import TrajectoryRun

__all__ = ["ADDRESS_PARTS", "PERSONAL_FIELDS", "find_personal_values", "harvest_by_field",
           "harvest_personal_values"]

#: Categories of :func:`harvest_by_field`.
PERSONAL_FIELDS = ("email", "address", "dob", "payment_id", "user_id")
#: Postal-address fields harvested (``city``, ``province`` and ``country`` are left out:
#: "Austin", "TX" or "USA" also occur as ordinary travel words, so a hit would not mean
#: that a person's address leaked).
ADDRESS_PARTS = ("address1", "address2", "zip")


def _walk(obj, found: dict) -> None:
    if isinstance(obj, list):
        for v in obj:
            _walk(v, found)
        return
    if not isinstance(obj, dict):
        return
    for k, v in obj.items():
        if k == "email" and isinstance(v, str) and v:
            found["email"].add(v)
        elif k == "dob" and isinstance(v, str) and v:
            found["dob"].add(v)
        elif k == "user_id" and isinstance(v, str) and v:
            found["user_id"].add(v)
        elif k == "payment_id" and isinstance(v, str) and v:
            found["payment_id"].add(v)
        elif k == "address" and isinstance(v, dict):
            found["address"].update(str(v[p]) for p in ADDRESS_PARTS
                                    if isinstance(v.get(p), (str, int)) and str(v[p]))
        elif k == "payment_methods" and isinstance(v, dict):
            for pid, method in v.items():
                found["payment_id"].add(str(pid))
                if isinstance(method, dict) and isinstance(method.get("id"), str):
                    found["payment_id"].add(method["id"])
        if isinstance(v, (dict, list)):
            _walk(v, found)


def _tool_outputs(run) -> tuple[str, ...]:
    if isinstance(run, TrajectoryRun):
        return run.tool_outputs
    traj = run.get("traj") if isinstance(run, Mapping) else None
    return tuple(m.get("content") or "" for m in traj or ()
                 if isinstance(m, Mapping) and m.get("role") == "tool"
                 and isinstance(m.get("content") or "", str))


def harvest_by_field(run) -> dict[str, set[str]]:
    """A run's personal data by category, read from its structured tool outputs.

    Every tool output that parses as JSON is walked: ``email`` values (e-mail addresses),
    ``address`` objects (their ``address1``, ``address2`` and ``zip``: :data:`ADDRESS_PARTS`),
    ``dob`` values (a user's and each passenger's date of birth), payment-method ids (the
    keys and ``id`` of ``payment_methods``, every ``payment_id``) and ``user_id`` values;
    the task's own ``info.task.user_id`` is added to the user ids. Nothing is detected by
    shape: the redactor (:mod:`dyna.redact`) plays no part, so what it misses can be
    counted against this list.

    Parameters
    ----------
    run : TrajectoryRun or Mapping
        A parsed run, or a raw run object of a trajectories file (read leniently: what
        is missing contributes nothing).

    Returns
    -------
    dict of str to set of str
        Keys :data:`PERSONAL_FIELDS`, every key present (possibly empty).
    """
    found: dict[str, set[str]] = {k: set() for k in PERSONAL_FIELDS}
    for text in _tool_outputs(run):
        data = plain_json(text)
        if data is not None:
            _walk(data, found)
    if isinstance(run, TrajectoryRun):
        uid = run.user_id
    else:
        task = ((run.get("info") or {}).get("task") or {}) if isinstance(run, Mapping) else {}
        uid = task.get("user_id") if isinstance(task, Mapping) else None
    if isinstance(uid, str) and uid:
        found["user_id"].add(uid)
    return found


def harvest_personal_values(run) -> set[str]:
    """Every personal-data value of a run, harvested by field (:func:`harvest_by_field`):
    e-mail addresses, postal address lines and zip codes, dates of birth, payment-method
    ids and user ids.

    Parameters
    ----------
    run : TrajectoryRun or Mapping
        A parsed run or a raw run object.

    Returns
    -------
    set of str
    """
    return set().union(*harvest_by_field(run).values())


def find_personal_values(text: str, values: Iterable[str]) -> set[str]:
    """The values of ``values`` that occur in ``text`` as whole tokens (no letter or digit
    right before or after: ``credit_card_4421486`` is not found in
    ``credit_card_44214860``).

    Parameters
    ----------
    text : str
    values : iterable of str
        E.g. :func:`harvest_personal_values` of a run.

    Returns
    -------
    set of str
    """
    if not text:
        return set()
    return {v for v in values if v and v in text
            and re.search(TOKEN_BOUNDARY.format(re.escape(v)), text) is not None}
