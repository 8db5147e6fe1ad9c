"""Text helpers shared by the skill library, the memory store and the review pipeline.

One place for: tokenising text for trigger matching (whole words, phrases, punctuation
kept apart so ``/plan`` is matchable), normalising a fact for de-duplication, spotting the
concrete parts of a lesson (commands, files, values, names) and a word-set similarity.

Text compared for identity (facts, triggers, dedup keys, matched words) is compared after
one normalisation, :func:`identity_text` (Unicode NFKC, case-folded): ``"Ｄeploy"``,
``"DEPLOY"`` and ``"deploy"`` are one word, and so are ``"déploy"`` composed and
``"de\u0301ploy"`` decomposed. Skill names are the exception that keeps its own rule
(:func:`dyna.loops.skills.check_skill_name`): NFKC, and refused unless lowercase.
"""

from __future__ import annotations

import re
import unicodedata
from fractions import Fraction
from functools import lru_cache
from typing import NamedTuple

import numpy as np

# A token is a run of word characters (letters, digits, underscore; Unicode aware) or one
# non-space punctuation character. Punctuation is kept as its own token so that a trigger
# such as "/plan" can require the slash, while "git" can never match inside "github".
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")
_WORD_RE = re.compile(r"\w+")

STOPWORDS = frozenset("""
a an and are as at be been but by can do does for from has have how i if in into is it its
me my no not of on or our out so than that the their them then there these this those to
up us was we were what when where which while who why will with you your use using used
""".split())


def identity_text(text: str) -> str:
    """``text`` as compared for identity: Unicode NFKC, case-folded, NFKC again (Unicode's
    NFKC_Casefold order, so the result is itself NFKC). ASCII text is only case-folded.

    >>> identity_text("Ｄeploy") == identity_text("DEPLOY") == "deploy"
    True
    >>> identity_text("de\u0301ploy") == identity_text("d\u00e9ploy") == "d\u00e9ploy"
    True
    """
    if text.isascii():
        return text.casefold()
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())


@lru_cache(maxsize=1 << 13)
def tokenize(text: str) -> tuple[tuple[str, ...], tuple[bool, ...]]:
    """Split text into case-folded tokens and "glued" flags.

    Parameters
    ----------
    text : str
        Any text.

    Returns
    -------
    tokens : tuple of str, length n
        Word runs (``\\w+``) and single punctuation characters of
        :func:`identity_text`.
    glued : tuple of bool, length n
        ``glued[i]`` is True when token ``i`` starts exactly where token ``i - 1`` ends
        (no whitespace between), e.g. the ``plan`` of ``/plan``. ``glued[0]`` is False.

    Results are remembered (triggers and task texts repeat); they are immutable.
    """
    toks: list[str] = []
    glued: list[bool] = []
    end = -1
    for m in _TOKEN_RE.finditer(identity_text(text)):
        toks.append(m.group())
        glued.append(m.start() == end)
        end = m.end()
    return tuple(toks), tuple(glued)


