"""Redaction of a text: the detectors, the ``KEY=value`` rule, and what they find.

:func:`redact_text` replaces every secret-looking substring of a text with
``"[REDACTED]"``: the active formats' detectors in order (:func:`dyna.redact.active_formats`;
each sees the text the ones before it left, a detector with a ``secret`` group replaces only
that group), then the assignment rule (``KEY=value``, ``key: value``, ``"key": "value"``
with a credential key name, :data:`~dyna.redact.keys.SECRET_KEY_NAMES`). :func:`detect`
names what fires (memoised by the text's digest), :func:`has_secret` says whether anything
does, and :func:`check_label` refuses a label that holds a secret.
"""

from __future__ import annotations

import hashlib
import re

from dyna.errors import ConfigError
from dyna.redact.detectors import (SCHEME_WORDS, Detector, header_credentials, is_placeholder,
                                   plain_password)
from dyna.redact.formats import Formats, active_formats
from dyna.redact.keys import REDACTED, SECRET_KEY_NAMES, key_is_sensitive, normalise_key
from dyna.redact.passwords import CLAUSE_END, password_key, working_directory

__all__ = ["ASSIGNMENT_DETECTOR", "DETECT_CACHE_MAX_CHARS", "DETECT_CACHE_SIZE",
           "KEY_CACHE_SIZE", "check_label", "detect", "has_secret", "key_scan",
           "redact_text", "scan_text"]


# The assignment rule fires only on a key that is sensitive by the SECRET_KEY_NAMES rule:
# its normal form (:func:`normalise_key`; on ASCII: camelCase split, lower case, separators
# made '_') equals or ends with one of those names, so it ends with the name's last word,
# which the key (a part of the text) holds as written, in some case. Words holding another
# of these words are implied by it ("password" by "pass").
_LAST_WORDS = {n.rsplit("_", 1)[-1] for n in SECRET_KEY_NAMES}
_ASSIGNMENT_WORDS = tuple(sorted(w for w in _LAST_WORDS
                                 if not any(o != w and o in w for o in _LAST_WORDS)))


def _may_assign(text: str) -> bool:
    """False only where the ``KEY=value`` rule cannot fire in the ASCII ``text``: no ``:``
    or ``=``, or no last word of a credential key name in any case."""
    if ":" not in text and "=" not in text:
        return False
    low = text.lower()
    return any(w in low for w in _ASSIGNMENT_WORDS)

# ``KEY=value`` / ``key: value`` in text. Only key and operator are consumed, so the value of
# one assignment can itself hold the next ("NOTE=DB_PASSWORD=x"). Up to three words form the
# key ("my new password: ..."); it is sensitive by the SECRET_KEY_NAMES rule.
_KEY_CHARS = r"[\w.\-\u200b-\u200d\u2060\ufeff]"
_ASSIGNMENT = re.compile(
    r"(?<![\w.\-\u200b-\u200d\u2060\ufeff])(?P<key>" + _KEY_CHARS + r"+(?: " + _KEY_CHARS
    + r"+){0,2})[\"']?[ \t]*(?::|=|：|＝)[ \t]*")
# An unquoted value runs to white space or a quote; a ",", ";" or "&" ends it only where
# another ``key=`` follows (a query string, a list of assignments), and trailing sentence
# punctuation is dropped: "Password: Tr0ub4dor&3" is one value, "a=1&token=x&b=2" three.
_UNQUOTED_VALUE = re.compile(r"[^\s\"']+")
_NEXT_ASSIGNMENT = re.compile(r"[,;&](?=[\w.\-]+=)")
# After a scheme word (AUTH_SCHEMES) as the value, the credential is the next run.
_SCHEME_CREDENTIAL = re.compile(r"[ \t]+([^\s\"']+)")
_SCHEMED_VALUE = re.compile(r"([\w\-]+)[ \t]+(\S.*)")
ASSIGNMENT_DETECTOR = "sensitive_assignment"
"""Name :func:`detect` reports for a ``KEY=value`` assignment with a sensitive key."""
_CLAUSE_END = re.compile(CLAUSE_END)


