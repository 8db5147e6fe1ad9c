"""The tau-bench id formats, and the redaction of a run with them.

tau-bench's airline and retail data name people by ids of fixed shapes: a user id
``mia_li_3668`` (first name, last name or two, 3 to 6 digits) and payment-method ids
``credit_card_4421486``, ``gift_card_5094406``, ``certificate_4856383``,
``paypal_3024827``. They are personal data (an id links to one person's account, card or
certificate), and their shapes are this dataset's, not general formats of the redactor:
:data:`TAU_BENCH_FORMATS` extends the general formats (:data:`dyna.redact.GENERAL_FORMATS`)
with them:

* the ``payment_method_id`` detector: a payment-method id as a whole token, in values, keys
  and prose;
* the ``user_id`` detector: a user id only where something says it is one (``user id``,
  ``user_id:``, ``(id: ...)``, ``You are ...``, ``The user, ...``), so ordinary snake_case
  names (``get_user_details``, ``max_tokens_2048``) are never taken for one; and the value
  of a user-id key (:data:`USER_ID_CUE_KEYS`) of the user-id shape. An id found so is
  redacted wherever else it occurs in the same object (``"Sure, it's mia_li_3668."`` in a
  run whose tool call said ``{"user_id": "mia_li_3668"}``).

The importer redacts under these formats (:func:`redact_run`; everything
:meth:`~dyna.loops.trajectories.runs.TrajectoryRun.digest`,
:meth:`~dyna.loops.trajectories.runs.TrajectoryRun.episode` and
:func:`~dyna.loops.trajectories.runs.import_runs` redact), and so does the trajectories
experiment's job, whose loops and stores hold the runs' texts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from dyna.redact import (DEFAULT_SENSITIVE_KEYS, GENERAL_FORMATS, REDACTED, USER_ID_KEY_NAMES,
                         Detector, KeyedCue, Prefilter, is_sensitive_key, redact,
                         redaction_formats)
from dyna.loops.trajectories.json_text import plain_json

__all__ = ["DIGEST_SENSITIVE_KEYS", "PAYMENT_METHOD_KINDS", "TAU_BENCH_FORMATS",
           "TOKEN_BOUNDARY", "USER_ID_CUE_KEYS", "USER_ID_SHAPE", "redact_run"]

#: Keys whose values a tau-bench digest redacts: the redactor's defaults
#: (:data:`dyna.redact.DEFAULT_SENSITIVE_KEYS`) plus the airline tools' payment fields,
#: whose values are payment-method ids (``payment_id``; ``payment_methods``, the list of
#: ``{payment_id, amount}`` a booking pays with and the user's saved methods keyed by id).
DIGEST_SENSITIVE_KEYS = frozenset(DEFAULT_SENSITIVE_KEYS | {"payment_id", "payment_methods"})

#: A tau-bench user id: first name, last name (or two), 3-6 digits: mia_li_3668.
USER_ID_SHAPE = r"[a-z]{2,}(?:_[a-z]{2,}){1,2}_\d{3,6}"
# The words and characters allowed between a cue and the id: "my user ID is `x`",
# "- **User ID:** x", "(user_id: x)", "with my user id? it's x", "user id, which is 'x'".
_CUE_GAP = (r"(?:[ \t:=,;.?!()*`'\"\u2019\-]|\b(?i:is|was|it's|it\u2019s|its|which|as)\b)"
            r"{0,12}")
# After a strong cue (one naming an id), up to 4 other words may come first: "My user ID
# is already provided, x", "Your user ID (which I already have as x)". A word is letters
# only, so no snake_case name is skipped over as one.
_NEAR_GAP = _CUE_GAP + r"(?:\b[A-Za-z]{1,12}\b" + _CUE_GAP + r"){0,4}"
_USER_ID_CUE = (r"(?i:\b(?:user[ _\-]?id|userid|user[ _\-]?name|customer[ _\-]?id"
                r"|member[ _\-]?id|account[ _\-]?id|passenger[ _\-]?id|(?:my|your)[ \t]+id)\b"
                r"|\((?:with[ \t]+)?id\b)")
# A weak cue (a word for a person or an account, not for an id) only directly before the
# id, separated by white space or one of , : ( = and maybe a quote: "The user, x, is ...",
# "customer x", "passenger: x", "You are 'x'", '{"user": "x"}'.
_USER_ID_WEAK_CUE = (r"(?i:\b(?:user|customer|account|passenger|you[ \t]+are|i[ \t]+am|i'm"
                     r"|i\u2019m)\b)[\"']?(?:[ \t]*[,:(=][ \t]*|[ \t]+)[\"'`]?")
#: Key names whose value, when it has :data:`USER_ID_SHAPE`, is a user id (a cue, as the
#: words of the ``user_id`` detector are in text): :data:`dyna.redact.USER_ID_KEY_NAMES`
#: and the words of the weak cues. Only the shape is caught under these (``{"account":
#: "main"}`` stays).
USER_ID_CUE_KEYS: frozenset[str] = USER_ID_KEY_NAMES | frozenset({
    "account_id", "passenger_id", "user", "customer", "account", "passenger"})

#: The payment-method kinds of the tau-bench airline and retail tools (``source`` of a
#: user's ``payment_methods``); a method's id is the kind, ``_`` and its number.
PAYMENT_METHOD_KINDS: tuple[str, ...] = (
    "credit_card", "gift_card", "certificate", "paypal", "debit_card", "bank_account")

_PAYMENT_METHOD_ID = Detector(
    "payment_method_id",
    re.compile(r"(?<![\w\-])(?i:" + "|".join(PAYMENT_METHOD_KINDS) + r")_\d{4,}(?![\w\-])"),
    "a payment-method id of the tau-bench shape (credit_card_4421486, gift_card_5094406, "
    "certificate_4856383, paypal_3024827, debit_card_..., bank_account_...: a kind of "
    "PAYMENT_METHOD_KINDS, '_', 4 or more digits; one recorded agent wrote "
    "credit_card_7334) as a whole token, in values, keys and prose: it links to one "
    "person's card, gift card, certificate or account (the number is an id, not a card "
    "number, so the credit_card detector does not see it)")
_USER_ID = Detector(
    "user_id",
    re.compile(r"(?:" + _USER_ID_CUE + _NEAR_GAP + r"|" + _USER_ID_WEAK_CUE + r")(?P<secret>"
               + USER_ID_SHAPE + r")(?![\w\-@])"),
    "a user id of the tau-bench shape (mia_li_3668) where a cue says it is one: after "
    "user id / user_id / username / customer id / member id / account id / passenger id "
    "/ my id / your id (with punctuation, the words is, was, it's, which, as and up to 4 "
    "other words between: 'My user ID is already provided, x'), '(id: ...)'; or directly "
    "after 'user', 'customer', 'account', 'passenger', 'You are', 'I am', \"I'm\" (white "
    "space or one of , : ( = and a quote between: 'The user, x, is ...'). A snake_case "
    "name with digits and no cue (skill_loop_2024) is not one")
_ID_TAIL = re.compile(r"_\d{3}")    # USER_ID_SHAPE ends with _ and 3-6 digits

#: The general formats and the tau-bench ids: the payment-method and user-id detectors run
#: just before ``date_of_birth``, a user id caught anywhere is redacted everywhere in the
#: object, and a user-id key holding an id of the shape is a catch.
TAU_BENCH_FORMATS = GENERAL_FORMATS.extended(
    (_PAYMENT_METHOD_ID, _USER_ID),
    {"payment_method_id": Prefilter(folded=tuple(k.lower() for k in PAYMENT_METHOD_KINDS),
                                    digits=4),
     "user_id": Prefilter(also=lambda t, low, nd: "_" in t and _ID_TAIL.search(t) is not None)},
    before="date_of_birth",
    cues=(KeyedCue(USER_ID_CUE_KEYS, re.compile(USER_ID_SHAPE), "user_id"),),
    spreading=("user_id",))

#: A value as a whole token: no letter or digit right before or after it.
TOKEN_BOUNDARY = r"(?<![A-Za-z0-9]){}(?![A-Za-z0-9])"
_ID_LIKE = re.compile(r"^(?=[^\s]*\d)(?=[^\s]*[A-Za-z])[^\s\"']{6,}$")


def _pattern(values: frozenset) -> re.Pattern | None:
    if not values:
        return None
    alts = "|".join(re.escape(v) for v in sorted(values, key=lambda s: (-len(s), s)))
    return re.compile(TOKEN_BOUNDARY.format(f"(?:{alts})"))


def _field_values(obj, keys: frozenset, out: set, inside: bool = False) -> None:
    """Collect into ``out`` the id-like strings (6 or more characters without spaces, with a
    letter and a digit: ``gift_card_5094406``, ``mia.li3818@example.com``; not an amount
    such as ``1023.0``) inside the values of sensitive keys
    (:func:`dyna.redact.is_sensitive_key`), dict keys included; JSON embedded in strings
    is parsed."""
    if isinstance(obj, str):
        parsed = plain_json(obj)
        if parsed is not None:
            _field_values(parsed, keys, out, inside)
        elif inside and _ID_LIKE.match(obj):
            out.add(obj)
    elif isinstance(obj, Mapping):
        for k, v in obj.items():
            hit = inside or is_sensitive_key(str(k), keys)
            if inside and isinstance(k, str) and _ID_LIKE.match(k):
                out.add(k)
            _field_values(v, keys, out, hit)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _field_values(v, keys, out, inside)


def _forget(obj, pattern: re.Pattern):
    """``obj`` with every match of ``pattern`` replaced by the redaction marker, in strings
    and dict keys."""
    if isinstance(obj, str):
        return pattern.sub(REDACTED, obj)
    if isinstance(obj, Mapping):
        return {(pattern.sub(REDACTED, k) if isinstance(k, str) else k): _forget(v, pattern)
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [_forget(v, pattern) for v in obj]
    return obj


def redact_run(task: str, calls: list, messages: Sequence[str], keys: frozenset):
    """Redact a run's texts together: ``(task, [(args, output), ...])`` redacted.

    The task, every call's arguments and output and the conversation's ``messages`` form
    one object for :func:`dyna.redact.redact` under :data:`TAU_BENCH_FORMATS` (a user id it
    learns anywhere is redacted everywhere); then every id-like value found under a key of
    ``keys`` in the original run is replaced by the redaction marker wherever else it occurs
    as a whole token. The messages only teach: they are not returned.
    """
    whole = {"task": task, "calls": [{"args": a, "output": o} for a, o in calls],
             "messages": list(messages)}
    ids: set[str] = set()
    _field_values(whole, keys, ids)
    with redaction_formats(TAU_BENCH_FORMATS):
        out = redact(whole, keys)
    pat = _pattern(frozenset(ids))
    if pat is not None:
        out = _forget(out, pat)
    return out["task"], [(c["args"], c["output"]) for c in out["calls"]]