#: Characters per token of :func:`estimate_tokens` (the common rule of thumb for English
#: text and BPE tokenizers; no tokenizer vocabulary is downloaded at run time).
CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """Estimated tokens of ``text``: ``ceil(len(text) / CHARS_PER_TOKEN)`` (0 for "").

    The one estimate dyna uses wherever context cost is counted (the skill catalog of
    ``dyna skills catalog``), so the numbers agree; a real tokenizer can differ by tens
    of percent on code or non-English text."""
    return -(-len(text) // CHARS_PER_TOKEN)


def content_words(text: str) -> tuple[str, ...]:
    """Distinct words of ``text`` (:func:`identity_text`) that are not stop-words, in
    first-seen order.

    Single characters and stop-words (:data:`STOPWORDS`) are left out.
    """
    seen: dict[str, None] = {}
    if type(text) is str and len(text) <= _TASK_CHARS:
        # the word runs (``\w+``) of the case-folded text are :func:`tokenize`'s tokens
        # that start with a word character (the others are single punctuation
        # characters): read from its cache, where matching the same task text put them
        # (only for texts as short as a task's, so long ones do not crowd it)
        for w in tokenize(text)[0]:
            if len(w) > 1 and w not in STOPWORDS and (w[0].isalnum() or w[0] == "_"):
                seen.setdefault(w, None)
        return tuple(seen)
    for w in _WORD_RE.findall(identity_text(text)):
        if len(w) > 1 and w not in STOPWORDS:
            seen.setdefault(w, None)
    return tuple(seen)


#: Texts up to this long (a task statement, a trigger) take :func:`content_words` from
#: :func:`tokenize`'s cache; longer ones (a skill's description and body) are split alone.
_TASK_CHARS = 256


# Tokens for fact identity: words joined by inner punctuation stay one token, so
# "1.5" != "15" and "test-fast" is one token, while trailing punctuation is dropped.
_FACT_TOKEN_RE = re.compile(r"\w+(?:[.\-/:@+]\w+)*")


@lru_cache(maxsize=1 << 13)   # a store re-keys its facts after every write
def fact_key(text: str) -> str:
    """Normal form of a fact: entries with equal keys are the same fact.

    Case, Unicode compatibility forms (:func:`identity_text`), spacing and punctuation
    (outside numbers, paths and hyphenated names) are ignored; a different number or name
    gives a different key.

    Examples
    --------
    >>> fact_key("Use `make test-fast`.") == fact_key("use make  TEST-FAST")
    True
    >>> fact_key("port 8080") == fact_key("port 8081")
    False
    """
    return " ".join(_FACT_TOKEN_RE.findall(identity_text(text)))


#: A code span: text between backticks.
CODE_RE = re.compile(r"`[^`]+`")
_QUOTED_RE = re.compile(r"\"[^\"\n]+\"|(?:(?<=\s)|^)'[^'\n]+'(?=\s|$|[.,;:!?])")
_NUMBER_RE = re.compile(r"\d+(?:[.,:]\d+)*")
_PATH_RE = re.compile(r"(?:[\w.-]*/[\w./-]+|\b[\w-]+\.[A-Za-z][A-Za-z0-9]{0,4}\b)")
# _PATH_RE's second form alone: what _PATH_RE finds in a text without a "/" (its first
# form needs one), without trying the first form's [\w.-]* run at every position
_FILE_RE = re.compile(r"\b[\w-]+\.[A-Za-z][A-Za-z0-9]{0,4}\b")
_FLAG_RE = re.compile(r"(?:^|(?<=[\s`]))--?[A-Za-z][\w-]*")
_NAME_RE = re.compile(r"\b(?:[A-Z]{2,}\w*|[a-z]+[A-Z]\w*|[A-Za-z][A-Za-z0-9]*_\w+|"
                      r"(?<=[a-z,;] )[A-Z][a-z]+)\b")
#: A command line: a common tool's name and its first argument (``make deploy``).
COMMAND_RE = re.compile(r"\b(?:make|git|pip|uv|npm|npx|yarn|pytest|python|docker|kubectl|"
                        r"cargo|go|curl|ssh|dyna)\s+[\w./:@=-]+")


@lru_cache(maxsize=1 << 13)
def concrete_parts(text: str) -> tuple[str, ...]:
    """The atomic concrete parts of a lesson: numbers, paths and file names, command-line
    flags and names (ALLCAPS, camelCase, snake_case, or a capitalised word inside a
    sentence).

    Two facts with different parts are different facts, however similar their words.

    Parameters
    ----------
    text : str

    Returns
    -------
    tuple of str
        Sorted, distinct parts (:func:`identity_text`); empty for "Be careful with tools.".
        Parts are found in the NFKC form of ``text`` (case kept: ALLCAPS is a name), so a
        decomposed accent does not cut a path in two.
    """
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    parts: set[str] = set()
    # a pattern that needs a character the text lacks is not run: a path needs "/" (a
    # file name "."), a flag "-" (the same parts, found in a third of the time)
    path_rx = _PATH_RE if "/" in text else _FILE_RE if "." in text else None
    for rx in (_NUMBER_RE, path_rx, _FLAG_RE if "-" in text else None, _NAME_RE):
        if rx is not None:
            parts.update(identity_text(m.strip()) for m in rx.findall(text))
    return tuple(sorted(p for p in parts if p))


def is_concrete(text: str) -> bool:
    """True when ``text`` names a concrete command, file, value or name: it has a
    :func:`concrete_parts` part, a code span, a quoted string or a command line such as
    ``make test-fast``."""
    return bool(concrete_parts(text) or CODE_RE.search(text) or _QUOTED_RE.search(text)
                or COMMAND_RE.search(text))


#: Distinct texts whose :func:`text_features` are kept (least recently used dropped first).
#: A library or memory store is re-checked against every proposal, so its entries stay in
#: the cache; at ~1 KiB a text this is a few MiB per process.
FEATURE_CACHE_SIZE = 8192


class TextFeatures(NamedTuple):
    """What the novelty and de-duplication checks read from one text.

    Attributes
    ----------
    key : str
        :func:`fact_key` of the text.
    parts : tuple of str
        :func:`concrete_parts` of the text.
    words : frozenset of str
        The set of :func:`content_words` of the text.
    """

    key: str
    parts: tuple[str, ...]
    words: frozenset


@lru_cache(maxsize=FEATURE_CACHE_SIZE)
def text_features(text: str) -> TextFeatures:
    """:func:`fact_key`, :func:`concrete_parts` and content-word set of ``text``, memoised.

    The cache is keyed by the text itself (strings are immutable), so it cannot go stale:
    an entry whose text changes is looked up under its new text. The values are immutable
    and equal to calling the three functions, so results do not depend on the cache.

    Parameters
    ----------
    text : str

    Returns
    -------
    TextFeatures
    """
    return TextFeatures(fact_key(text), concrete_parts(text), frozenset(content_words(text)))


def jaccard(a: frozenset | set, b: frozenset | set) -> float:
    """Jaccard similarity ``|a & b| / |a | b|`` of two word sets (1.0 for two empty sets),
    as a float; a decision at a threshold takes :func:`jaccard_ratio` instead."""
    if not a and not b:
        return 1.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def jaccard_ratio(a: frozenset | set, b: frozenset | set) -> Fraction:
    """Jaccard similarity ``|a & b| / |a | b|`` of two word sets as the exact ratio of the
    two counts (1 for two empty sets), so that a similarity equal to a threshold is equal
    to it (:func:`dyna.ties.at_least`). ``float(jaccard_ratio(a, b)) == jaccard(a, b)``.

    >>> jaccard_ratio({"a", "b", "c"}, {"a", "b", "c", "d", "e", "f"})
    Fraction(1, 2)
    """
    if not a and not b:
        return Fraction(1)
    inter = len(a & b)
    return Fraction(inter, len(a) + len(b) - inter)


def similarity_matrix(word_sets: list[frozenset]) -> np.ndarray:
    """Pairwise Jaccard similarity of many word sets, via one sparse product.

    Parameters
    ----------
    word_sets : list of frozenset of str, length n

    Returns
    -------
    ndarray of float64, shape (n, n)
        ``S[i, j] = |w_i & w_j| / |w_i | w_j|``; 1.0 where both sets are empty.
    """
    from scipy import sparse

    n = len(word_sets)
    if n == 0:
        return np.zeros((0, 0))
    vocab: dict[str, int] = {}
    rows, cols = [], []
    for i, ws in enumerate(word_sets):
        for w in ws:
            rows.append(i)
            cols.append(vocab.setdefault(w, len(vocab)))
    x = sparse.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, max(len(vocab), 1)))
    inter = (x @ x.T).toarray()
    sizes = np.asarray(x.sum(axis=1)).ravel()
    union = sizes[:, None] + sizes[None, :] - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        sim = np.where(union > 0, inter / np.where(union > 0, union, 1.0), 1.0)
    return sim