def _value_kept(m: re.Match[str], value: str, text: str, end: int, quoted: bool) -> bool:
    """The value of a sensitive assignment ``m`` is not a secret: a placeholder, or under
    ``pwd`` the shell's working directory (``PWD=/home/user``). A plain word is a
    placeholder but under a password key (``DB_PW``, ``pw``, ``my password``) it is a
    password when the words around it say so: quoted, written against ``=``
    (``DB_PW=hunter``), or ending the clause (``pw: hunter``, ``password: hunter for the
    db``) and not a word that describes a password (``password: required``)."""
    canon = normalise_key(m.group("key"))
    # in prose the key's last word names what follows ("the deploy uses PWD=/home/user")
    if working_directory(normalise_key(m.group("key").rsplit(" ", 1)[-1]), value):
        return True
    if not is_placeholder(value):
        return False
    if password_key(canon) is None or not plain_password(value):
        return True
    tight = m.group(0)[-1] in "=＝"
    return not (quoted or tight or _CLAUSE_END.match(text, end))



def _assignments(text: str, out: list[str] | None) -> str:
    pieces: list[str] = []
    pos = 0
    found = False
    for m in _ASSIGNMENT.finditer(text):
        start = m.end()
        if start < pos:
            continue
        if not key_is_sensitive(m.group("key"), SECRET_KEY_NAMES):
            continue
        quoted = start < len(text) and text[start] in "\"'"
        if quoted:
            q = text[start]
            end = text.find(q, start + 1)
            nl = text.find("\n", start + 1)
            if end < 0 or (0 <= nl < end):
                continue
            v0, v1 = start + 1, end
            sm = _SCHEMED_VALUE.fullmatch(text, v0, v1)
            if sm is not None and sm.group(1).casefold() in SCHEME_WORDS:
                if not header_credentials(sm.group(2)):  # "Token {token}", "Bearer <t>"
                    continue
                v0 = sm.start(2)
        else:
            vm = _UNQUOTED_VALUE.match(text, start)
            if vm is None:
                continue
            v0, v1 = vm.span()
            if text[v0:v1].casefold() in SCHEME_WORDS:  # "auth_token: Token 9944b0..."
                vm = _SCHEME_CREDENTIAL.match(text, v1)
                if vm is None or not header_credentials(vm.group(1)):
                    continue
                v0, v1 = vm.span(1)
            cut = _NEXT_ASSIGNMENT.search(text, v0, v1)
            if cut is not None:
                v1 = cut.start()
            while v1 > v0 and text[v1 - 1] in ",;.":
                v1 -= 1
        value = text[v0:v1]
        if (len(value) < 4 or value.startswith(REDACTED[:-1])
                or _value_kept(m, value, text, v1, quoted)):
            continue
        pieces.append(text[pos:v0])
        pieces.append(REDACTED)
        pos = v1
        found = True
    if not found:
        return text
    if out is not None:
        out.append(ASSIGNMENT_DETECTOR)
    pieces.append(text[pos:])
    return "".join(pieces)


def scan_text(text: str, out: list[str] | None, learned: set[str] | None = None,
              formats: Formats | None = None) -> str:
    """``text`` redacted by every detector of ``formats`` (default the active ones,
    :func:`~dyna.redact.active_formats`) and the assignment rule; the names that fired are
    appended to ``out``, what a spreading detector caught is added to ``learned``."""
    if len(text) < 6:
        return text
    formats = formats or active_formats()
    todo = formats.to_run(text)
    j = 0
    while j < len(todo):
        ix, det = todo[j]
        j += 1
        pattern = det.pattern
        if pattern.search(text) is None:
            continue
        grouped = "secret" in pattern.groupindex
        fired = False

        def repl(m: re.Match[str], det: Detector = det, grouped: bool = grouped) -> str:
            nonlocal fired
            secret = m.group("secret") if grouped else m.group(0)
            if det.validator is not None and not det.validator(secret):
                return m.group(0)
            fired = True
            if learned is not None and det.name in formats.spreading:
                learned.add(secret)
            if not grouped:
                return REDACTED
            s, e = m.span("secret")
            whole = m.group(0)
            return whole[: s - m.start()] + REDACTED + whole[e - m.start():]

        new = pattern.sub(repl, text)
        if fired:
            text = new
            if out is not None:
                out.append(det.name)
            # the next detectors see the redacted text: their prefilters too
            todo, j = [e for e in formats.to_run(text) if e[0] > ix], 0
    if text.isascii() and not _may_assign(text):
        return text
    return _assignments(text, out)


