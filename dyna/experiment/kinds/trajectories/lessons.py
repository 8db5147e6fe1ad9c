"""Kind ``trajectories``: rules that judge a reviewer's lesson, fixed before any real run.

A lesson is the text a proposal carries (a memory fact's text; a skill's description and
body). Each rule reads only the lesson, the text the reviewer was shown (its prompt, the
tool's schema and the digest: "the digest" below) and the run's tool calls, so the same
lesson gets the same verdict in every run and replay.

- :func:`junk_reason`: why a lesson is junk, the first that applies of ``empty`` (no
  letter or digit), ``placeholder`` (only placeholder words: ``value1``, ``text``,
  ``string``, ``example``, ``todo``, ``lorem ipsum``, ...), ``copied`` (at least
  :data:`COPIED_SHARE` of the lesson's characters are one span copied verbatim from the
  digest: :func:`copied_share`), ``not_concrete`` (it names no tool the run called, no
  argument name of those calls, and holds no digit: no id, date, number or amount); ""
  when it is none of these.
- :func:`quotes_digest`: the lesson copies the digest verbatim (the whole of it, or a
  span of at least :data:`QUOTE_CHARS` characters): the measured counterpart of the
  rule-based reviewer's ``copy_rate`` (which quotes the last tool output).
- :func:`misattributes`: a lesson from a failed run (reward 0) that names a tool the run
  called as something to do, with no word of failure or avoidance
  (:data:`FAILURE_WORDS`): it credits the failed run's calls, the measured counterpart of
  the simulated reviewer's ``misattribution`` (which writes the failed call into the
  procedure as if it finished the job).

Texts are compared after :func:`normalize` (case folded, every run of whitespace one
space).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from difflib import SequenceMatcher

__all__ = ["COPIED_SHARE", "FAILURE_WORDS", "JUNK_REASONS", "PLACEHOLDER_WORDS", "QUOTE_CHARS",
           "copied_share", "junk_reason", "lesson_text", "misattributes", "normalize",
           "quotes_digest"]

#: The verdicts of :func:`junk_reason`, in the order they are tried.
JUNK_REASONS = ("empty", "placeholder", "copied", "not_concrete")
#: Words that alone make a lesson a placeholder (``value1`` counts as ``value``).
PLACEHOLDER_WORDS = frozenset({
    "value", "values", "text", "string", "example", "sample", "foo", "bar", "baz", "todo",
    "tbd", "lorem", "ipsum", "placeholder", "null", "none", "n", "a", "na", "fact", "lesson",
    "skill", "name", "description", "body", "action", "add", "create", "update", "xxx",
    "test", "dummy", "something", "here", "the", "your", "my", "insert"})
#: Shortest verbatim span, in characters, that counts as quoting the digest.
QUOTE_CHARS = 40
#: Share of a lesson's characters in one verbatim span of the digest that makes it junk.
COPIED_SHARE = 0.5
#: Words that make a lesson about a failure rather than a recipe (whole words).
FAILURE_WORDS = frozenset({
    "fail", "failed", "fails", "failure", "error", "errors", "wrong", "not", "never",
    "don't", "dont", "do not", "avoid", "instead", "mistake", "incorrect", "cannot",
    "can't", "without"})

_WORD = re.compile(r"[a-z]+")


def normalize(text: str) -> str:
    """``text`` case folded, every run of whitespace one space, stripped."""
    return " ".join(str(text).casefold().split())


def lesson_text(proposal) -> str:
    """The lesson a :class:`dyna.loops.review.Proposal` carries: a memory fact's text, a
    skill's description and body (joined by a newline)."""
    if proposal.kind == "memory":
        return proposal.text
    return "\n".join(t for t in (proposal.description, proposal.body) if t)


def _longest_span(t: str, d: str) -> int:
    """Length of the longest span of ``t`` found verbatim in ``d``."""
    if not t or not d:
        return 0
    if t in d:
        return len(t)
    return SequenceMatcher(None, t, d, autojunk=False).find_longest_match(
        0, len(t), 0, len(d)).size


def copied_share(text: str, digest_text: str) -> float:
    """The share (in [0, 1]) of the lesson's characters (normalized) in its longest span
    copied verbatim from ``digest_text``; 0.0 for an empty lesson."""
    t = normalize(text)
    return _longest_span(t, normalize(digest_text)) / len(t) if t else 0.0


def quotes_digest(text: str, digest_text: str, min_chars: int = QUOTE_CHARS) -> bool:
    """Whether the (non-empty) lesson is, whole, in ``digest_text``, or shares a verbatim
    span of at least ``min_chars`` characters with it (both normalized)."""
    t, d = normalize(text), normalize(digest_text)
    span = _longest_span(t, d)
    return bool(t) and (span == len(t) or span >= min_chars)


def _names(text: str, names: Iterable[str]) -> bool:
    """Whether ``text`` (normalized) holds one of ``names`` as a whole word."""
    return any(re.search(rf"(?<![a-z0-9_]){re.escape(n.casefold())}(?![a-z0-9_])", text)
               for n in names if n)


def junk_reason(text: str, digest_text: str, tools: Iterable[str] = (),
                arg_names: Iterable[str] = ()) -> str:
    """Why a lesson is junk ("" when it is not): see the module docstring.

    Parameters
    ----------
    text : str
        The lesson (:func:`lesson_text`).
    digest_text : str
        What the reviewer was shown.
    tools, arg_names : iterable of str
        The tool names the run called and the argument names of those calls.
    """
    t = normalize(text)
    if not re.search(r"[a-z0-9]", t):
        return "empty"
    words = re.findall(r"[a-z]+|\d+", t)
    if all(w in PLACEHOLDER_WORDS or w.isdigit() for w in words) and any(
            w in PLACEHOLDER_WORDS for w in words):
        return "placeholder"
    if copied_share(t, digest_text) >= COPIED_SHARE:
        return "copied"
    if not (re.search(r"\d", t) or _names(t, tools) or _names(t, arg_names)):
        return "not_concrete"
    return ""


def misattributes(text: str, success: bool, tools: Iterable[str]) -> bool:
    """Whether a lesson from a run with outcome ``success`` misattributes its failure: the
    run failed, the lesson names a tool the run called, and it has no word of
    :data:`FAILURE_WORDS`."""
    if success:
        return False
    t = normalize(text)
    if not _names(t, tools):
        return False
    return not any(re.search(rf"(?<![a-z']){re.escape(w)}(?![a-z'])", t)
                   for w in FAILURE_WORDS)
