"""The digest of a finished run: what a reviewer sees of it, redacted.

Sensitive keys and secret-looking values become ``"[REDACTED]"`` (the marker of
:mod:`dyna.redact`, the same in the store, its exports and digests), tool outputs are cut to
:data:`OUTPUT_CHARS` characters (after redaction, so a secret is never half kept), and the
run's untrusted inputs are kept as the *taint* of every proposal drawn from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from dyna.errors import ConfigError, check_range
from dyna.loops.provenance import TRUSTED, Source, parse_source, untrusted_sources
from dyna.redact import DEFAULT_SENSITIVE_KEYS, REDACTED, redact, redact_text

__all__ = ["OUTPUT_CHARS", "REDACTED_MARK", "Digest", "ToolCall", "has_secret"]

#: The redaction marker of digests: :data:`dyna.redact.REDACTED`, one marker everywhere.
REDACTED_MARK = REDACTED
OUTPUT_CHARS = 200

_TOOL_OUTPUT, _TOOL_ARGUMENT = Source.TOOL_OUTPUT.value, Source.TOOL_ARGUMENT.value
_TASK = Source.TASK.value


def _holds_marker(obj) -> bool:
    """True when a string in ``obj`` already holds the marker: such a value counts as a
    redaction of the digest (:attr:`Digest.redactions`), as one redacted here does."""
    if isinstance(obj, str):
        return REDACTED in obj
    if isinstance(obj, Mapping):
        return any(_holds_marker(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_holds_marker(v) for v in obj)
    return False


def has_secret(text: str) -> bool:
    """True when ``text`` contains a secret-looking value (:func:`dyna.redact.redact_text`);
    an already redacted value (``"[REDACTED]"``) is not one."""
    # A one-character stand-in keeps "token=[REDACTED]" from reading as an assignment.
    text = text.replace(REDACTED, "\x00")
    return redact_text(text) != text


@dataclass(frozen=True)
class ToolCall:
    """One tool call of a run as the reviewer sees it.

    Attributes
    ----------
    name : str
        Tool name.
    args : Mapping
        Arguments, redacted.
    error : bool
        The call failed.
    output : str
        Output, redacted, then cut to 200 characters.
    skills : tuple of str
        The injected entries this call followed: skills by name, memory facts by text
        (empty: the call came from the agent itself). A call that followed an entry and
        returned an error *contradicts* it (see :meth:`Digest.contradicted`).
    trusted : bool
        The tool declared its output trusted (an internal service that reads no external
        content). False by default: a file reader, a web fetch, an e-mail or retrieval
        tool, or any tool that did not say, can carry planted instructions, and so can
        the arguments a run gave it.
    """

    name: str
    args: Mapping = field(default_factory=dict)
    error: bool = False
    output: str = ""
    skills: tuple[str, ...] = ()
    trusted: bool = False



@dataclass(frozen=True)
class Digest:
    """A finished run, as handed to a reviewer. Build it with :meth:`from_run`.

    Attributes
    ----------
    run_id : str
    task : str
        Task statement (redacted).
    success : bool or None
        The run's outcome (None: unknown).
    verified : bool
        ``success`` comes from a trusted verifier (tests, an environment's reward), not
        from the agent.
    self_assessment : bool or None
        The agent's own verdict.
    steps : int
        Environment / agent steps.
    tokens : int
        The run's own token usage (its cost; learning cost is counted apart).
    tool_calls : tuple of ToolCall
    sources : tuple of str
        Inputs the run saw besides tool calls (``"web"``, ``"user_files"``, ``"email"``,
        ``"retrieved"``; parsed by :func:`dyna.loops.provenance.parse_source`, so an
        unknown name counts as untrusted).
    actions : tuple of str
        The action names the run took, in order (material for workflows).
    review_depth : int
        0 for a run; > 0 for anything produced by a review (never reviewed again).
    redactions : int
        How many of the digest's texts (the task, each tool call's arguments and output)
        redaction changed (0 when built with ``redaction=False``).
    task_source : str or None
        Who wrote the task text, parsed by :func:`dyna.loops.provenance.parse_source`:
        ``"user"`` or ``"operator"`` (a person at the controls), ``"simulation"`` (an
        experiment's own task text) and the other trusted sources keep the run's lessons
        trusted; None (not declared), ``"untrusted"`` or any other name taints them
        (:meth:`taint`), since whoever can send a task (a queue, a schedule, e-mail)
        writes its text.
    """

    run_id: str
    task: str
    success: bool | None = None
    verified: bool = False
    self_assessment: bool | None = None
    steps: int = 0
    tokens: int = 0
    tool_calls: tuple[ToolCall, ...] = ()
    sources: tuple[str, ...] = ()
    actions: tuple[str, ...] = ()
    review_depth: int = 0
    redactions: int = 0
    task_source: str | None = None

    @classmethod
    def from_run(cls, run_id: str, task: str, *, success=None, verified: bool = False,
                 self_assessment=None, steps: int = 0, tokens=0, tool_calls=(), sources=(),
                 actions=(), redaction: bool = True,
                 sensitive_keys=DEFAULT_SENSITIVE_KEYS,
                 output_chars: int = OUTPUT_CHARS, task_source: str | None = None
                 ) -> "Digest":
        """Build a digest, redacting as it goes.

        Parameters
        ----------
        run_id, task : str
        success, verified, self_assessment, steps, sources, actions :
            As the attributes.
        tokens : int or Mapping
            Token usage; a mapping (e.g. ``{"input": 900, "output": 120}``) is summed.
        tool_calls : iterable of Mapping or ToolCall
            Mappings with ``name``, ``args``, ``output`` and ``error`` (or ``is_error``),
            and optionally ``skills``: the name (str) or names of the injected skills the
            call followed, and ``trusted``: the tool declared its output trusted (default
            False: the call taints the run's proposals, :meth:`taint`).
        redaction : bool
            Redact (default). Values under ``sensitive_keys`` (whole key names, see
            :func:`dyna.redact.redact`) and secret-looking substrings anywhere become
            ``"[REDACTED]"``. Redaction happens *before* outputs are cut, so a secret is
            never half kept.
        sensitive_keys : iterable of str
        output_chars : int
            Tool outputs are cut to this many characters (200).
        task_source : str or None
            Who wrote the task text (:attr:`task_source`); None, the default, is untrusted.

        Raises
        ------
        ConfigError
            Bad ``run_id``, ``steps``, ``tokens``, tool call or ``task_source`` (not a
            string or None).
        """
        if not isinstance(run_id, str) or not run_id:
            raise ConfigError("run_id", run_id, "must be a non-empty string")
        steps = check_range("steps", steps, 0, None, integer=True)
        if isinstance(tokens, Mapping):
            tokens = sum(check_range(f"tokens.{k}", v, 0, None, integer=True)
                         for k, v in tokens.items())
        tokens = check_range("tokens", tokens, 0, None, integer=True)
        if task_source is not None and not isinstance(task_source, str):
            raise ConfigError("task_source", task_source, "must be a source name or None")

        changed = [0]

        def clean(obj):
            if not redaction:
                return obj
            out = redact(obj, sensitive_keys)
            if (out is not obj and out != obj) or _holds_marker(obj):
                changed[0] += 1
            return out

        calls = []
        for i, tc in enumerate(tool_calls):
            name, args, error, output, followed, trusted = _tool_call_fields(i, tc)
            calls.append(ToolCall(name, clean(args), error, clean(output)[:output_chars],
                                  followed, trusted))
        task = clean(task)
        return cls(run_id, task, None if success is None else bool(success),
                   bool(verified), None if self_assessment is None else bool(self_assessment),
                   steps, tokens, tuple(calls), tuple(sources), tuple(actions),
                   redactions=changed[0], task_source=task_source)

    def taint(self) -> tuple[str, ...]:
        """The untrusted sources this run carried, which taint every proposal drawn from it:
        ``tool_output`` when a tool not declared trusted (:attr:`ToolCall.trusted`)
        answered, ``tool_argument`` when such a call had arguments, ``task`` when the task
        text's sender is not declared trusted (:attr:`task_source`), and each untrusted
        declared source (:attr:`sources`, parsed by
        :func:`dyna.loops.provenance.parse_source`: unknown names are untrusted)."""
        output = argument = False
        for tc in self.tool_calls:
            if not tc.trusted:
                output = True
                if tc.args:
                    argument = True
                    break   # (both found: the rest adds nothing)
        out = ([_TOOL_OUTPUT] if output else []) + ([_TOOL_ARGUMENT] if argument else [])
        if self.task_source is None or parse_source(self.task_source) not in TRUSTED:
            out.append(_TASK)
        if self.sources:
            out += [s.value for s in untrusted_sources(self.sources)]
        return tuple(dict.fromkeys(out))

    def contradicted(self) -> frozenset[str]:
        """Skills this run contradicted: those named by a tool call that followed them
        and returned an error (the skill's step does not work any more, e.g. after a drift),
        whatever the run's outcome."""
        return frozenset(n for tc in self.tool_calls if tc.error for n in tc.skills)

    def skill_outcomes(self, names) -> dict[str, bool | None]:
        """The outcome to report for each injected skill in ``names``.

        A contradicted skill (:meth:`contradicted`) gets a failure (False), even in a run
        that succeeded after the agent recovered from the error; any other skill gets the
        run's outcome: ``success``, or the self-assessment when ``success`` is None (None
        when both are unknown: nothing is reported). Without skill attributions on the
        tool calls every skill gets the run's outcome. A name given more than once is one
        key of the answer (first place kept).
        """
        outcome = self.success if self.success is not None else self.self_assessment
        bad = self.contradicted()
        return {n: (False if n in bad else outcome) for n in dict.fromkeys(names)}


def _tool_call_fields(i: int, tc) -> tuple[str, dict, bool, str, tuple[str, ...], bool]:
    """The fields of tool call number ``i`` of a run, checked and converted: ``(name,
    args, error, output, skills followed, trusted)``, not yet redacted.

    Raises
    ------
    ConfigError
        ``tc`` is not a :class:`ToolCall` or a mapping with a ``name``; its ``skills`` are
        not a skill name or a list of them; its ``trusted`` is not a bool.
    """
    if type(tc) is not dict:   # (a plain dict, the common case, is a Mapping)
        if isinstance(tc, ToolCall):
            tc = {"name": tc.name, "args": dict(tc.args), "output": tc.output,
                  "error": tc.error, "skills": tc.skills, "trusted": tc.trusted}
        elif not isinstance(tc, Mapping):
            raise ConfigError(f"tool_calls[{i}]", tc, "must be a mapping with a 'name'")
    if "name" not in tc:
        raise ConfigError(f"tool_calls[{i}]", tc, "must be a mapping with a 'name'")
    followed = tc.get("skills") or ()
    if isinstance(followed, str):
        followed = (followed,)
    if followed and (not isinstance(followed, (list, tuple)) or not all(
            isinstance(n, str) and n for n in followed)):
        raise ConfigError(f"tool_calls[{i}].skills", followed,
                          "must be a skill name or a list of skill names")
    trusted = tc.get("trusted", False)
    if not isinstance(trusted, (bool, np.bool_)):
        raise ConfigError(f"tool_calls[{i}].trusted", trusted, "must be true or false")
    return (str(tc["name"]), dict(tc.get("args") or {}),
            bool(tc.get("error", tc.get("is_error", False))), str(tc.get("output", "") or ""),
            tuple(dict.fromkeys(followed)) if followed else (), bool(trusted))