def redact_text(text: str) -> str:
    """Replace every secret-looking substring of ``text`` with ``"[REDACTED]"``.

    Applies the named :data:`DETECTORS` in order (a detector with a ``secret`` group replaces
    only that group: ``postgres://u:[REDACTED]@host``), then the assignment rule: in
    ``KEY=value``, ``key: value``, ``"key": "value"`` (also ``：``/``＝``), where the key
    normalised by :func:`normalise_key` is a credential name (:data:`SECRET_KEY_NAMES`, by
    suffix: ``DB_PASSWORD``, ``DJANGO_SECRET_KEY``, ``SLACK_TOKEN``, ``x-api-key``), the value
    (quoted: to the closing quote; unquoted: to white space or one of ``"',;&``) is replaced
    unless it is shorter than 4 characters or :func:`is_placeholder` (``YOUR_KEY_HERE``,
    ``<token>``, ``${VAR}``, a plain word such as ``forgotten``) or the working directory under
    ``PWD``; under a password key a plain word is a password where the words around it say
    so (``DB_PW=hunter``, ``pw: hunter``; :mod:`dyna.redact.passwords`). Personal key names
    (``name:``) are not used on prose; embedded JSON is handled by :func:`redact`.

    Parameters
    ----------
    text : str
        Any string value.

    Returns
    -------
    str
        ``text`` itself when nothing matched, else a new string with each match replaced.
    """
    return scan_text(text, None)


def detect(text: str) -> list[str]:
    """Names of the detectors that fire in ``text``, in :data:`DETECTORS` order, each once.

    ``"sensitive_assignment"`` (:data:`ASSIGNMENT_DETECTOR`) names the ``KEY=value`` rule.
    Detectors run as :func:`redact_text` runs them, each on the text the previous ones left,
    so one secret is normally counted once. ``"[REDACTED]"`` markers never fire.
    """
    if len(text) < 6:   # scan_text looks at nothing shorter
        return []
    formats = active_formats()
    if len(text) > DETECT_CACHE_MAX_CHARS:
        return list(_detect_uncached(text, formats))
    cache = formats.detect_cache
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    got = cache.get(digest)
    if got is None:
        got = _detect_uncached(text, formats)
        if len(cache) >= DETECT_CACHE_SIZE:
            try:
                cache.pop(next(iter(cache)))   # oldest first
            except (KeyError, StopIteration, RuntimeError):    # another thread got there
                pass
        cache[digest] = got
    return list(got)


#: :func:`detect` remembers the detector names of this many texts per set of formats (the
#: loops' safety net scans the same skill bodies and facts on every write) ...
DETECT_CACHE_SIZE = 16384
#: ... of at most this many characters each; keyed by a 16-byte BLAKE2b digest, so the
#: cache holds no text (no secret stays referenced by it) and at most ~1 MB.
DETECT_CACHE_MAX_CHARS = 4096
#: :func:`key_scan` remembers this many dict keys per set of formats (then starts again).
KEY_CACHE_SIZE = 4096


def _detect_uncached(text: str, formats: Formats) -> tuple[str, ...]:
    names: list[str] = []
    scan_text(text, names, None, formats)
    return tuple(dict.fromkeys(names))


def key_scan(key: str, formats: Formats) -> tuple[tuple[str, ...], bool]:
    """What a dict key holds under ``formats``: the names :func:`detect` finds in it, and
    whether it is a cue key (a :class:`~dyna.redact.detectors.KeyedCue`'s), memoised per
    key name (schema names repeat on every record)."""
    cache = formats.key_scans
    got = cache.get(key)
    if got is None:
        if len(cache) >= KEY_CACHE_SIZE:
            cache.clear()
        got = cache[key] = (tuple(detect(key)), normalise_key(key) in formats.cue_keys)
    return got


def has_secret(text: str) -> bool:
    """True when some detector or the assignment rule fires in ``text`` (:func:`detect`)."""
    return bool(detect(text))



def check_label(field: str, value):
    """Return ``value`` if the label field holds no secret, else raise :class:`ConfigError`.

    Labels (``run_id``, ``task_type``, ``variant``, ``tenant``, ...) group results; redacting
    one would merge every label holding a secret into one ``"[REDACTED]"`` bucket, so a label
    with a secret or personal datum (any :func:`detect` name) is refused. The error names the
    field and carries the redacted value, never the secret itself. None passes.

    Raises
    ------
    ConfigError
        ``field`` named, value redacted, reason listing the detectors that fired.
    """
    if value is None:
        return value
    text = value if isinstance(value, str) else str(value)
    names = detect(text)
    if names:
        raise ConfigError(field, redact_text(text),
                          "a label must not hold a secret or personal data (detected: "
                          + ", ".join(names) + "); a redacted label would merge buckets")
    return value


