"""Redaction and scanning of JSON-like objects: dicts, lists, tuples, strings, numbers.

:func:`redact` returns a redacted deep copy: the value of every sensitive key becomes
``"[REDACTED]"`` (:mod:`dyna.redact.keys`); every string is redacted as text
(:mod:`dyna.redact.text`); a string holding a JSON object or array is parsed, redacted like
any dict and serialised again; a dict *key* in which a detector fires is replaced by
``"[REDACTED:<hash>]"`` (:func:`keyed_hash`), so no two secret keys of one mapping collide;
an entry a keyed cue catches is redacted; and what a spreading detector of the active
formats finds is redacted wherever else it occurs in the same object. :func:`scan` counts
the catches without redacting.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import json
import os
import re
from collections.abc import Iterable, Mapping

from dyna.fileio.unique_json import loads_unique
from dyna.redact.formats import Formats, active_formats
from dyna.redact.keys import (DEFAULT_SENSITIVE_KEYS, REDACTED, cached_key_set,
                              key_is_sensitive, key_set, normalise_key)
from dyna.redact.passwords import working_directory
from dyna.redact.text import DETECT_CACHE_MAX_CHARS, detect, key_scan, scan_text

__all__ = ["CLEAN_SHORT_MAX_CHARS", "CLEAN_SHORT_SIZE", "DEFAULT_HMAC_KEY", "HMAC_KEY_ENV",
           "card_int", "keyed_hash", "known_clean", "redact", "scan", "scan_found"]

#: Environment variable holding the HMAC key of :func:`keyed_hash` (any string).
HMAC_KEY_ENV = "DYNA_REDACT_KEY"
#: The key used when that variable is unset: public, so results are the same in every
#: process, on every backend (same seed, same result).
DEFAULT_HMAC_KEY = b"dyna-redact-v1"


def _default_hmac_key() -> bytes:
    value = os.environ.get(HMAC_KEY_ENV)
    return value.encode("utf-8") if value else DEFAULT_HMAC_KEY


def keyed_hash(text: str, hmac_key: bytes | None = None, digits: int = 12) -> str:
    """First ``digits`` hex digits of HMAC-SHA256(``hmac_key``, UTF-8 of ``text``).

    Used in ``"[REDACTED:<hash>]"`` for dict keys that hold a secret: two different keys
    never collide (the name widens on a collision) and no value is lost. The hash is not
    reversible, and it is deterministic, so the same input gives the same stored text in
    every process and on every backend. The default HMAC key comes from the environment
    variable ``DYNA_REDACT_KEY``, else the public :data:`DEFAULT_HMAC_KEY`: with the public
    key someone who can guess a low-entropy secret could confirm the guess, so set
    ``DYNA_REDACT_KEY`` (kept out of files) where that matters; a high-entropy secret (an
    API key) cannot be guessed either way.
    """
    key = _default_hmac_key() if hmac_key is None else hmac_key
    if isinstance(key, str):
        key = key.encode("utf-8")
    raw = text.encode("utf-8", "surrogatepass")
    return hmac.new(key, raw, hashlib.sha256).hexdigest()[:digits]


def _secret_key_name(key: str, hmac_key, taken: dict[str, str]) -> str:
    for digits in range(12, 65, 4):
        name = f"[REDACTED:{keyed_hash(key, hmac_key, digits)}]"
        if taken.setdefault(name, key) == key:
            return name
    raise AssertionError("HMAC-SHA256 collision over 256 bits")  # pragma: no cover


def redact(obj, keys: Iterable[str] = DEFAULT_SENSITIVE_KEYS, *, values: bool = True,
           hmac_key: bytes | None = None):
    """Return a redacted deep copy of a JSON-like object; the input is never mutated.

    Parameters
    ----------
    obj : object
        A JSON-like value: dicts (any mapping), lists, tuples, strings, numbers, None. Other
        objects are returned unchanged (not copied).
    keys : iterable of str
        Sensitive key names. A mapping entry is redacted when
        :func:`~dyna.redact.keys.is_sensitive_key` says so: its key, normalised, equals one
        of these names, or ends with ``_`` + one that is a credential name (``DB_PASSWORD``
        under ``password``), or starts with a prefix family (``credit_card_4421486`` under
        ``credit_card``). So ``"API-KEY"`` and ``"apiKey"`` match ``api_key`` but
        ``"tokenizer"`` does not match ``token``. Default
        :data:`~dyna.redact.keys.DEFAULT_SENSITIVE_KEYS`.
    values : bool
        Also (default True): redact secret-looking substrings of string values
        (:func:`~dyna.redact.text.redact_text`); parse a string holding a JSON object or
        array, redact it with ``keys`` and serialise it again (``json.dumps``, non-ASCII
        kept; the same string when nothing changed); replace a string dict key in which a
        detector fires by ``"[REDACTED:<hash>]"`` (:func:`keyed_hash`; distinct keys of one
        mapping get distinct names, its value is kept and redacted like any other); redact
        an entry whose key is a cue for its value's shape (a keyed cue of the active
        formats, :class:`~dyna.redact.detectors.KeyedCue`: a date-of-birth key holding a
        date), as the detectors do in the same JSON text, whatever ``keys`` say; and redact
        what a spreading detector of the active formats found in ``obj`` (:class:`Formats`
        ``spreading``) wherever else it occurs in ``obj``: in every string, dict key and
        embedded JSON, as a whole word. With False only sensitive keys are redacted.
    hmac_key : bytes, optional
        Key of the keyed hash of secret dict keys; default :func:`keyed_hash`'s
        (``DYNA_REDACT_KEY``, else :data:`DEFAULT_HMAC_KEY`).

    Returns
    -------
    object
        New containers (dicts become ``dict``, lists stay lists, tuples stay tuples) in which
        the value of every sensitive key, whatever its type, is ``"[REDACTED]"``, except
        a bool or None (one bit or nothing, never a secret) and an absolute path under
        ``PWD`` (the shell's working directory, :func:`dyna.redact.passwords.working_directory`).

    Raises
    ------
    ConfigError
        If ``keys`` is a single string.
    """
    names = cached_key_set(keys) if isinstance(keys, frozenset) else key_set(keys)
    if (values and type(obj) is str and len(obj) <= DETECT_CACHE_MAX_CHARS
            and _embedded_json(obj) is None and not detect(obj)):
        return obj   # a plain text no detector fires in: nothing to redact or learn
    walk = _Walk(names, values, hmac_key, active_formats())
    if values and type(obj) is dict and walk.plain_flat(obj):
        return dict(obj)   # what walk.redact builds for it: the same entries, nothing learned
    out = walk.redact(obj)
    if walk.learned:
        found = "|".join(sorted(map(re.escape, walk.learned), key=len, reverse=True))
        out = _forget(out, re.compile(r"(?<![\w\-])(?:" + found + r")(?![\w\-@])"),
                      hmac_key)
    return out


def _forget(obj, pattern: re.Pattern[str], hmac_key):
    """``obj`` with every match of ``pattern`` (what :func:`redact` learned) redacted:
    in strings and dict keys (keyed hashes, so two keys never merge), JSON embedded in a
    string parsed and treated the same way."""
    if isinstance(obj, str):
        if pattern.search(obj) is None:
            return obj
        parsed = _embedded_json(obj)
        if parsed is not None:
            return json.dumps(_forget(parsed, pattern, hmac_key), ensure_ascii=False)
        return pattern.sub(REDACTED, obj)
    if isinstance(obj, Mapping):
        out = {}
        taken = {k: k for k in obj if isinstance(k, str)}
        for k, v in obj.items():
            if isinstance(k, str) and pattern.search(k):
                del taken[k]
                k = _secret_key_name(k, hmac_key, taken)
            out[k] = _forget(v, pattern, hmac_key)
        return out
    if isinstance(obj, list):
        return [_forget(v, pattern, hmac_key) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_forget(v, pattern, hmac_key) for v in obj)
    return obj


def _embedded_json(text: str):
    """The dict or list a string holds as JSON text, else None."""
    c = text[:1]
    if c and c not in "{[" and not c.isspace():
        return None   # as below: strip() keeps this first character, which opens no JSON
    s = text.strip()
    if s[:1] in "{[" and s[-1:] in "}]" and len(s) >= 2:
        try:
            parsed = loads_unique(s)
        except (ValueError, RecursionError):
            # too deep for the decoder, or an object naming a key twice (whose parsed copy
            # would drop a value): read as the text it is, every value scanned
            return None
        if isinstance(parsed, (dict, list)):
            return parsed
    return None


class _Walk:
    """One :func:`redact` of an object: the key names, switches and formats it uses, and
    what its spreading detectors found (``learned``; None with ``values`` off)."""

    def __init__(self, names: frozenset[str], values: bool, hmac_key, formats: Formats):
        self.names = names
        self.values = values
        self.hmac_key = hmac_key
        self.formats = formats
        self.learned: set[str] | None = set() if values else None

    def plain_flat(self, obj: dict) -> bool:
        """True when ``obj`` maps strings to strings and :meth:`redact` (``values`` on)
        would change no entry and learn nothing: no key is sensitive or holds a secret, no
        entry is a cue catch, and no value holds JSON or fires a detector (a value under 6
        characters fires none, and its JSON, if any, comes back unchanged: :meth:`text`
        returns the text when nothing in it changed). A tool call's arguments
        (``{"value": "val_1"}``) are such a mapping."""
        formats = self.formats
        for k, v in obj.items():
            if type(k) is not str or type(v) is not str:
                return False
            if key_is_sensitive(k, self.names) or (len(k) >= 6 and key_scan(k, formats)[0]):
                return False
            if len(v) >= 6 and (formats.keyed_catch(k, v) is not None
                                or _embedded_json(v) is not None or detect(v)):
                return False
        return True

    def text(self, text: str) -> str:
        """A string redacted: JSON it holds walked and written again (the same string when
        nothing in it changed), else every detector and the assignment rule."""
        parsed = _embedded_json(text)
        if parsed is not None:
            try:
                out = self.redact(parsed)
                return text if out == parsed else json.dumps(out, ensure_ascii=False)
            except RecursionError:
                pass   # nested deeper than the walk goes: redacted below as the text it is
        if len(text) <= DETECT_CACHE_MAX_CHARS and not detect(text):
            # no detector fires (remembered by digest): scan_text would return ``text``
            # unchanged and learn nothing; the loops redact the same tool outputs and
            # task texts on every episode
            return text
        return scan_text(text, None, self.learned, self.formats)

    def redact(self, obj):
        """A redacted copy of ``obj`` (:func:`redact`)."""
        if isinstance(obj, str):
            return self.text(obj) if self.values else obj
        if isinstance(obj, Mapping):
            out = {}
            taken: dict[str, str] = {}
            for k, v in obj.items():
                sensitive = key_is_sensitive(str(k), self.names)
                catch = self.formats.keyed_catch(k, v) if self.values else None
                if catch is not None:  # as the detectors would catch it in the JSON text
                    sensitive = True
                    if catch in self.formats.spreading and self.learned is not None:
                        self.learned.add(v)
                if (self.values and isinstance(k, str) and len(k) >= 6
                        and key_scan(k, self.formats)[0]):
                    k = _secret_key_name(k, self.hmac_key, taken)
                # a bool or None under a sensitive key is one bit or nothing: never a secret
                # (a check's ``pass``, a run's ``all_pass``); a path under ``PWD`` is the
                # shell's working directory
                hides = (sensitive and not isinstance(v, (bool, type(None)))
                         and not working_directory(normalise_key(k), v))
                out[k] = REDACTED if hides else self.redact(v)
            return out
        if isinstance(obj, list):
            return [self.redact(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self.redact(v) for v in obj)
        return self.other(obj) if self.values else obj

    def other(self, obj):
        """A value that is neither text nor a container, redacted where it carries text:
        bytes (as UTF-8, bytes not UTF-8 kept through ``surrogateescape``), a numpy array
        of strings, bytes or objects (element by element, the same shape, the same dtype
        kind), and an int of a card number's shape (:func:`card_int`). Anything else is
        returned as it is."""
        if isinstance(obj, (bytes, bytearray)):
            text = bytes(obj).decode("utf-8", "surrogateescape")
            out = self.text(text)
            return obj if out == text else out.encode("utf-8", "surrogateescape")
        if type(obj) is int:
            return REDACTED if card_int(obj) else obj
        kind = getattr(getattr(obj, "dtype", None), "kind", None)
        if kind in ("U", "S", "O") and hasattr(obj, "tolist"):
            import numpy as np   # only arrays reach here: numpy is loaded already
            items = obj.ravel().tolist()
            out = [self.redact(v) for v in items]
            if out == items:
                return obj
            if kind == "O":
                arr = np.empty(len(out), dtype=object)
                arr[:] = out
                return arr.reshape(obj.shape)
            return np.array(out).reshape(obj.shape)
        return obj


#: An int of at least this many digits may be a card number (:func:`card_int`).
_CARD_INT_MIN = 10 ** 12


def card_int(value: int) -> bool:
    """True for an int of a payment card's shape: 13-19 digits, an issuer prefix and the
    Luhn checksum (the ``credit_card`` detector on its digits). An int cannot carry the words
    around it, so a Luhn-valid id of 13-19 digits in an issuer range (1 random id in 10 of
    those starting 4 or 51-55) is taken for a card; a smaller int is never one. An SSN or a
    phone number as an int has lost its dashes and is a plain number: it is redacted under
    a personal key (``ssn``, ``phone``), not by its shape."""
    if not _CARD_INT_MIN <= value < 10 ** 19:
        return False
    return "credit_card" in detect(str(value))


#: Exact types that hold no text (:func:`scan` passes over them without the checks).
_SCALAR_TYPES = frozenset({float, bool, type(None)})


def scan(obj) -> collections.Counter:
    """Count detector catches over a JSON-like object: string values, string dict keys and
    JSON embedded in strings, per detector name (:func:`~dyna.redact.text.detect`); an entry
    a keyed cue catches (``"dob": "1990-04-05"``) counts as its detector's catch."""
    counts: collections.Counter = collections.Counter()
    _scan_walk(obj, counts, active_formats())
    return counts


# module-level, not closures inside scan(): a closure that calls itself is a reference
# cycle, left for the cyclic garbage collector after every scan (the loops scan on every
# write)
def _scan_text_of(o: str, counts, formats: Formats) -> None:
    if len(o) < 6:
        # nothing to count: detect() looks at no text this short, and JSON this short
        # holds no mapping (``{"":0}`` is 6 characters) and only strings detect() skips
        return
    clean_short = formats.clean_short
    if o in clean_short:
        return
    parsed = _embedded_json(o)
    if parsed is not None:
        sub = _Found()
        try:
            _scan_walk(parsed, sub, formats)
        except RecursionError:
            pass   # nested deeper than the walk goes: scanned below as the text it is
        else:
            counts.update(sub)
            return
    found = detect(o)
    if found:
        counts.update(found)
    elif len(o) <= CLEAN_SHORT_MAX_CHARS and type(o) is str:
        if len(clean_short) >= CLEAN_SHORT_SIZE:
            clean_short.clear()
        clean_short[o] = None


#: :func:`scan` remembers short texts in which nothing was found (labels, names, run ids,
#: provenance tags and record fields repeat on every write of the loops), per set of
#: formats (:attr:`Formats.clean_short`): at most this many ...
CLEAN_SHORT_SIZE = 4096
#: ... of at most this many characters. Only texts no detector catches are held (what the
#: stores write out as they are); a text with a catch is never kept (:func:`detect`'s
#: cache holds digests, not texts).
CLEAN_SHORT_MAX_CHARS = 64


def known_clean(text) -> bool:
    """True when :func:`scan_found` of a record (a dict or list) holding the string
    ``text`` as a value would not run a detector on it: a text under 6 characters (the
    walk skips those), or a short one it found nothing in before (its memo). False says
    only "not known", never "holds a secret"."""
    return type(text) is str and (len(text) < 6 or text in active_formats().clean_short)


class _Found(list):
    """The detector names :func:`_scan_walk` finds, as a list (``update`` extends it):
    what :func:`scan_found` collects without building a Counter."""

    __slots__ = ()
    update = list.extend


def scan_found(obj) -> list[str]:
    """The catches :func:`scan` counts, as a list of detector names (one per catch, in
    the order found): ``collections.Counter(scan_found(obj)) == scan(obj)``; empty when
    nothing is found."""
    found = _Found()
    _scan_walk(obj, found, active_formats())
    return found


def _scan_walk(o, counts, formats: Formats) -> None:
    t = type(o)
    if t in _SCALAR_TYPES:   # nothing to scan (the checks below, made quick)
        return
    if t is int:
        if card_int(o):
            counts.update(("credit_card",))
        return
    clean_short = formats.clean_short
    if t is str or (t is not dict and t is not list and t is not tuple
                    and isinstance(o, str)):
        _scan_text_of(o, counts, formats)
    elif t is dict or (t is not list and t is not tuple and isinstance(o, Mapping)):
        for k, v in o.items():
            if isinstance(k, str):   # (keyed_catch is None for any other key)
                found, cue = key_scan(k, formats)
                if found:
                    counts.update(found)
                if cue:
                    catch = formats.keyed_catch(k, v)
                    if catch is not None:
                        counts.update((catch,))
                        continue
            # (_scan_text_of's first checks without the call: most values of a record are
            # short or seen before; one frame per level, as deep as before)
            if type(v) is str:
                if len(v) >= 6 and v not in clean_short:
                    _scan_text_of(v, counts, formats)
            elif type(v) not in _SCALAR_TYPES:
                _scan_walk(v, counts, formats)
    elif t is list or t is tuple or isinstance(o, (list, tuple)):
        for v in o:
            if type(v) is str:
                if len(v) >= 6 and v not in clean_short:
                    _scan_text_of(v, counts, formats)
            elif type(v) not in _SCALAR_TYPES:
                _scan_walk(v, counts, formats)
    elif isinstance(o, (bytes, bytearray)):
        _scan_text_of(bytes(o).decode("utf-8", "surrogateescape"), counts, formats)
    elif getattr(getattr(o, "dtype", None), "kind", None) in ("U", "S", "O"):
        _scan_walk(o.ravel().tolist(), counts, formats)