# ============================================================================ diffs

_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def text_diff(before: str, after: str, context: int = 2) -> list[str]:
    """A unified diff (:func:`difflib.unified_diff`) of two texts as a list of diff lines,
    each keeping the exact line ending of its line (``"-old\\r\\n"``; the last line may have
    none), so :func:`apply_diff` rebuilds either text byte for byte. ``[]`` when equal."""
    import difflib

    if before == after:
        return []
    a = before.splitlines(keepends=True)
    b = after.splitlines(keepends=True)
    # the ---/+++ and @@ headers carry no line ending; content lines keep their own
    return list(difflib.unified_diff(a, b, "before", "after", n=context, lineterm=""))


def apply_diff(text: str, diff: list[str], reverse: bool = False) -> str:
    """Apply a :func:`text_diff` to ``text`` (``reverse``: undo it, turning the *after*
    text back into the *before* text).

    Raises
    ------
    ValueError
        A hunk's context or removed lines do not match ``text`` exactly (the text changed
        since the diff was made), or the diff is malformed.
    """
    if not diff:
        return text
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    pos = 0
    i = 0
    old_sign, new_sign = ("+", "-") if reverse else ("-", "+")
    if diff[:1] and diff[0].startswith("---"):
        i = 2                                   # the ---/+++ file headers
    while i < len(diff):
        ln = diff[i]
        m = _HUNK_RE.match(ln)
        if not m:
            raise ValueError(f"diff line {i + 1}: expected a hunk header, got {ln[:40]!r}")
        s_old, n_old = int(m.group(1)), int(m.group(2) or 1)
        s_new, n_new = int(m.group(3)), int(m.group(4) or 1)
        if reverse:
            s_old, n_old, s_new, n_new = s_new, n_new, s_old, n_old
        start = s_old - 1 if n_old else s_old
        if start < pos or start > len(lines):
            raise ValueError(f"diff hunk {ln!r} out of place")
        out.extend(lines[pos:start])
        pos = start
        i += 1
        while i < len(diff) and not _HUNK_RE.match(diff[i]):
            d = diff[i]
            sign, body = d[:1], d[1:]
            if sign == " " or sign == old_sign:
                if pos >= len(lines) or lines[pos] != body:
                    raise ValueError(f"diff does not apply at line {pos + 1}")
                pos += 1
                if sign == " ":
                    out.append(body)
            elif sign == new_sign:
                out.append(body)
            else:
                raise ValueError(f"diff line {i + 1}: bad line {d[:40]!r}")
            i += 1
    out.extend(lines[pos:])
    return "".join(out)
