"""Real agent runs as the loops' records: the tau-bench trajectories importer.

A *trajectories file* is a JSON list of runs in tau-bench's shape (Yao, Shinn, Razavi &
Narasimhan, "tau-bench: A Benchmark for Tool-Agent-User Interaction in Real-World Domains",
arXiv 2406.12045; ``historical_trajectories/*.json`` of ``sierra-research/tau-bench``): per
run ``task_id``, ``trial``, ``reward``, ``info.task`` (``user_id``, ``instruction``, the
ground-truth ``actions``) and ``traj``, the conversation in chat-completions form (assistant
``tool_calls`` with ``function.arguments`` as JSON text, ``tool`` messages with each call's
output). ``data/agent_trajectories/`` holds the 200 GPT-4o airline runs.

* :func:`load_trajectories` parses and checks a file into :class:`TrajectoryRun` objects;
  hostile input (not JSON, a run without ``traj``, tool-call arguments that are not a JSON
  object, ...) raises :class:`TrajectoryError` naming the run and the field.
* :func:`task_type` is the first state-changing tool the ground truth calls
  (:data:`STATE_CHANGING`), or ``"no_change"``.
* :meth:`TrajectoryRun.digest` builds the :class:`~dyna.loops.review.Digest` a reviewer
  sees (redacted or not); :meth:`TrajectoryRun.episode` the experience-store episode;
  :func:`import_runs` records them all in an :class:`~dyna.experience.ExperienceStore`.
* :func:`harvest_personal_values` collects a run's personal data *by field* from its
  structured tool outputs (not by the redactor, so that counting what the redactor missed
  is not circular); :func:`find_personal_values` finds them in a text.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dyna.errors import ConfigError, DynaError, MissingFileError
from dyna._json import loads_unique
from dyna.redact import DEFAULT_SENSITIVE_KEYS

__all__ = ["DIGEST_SENSITIVE_KEYS", "NOT_ACTIONS", "NO_CHANGE", "PERSONAL_FIELDS", "PREDICTORS",
           "STATE_CHANGING", "TrajectoryError", "TrajectoryRun", "abstract_call",
           "find_personal_values", "harvest_by_field", "harvest_personal_values",
           "import_runs", "induce_workflow", "leave_one_task_out", "load_trajectories",
           "parse_run", "run_workflow", "sequence_scores", "task_type", "truth_workflow"]

#: Tools of the tau-bench airline domain that change the database (prefix match for
#: ``update_reservation_*``).
STATE_CHANGING = ("book_reservation", "cancel_reservation", "update_reservation_",
                  "send_certificate")
#: Task type of a task whose ground truth changes nothing.
NO_CHANGE = "no_change"
#: Keys whose values a tau-bench digest redacts: the redactor's defaults
#: (:data:`dyna.redact.DEFAULT_SENSITIVE_KEYS`) plus the airline tools' payment fields,
#: whose values are payment-method ids (``payment_id``; ``payment_methods``, the list of
#: ``{payment_id, amount}`` a booking pays with and the user's saved methods keyed by id).
DIGEST_SENSITIVE_KEYS = frozenset(DEFAULT_SENSITIVE_KEYS | {"payment_id", "payment_methods"})
#: Categories of :func:`harvest_by_field`.
PERSONAL_FIELDS = ("email", "address", "dob", "payment_id", "user_id")
#: Postal-address fields harvested (``city``, ``province`` and ``country`` are left out:
#: "Austin", "TX" or "USA" also occur as ordinary travel words, so a hit would not mean
#: that a person's address leaked).
ADDRESS_PARTS = ("address1", "address2", "zip")
#: Bound of ``task_id`` and ``trial`` (they become int64 columns and store labels).
MAX_ID = 2**31


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON value")


#: Longest text (characters) accepted anywhere in a run: 25 times the longest of the 200
#: airline runs (8,117). A 100 MB argument took 450 s and 10 GB to replay.
MAX_TEXT = 200_000
#: Deepest nesting of arrays and objects accepted in a run's JSON texts (the airline
#: tools' outputs nest 4 levels; the redactor and the store read recursively).
MAX_DEPTH = 32


def _loads(text: str):
    """Strict JSON of untrusted text: NaN and Infinity refused (ValueError), an object
    naming a key twice refused (:class:`dyna._json.DuplicateKeyError`, a ValueError:
    which value counts differs between readers), nesting past :data:`MAX_DEPTH` (or the
    parser's own limit) a ValueError "nested too deeply"."""
    from dyna.loops.llm.client import json_depth
    try:
        value = loads_unique(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if json_depth(value) > MAX_DEPTH:
        raise ValueError("nested too deeply")
    return value


class TrajectoryError(ConfigError):
    """A trajectories file or one of its runs is malformed.

    The message names the file, the run (its index, and its task and trial when they
    could be read) and the field, e.g. ``runs.json: run 3 (task 3, trial 0): traj:
    missing``.

    Attributes
    ----------
    path : str
        The file.
    run : str
        ``"run <i> (task <t>, trial <k>)"``, or ``""`` for an error of the whole file.
    field : str
        The dotted field inside the run (``traj[7].tool_calls[0].function.arguments``).
    value : object
        The offending value (shortened to 80 characters when it is text).
    reason : str
    """

    def __init__(self, path: object, run: str, field: str, value: object, reason: str):
        self.path = str(path)
        self.run = run
        self.field = field
        self.value = value
        self.reason = reason
        where = f"{self.path}: {run}: " if run else f"{self.path}: "
        DynaError.__init__(self, f"{where}{field}: {reason}")

    def __reduce__(self):
        return (type(self), (self.path, self.run, self.field, self.value, self.reason))


# ============================================================================ the runs

@dataclass(frozen=True)
class TrajectoryRun:
    """One agent run of a trajectories file.

    Attributes
    ----------
    index : int
        Position in the file (0-based).
    task_id, trial : int
    reward : float
        The environment's reward; ``success`` is ``reward == 1.0`` (tau-bench gives 1.0 when
        the final database and outputs match the ground truth).
    user_id : str
        ``info.task.user_id``.
    instruction : str
        The simulated user's goal (never shown to the agent).
    first_message : str
        The first user message: the task as the agent saw it (the digest's task).
    ground_truth : tuple of (str, dict)
        ``info.task.actions``: the tool calls that solve the task, name and arguments.
    tool_calls : tuple of dict
        The run's tool calls in order: ``name``, ``args`` (dict), ``output`` (str, ``""``
        when no tool message answered) and ``error`` (the output starts with ``Error``).
    tokens : int
        Token usage when the run records it (``info.usage``/``usage`` with
        ``prompt_tokens`` and ``completion_tokens``), else 0: tau-bench logs carry none.
    tool_outputs : tuple of str
        Every tool message's content, in order (what :func:`harvest_by_field` reads).
    messages : tuple of str
        The user's and the assistant's message texts, in order (read by the digest's
        redaction only, to learn which ids the conversation names).
    """

    index: int
    task_id: int
    trial: int
    reward: float
    user_id: str
    instruction: str
    first_message: str
    ground_truth: tuple
    tool_calls: tuple
    tokens: int = 0
    tool_outputs: tuple = field(default=(), repr=False)
    messages: tuple = field(default=(), repr=False)

    @property
    def run_id(self) -> str:
        """``task<task_id>-trial<trial>`` (unique in a file of distinct task/trial pairs)."""
        return f"task{self.task_id}-trial{self.trial}"

    @property
    def success(self) -> bool:
        return self.reward == 1.0

    @property
    def task_type(self) -> str:
        """:func:`task_type` of the ground truth."""
        return task_type(name for name, _ in self.ground_truth)

    @property
    def actions(self) -> tuple[str, ...]:
        """The tool names the run called, in order."""
        return tuple(c["name"] for c in self.tool_calls)

    def digest(self, *, redaction: bool = True, trusted: bool = True,
               sensitive_keys: Iterable[str] | None = None):
        """The :class:`~dyna.loops.review.Digest` of this run.

        Parameters
        ----------
        redaction : bool
            Redact the task, every argument and every output (the loop's ``redaction``
            switch); outputs are cut to 200 characters after redaction. First the whole
            run, its messages included, is redacted as one object (:func:`_redact_run`),
            so an id the redactor finds anywhere (a ``user_id`` field, "my user id is
            ...") is redacted in every text of the run, and an id-like value of a
            sensitive field (a ``payment_id``) wherever else it occurs (an error message
            naming the payment method); then each text is redacted again as the digest
            is built.
        trusted : bool
            The tools declare their output trusted: the airline tools read the airline's
            own database, no external content (True); False taints every lesson drawn
            from the run (:meth:`Digest.taint`).
        sensitive_keys : iterable of str, optional
            Key names whose values are redacted (default
            :data:`DIGEST_SENSITIVE_KEYS`: the redactor's defaults plus the payment fields
            of the airline tools).

        Returns
        -------
        Digest
            ``success`` from the reward, ``verified`` True (the environment's reward),
            ``steps`` = tool calls, ``tokens`` as :attr:`tokens`, ``redactions`` the texts
            redaction changed.
        """
        from dyna.loops.review import Digest
        keys = DIGEST_SENSITIVE_KEYS if sensitive_keys is None else frozenset(sensitive_keys)
        task = self.first_message
        calls = [{"name": c["name"], "args": c["args"], "output": c["output"],
                  "error": c["error"], "trusted": trusted} for c in self.tool_calls]
        if redaction:
            task, texts = _redact_run(task, [(c["args"], c["output"]) for c in calls],
                                      self.messages, keys)
            for c, (args, output) in zip(calls, texts):
                c["args"], c["output"] = args, output
        return Digest.from_run(self.run_id, task, success=self.success, verified=True,
                               steps=len(calls), tokens=self.tokens, tool_calls=calls,
                               actions=self.actions, redaction=redaction,
                               sensitive_keys=keys)

    def episode(self, *, redaction: bool = True,
                sensitive_keys: Iterable[str] | None = None) -> dict:
        """The experience-store episode of this run (fields of
        :meth:`dyna.experience.ExperienceStore.record`).

        ``task_type`` from the ground truth (:attr:`task_type`), ``action_type`` the first
        state-changing tool the run itself called (or ``no_change``), ``outcome`` and
        ``reward`` from the reward (``outcome_source`` ``verifier``), the run's tool calls
        (names and arguments) as ``action_taken``, the first user message as
        ``state_before``, the count of failed calls as ``state_after`` and the task id and
        trial as ``metadata``.

        Parameters
        ----------
        redaction : bool
            Redact the task and the arguments as the digest does (:meth:`digest`: the
            whole run at once, with ``sensitive_keys``) before the store's own redaction
            (which since f381de9 also redacts payment-method ids; the digest's pass still
            erases id-like values found under sensitive keys wherever else they occur).
        sensitive_keys : iterable of str, optional
            Default :data:`DIGEST_SENSITIVE_KEYS`.

        Returns
        -------
        dict
        """
        task = self.first_message
        args = [c["args"] for c in self.tool_calls]
        if redaction:
            keys = DIGEST_SENSITIVE_KEYS if sensitive_keys is None else \
                frozenset(sensitive_keys)
            task, texts = _redact_run(task, [(a, c["output"]) for a, c in
                                             zip(args, self.tool_calls)],
                                      self.messages, keys)
            args = [a for a, _ in texts]
        return {"task_type": self.task_type, "action_type": task_type(self.actions),
                "outcome": "success" if self.success else "failure",
                "reward": float(self.reward), "run_id": self.run_id,
                "outcome_source": "verifier",
                "state_before": {"task": task},
                "action_taken": {"tool_calls": [{"tool": c["name"], "args": a}
                                                for c, a in zip(self.tool_calls, args)]},
                "state_after": {"errors": sum(c["error"] for c in self.tool_calls)},
                "metadata": {"task_id": self.task_id, "trial": self.trial}}


_ID_LIKE = re.compile(r"^(?=[^\s]*\d)(?=[^\s]*[A-Za-z])[^\s\"']{6,}$")


def _field_values(obj, keys: frozenset, out: set, inside: bool = False) -> None:
    """Collect into ``out`` the id-like strings (6 or more characters without spaces, with a
    letter and a digit: ``gift_card_5094406``, ``mia.li3818@example.com``; not an amount
    such as ``1023.0``) inside the values of sensitive keys
    (:func:`dyna.redact.is_sensitive_key`), dict keys included; JSON embedded in strings
    is parsed."""
    from dyna.redact import is_sensitive_key
    if isinstance(obj, str):
        parsed = _json_objects(obj)
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


def _redact_run(task: str, calls: list, messages: Sequence[str], keys: frozenset):
    """Redact a run's texts together: ``(task, [(args, output), ...])`` redacted.

    The task, every call's arguments and output and the conversation's ``messages`` form
    one object for :func:`dyna.redact.redact` (a user id it learns anywhere is redacted
    everywhere); then every id-like value found under a sensitive key of the original run
    (:func:`_field_values`) is replaced by the redaction marker wherever else it occurs as a
    whole token. The messages only teach: they are not returned.
    """
    from dyna.redact import REDACTED, redact
    whole = {"task": task, "calls": [{"args": a, "output": o} for a, o in calls],
             "messages": list(messages)}
    ids: set[str] = set()
    _field_values(whole, keys, ids)
    out = redact(whole, keys)
    pat = _pattern(frozenset(ids))
    if pat is not None:
        def forget(obj):
            if isinstance(obj, str):
                return pat.sub(REDACTED, obj)
            if isinstance(obj, Mapping):
                return {(pat.sub(REDACTED, k) if isinstance(k, str) else k): forget(v)
                        for k, v in obj.items()}
            if isinstance(obj, list):
                return [forget(v) for v in obj]
            return obj
        out = forget(out)
    return out["task"], [(c["args"], c["output"]) for c in out["calls"]]


def task_type(tool_names: Iterable[str]) -> str:
    """The first state-changing tool in ``tool_names`` (:data:`STATE_CHANGING`:
    ``book_reservation``, ``cancel_reservation``, ``update_reservation_*``,
    ``send_certificate``), or :data:`NO_CHANGE` when there is none.

    >>> task_type(["get_user_details", "update_reservation_flights", "cancel_reservation"])
    'update_reservation_flights'
    """
    for name in tool_names:
        if any(name == s or (s.endswith("_") and name.startswith(s)) for s in STATE_CHANGING):
            return name
    return NO_CHANGE


def _long_text(obj) -> str | None:
    """The dotted field of a string (or key) longer than :data:`MAX_TEXT` in ``obj``, or
    None (iterative)."""
    stack = [(obj, "")]
    while stack:
        o, path = stack.pop()
        if isinstance(o, str):
            if len(o) > MAX_TEXT:
                return path or "run"
        elif isinstance(o, Mapping):
            for k, v in o.items():
                if isinstance(k, str) and len(k) > MAX_TEXT:
                    return f"{path}.(a key)" if path else "(a key)"
                stack.append((v, f"{path}.{k}" if path else str(k)))
        elif isinstance(o, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(o))
    return None


def _short(value) -> object:
    if isinstance(value, str) and len(value) > 80:
        return value[:77] + "..."
    return value


def _label(i: int, raw) -> str:
    if isinstance(raw, Mapping):
        t, k = raw.get("task_id"), raw.get("trial")
        if isinstance(t, int) and isinstance(k, int) and not isinstance(t, bool):
            return f"run {i} (task {t}, trial {k})"
    return f"run {i}"


def _usage(raw: Mapping) -> int:
    """Token counts where the run has them (``usage`` at top level or under ``info``)."""
    for usage in (raw.get("usage"), (raw.get("info") or {}).get("usage")):
        if isinstance(usage, Mapping):
            n = 0
            for k in ("prompt_tokens", "completion_tokens"):
                v = usage.get(k)
                if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                    n += v
            return n
    return 0


def parse_run(raw, index: int = 0, path: object = "<runs>") -> TrajectoryRun:
    """Check one run of a trajectories file and turn it into a :class:`TrajectoryRun`.

    Parameters
    ----------
    raw : object
        The run as parsed from JSON.
    index : int
        Its position in the file (named in errors).
    path : str or Path
        The file (named in errors).

    Raises
    ------
    TrajectoryError
        Naming the run and the field: not an object; ``task_id`` or ``trial`` not a
        non-negative integer below 2**31; ``reward`` not a finite number; ``traj``
        missing or not a list; a text longer than :data:`MAX_TEXT` characters or data
        nested more than :data:`MAX_DEPTH` levels anywhere in the run; a message that is
        not an object or has no ``role``; a
        tool call without a ``function.name``; ``function.arguments`` that is not strict
        JSON text of an object (NaN, Infinity and nesting past :data:`MAX_DEPTH`
        refused); a tool message whose ``tool_call_id`` is not a string or whose JSON
        content is nested past :data:`MAX_DEPTH`;
        ``info.task.actions`` not a list of ``{name, kwargs}``.
    """
    label = _label(index, raw)

    def fail(fname, value, reason):
        raise TrajectoryError(path, label, fname, _short(value), reason)

    if not isinstance(raw, Mapping):
        fail("run", type(raw).__name__, "must be a JSON object")
    from dyna.loops.llm.client import json_depth
    if json_depth(raw) > MAX_DEPTH:
        fail("run", "(nested data)", f"nested more than {MAX_DEPTH} levels")
    where_long = _long_text(raw)
    if where_long is not None:
        fail(where_long, "(text)", f"longer than {MAX_TEXT} characters")
    for key in ("task_id", "trial"):
        v = raw.get(key)
        if v is None:
            fail(key, None, "missing")
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < MAX_ID:
            fail(key, v if isinstance(v, (bool, int)) and abs(v) < 10**20 else
                 type(v).__name__, "must be a non-negative integer below 2**31")
    reward = raw.get("reward")
    if reward is None:
        fail("reward", None, "missing")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or \
            not math.isfinite(reward):
        fail("reward", reward, "must be a finite number")
    info = raw.get("info")
    if not isinstance(info, Mapping):
        fail("info", info, "missing" if info is None else "must be an object")
    task = info.get("task")
    if not isinstance(task, Mapping):
        fail("info.task", task, "missing" if task is None else "must be an object")
    user_id = task.get("user_id", "")
    if not isinstance(user_id, str):
        fail("info.task.user_id", user_id, "must be a string")
    instruction = task.get("instruction", "")
    if not isinstance(instruction, str):
        fail("info.task.instruction", instruction, "must be a string")
    actions = task.get("actions")
    if not isinstance(actions, list):
        fail("info.task.actions", actions, "missing" if actions is None else "must be a list")
    truth = []
    for j, a in enumerate(actions):
        if not isinstance(a, Mapping) or not isinstance(a.get("name"), str) or not a["name"]:
            fail(f"info.task.actions[{j}].name", a, "must be an object with a tool name")
        kw = a.get("kwargs", {})
        if not isinstance(kw, Mapping):
            fail(f"info.task.actions[{j}].kwargs", kw, "must be an object")
        truth.append((a["name"], dict(kw)))
    if "traj" not in raw:
        fail("traj", None, "missing")
    traj = raw["traj"]
    if not isinstance(traj, list):
        fail("traj", type(traj).__name__, "must be a list of messages")
    calls: list[dict] = []
    by_id: dict[str, dict] = {}
    outputs: list[str] = []
    texts: list[str] = []
    first = None
    for m, msg in enumerate(traj):
        where = f"traj[{m}]"
        if not isinstance(msg, Mapping):
            fail(where, type(msg).__name__, "must be a message object")
        role = msg.get("role")
        if not isinstance(role, str):
            fail(f"{where}.role", role, "missing" if role is None else "must be a string")
        content = msg.get("content")
        if content is not None and not isinstance(content, str):
            fail(f"{where}.content", type(content).__name__, "must be a string or null")
        if role == "user" and first is None and content:
            first = content
        if role in ("user", "assistant") and content:
            texts.append(content)
        if role == "assistant":
            tcs = msg.get("tool_calls") or []
            if not isinstance(tcs, list):
                fail(f"{where}.tool_calls", type(tcs).__name__, "must be a list")
            for c, tc in enumerate(tcs):
                cw = f"{where}.tool_calls[{c}]"
                fn = tc.get("function") if isinstance(tc, Mapping) else None
                if not isinstance(fn, Mapping):
                    fail(f"{cw}.function", fn, "missing" if fn is None else
                         "must be an object")
                name = fn.get("name")
                if not isinstance(name, str) or not name:
                    fail(f"{cw}.function.name", name, "must be a non-empty string")
                text = fn.get("arguments", "{}")
                if not isinstance(text, str):
                    fail(f"{cw}.function.arguments", text, "must be JSON text")
                try:
                    args = _loads(text) if text.strip() else {}
                except ValueError as exc:
                    fail(f"{cw}.function.arguments", text, f"not JSON ({exc})")
                if not isinstance(args, dict):
                    fail(f"{cw}.function.arguments", text, "must be a JSON object")
                call = {"name": name, "args": args, "output": "", "error": False}
                calls.append(call)
                cid = tc.get("id")
                if isinstance(cid, str) and cid:
                    by_id[cid] = call
        elif role == "tool":
            text = content or ""
            if text.lstrip()[:1] in ("{", "["):
                try:
                    _loads(text)
                except ValueError as exc:
                    if "nested too deeply" in str(exc):   # no reader could walk it
                        fail(f"{where}.content", text, "JSON nested too deeply")
            outputs.append(text)
            cid = msg.get("tool_call_id")
            if cid is not None and not isinstance(cid, str):
                fail(f"{where}.tool_call_id", type(cid).__name__, "must be a string")
            call = by_id.get(cid)
            if call is not None:
                call["output"] = text
                call["error"] = text.lstrip().startswith("Error")
    return TrajectoryRun(index, raw["task_id"], raw["trial"], float(reward), user_id,
                         instruction, first or "", tuple(truth), tuple(calls),
                         _usage(raw), tuple(outputs), tuple(texts))


def load_trajectories(path) -> list[TrajectoryRun]:
    """Read and check a trajectories file (module docstring).

    Parameters
    ----------
    path : str or Path
        A JSON file holding a list of runs.

    Returns
    -------
    list of TrajectoryRun
        In file order.

    Raises
    ------
    MissingFileError
        No such file (field ``data``).
    TrajectoryError
        The file is not UTF-8 or not JSON (an object naming a key twice included), is not
        a list, holds two runs with the same task and trial, or a run is malformed
        (:func:`parse_run`).
    """
    p = Path(path)
    if not p.is_file():
        raise MissingFileError("data", p)
    try:
        raw = loads_unique(p.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise TrajectoryError(p, "", "file", None, f"not UTF-8 (byte {exc.start})") from None
    except RecursionError:
        raise TrajectoryError(p, "", "file", None, "not JSON (nested too deeply)") from None
    except ValueError as exc:
        raise TrajectoryError(p, "", "file", None, f"not JSON ({exc})") from None
    if not isinstance(raw, list):
        raise TrajectoryError(p, "", "file", type(raw).__name__,
                              "must be a JSON list of runs")
    runs = [parse_run(r, i, p) for i, r in enumerate(raw)]
    seen: dict[tuple, int] = {}
    for r in runs:
        key = (r.task_id, r.trial)
        if key in seen:
            raise TrajectoryError(p, _label(r.index, raw[r.index]), "task_id", r.task_id,
                                  f"task {r.task_id} trial {r.trial} is also run "
                                  f"{seen[key]}")
        seen[key] = r.index
    return runs


def import_runs(store, runs: Sequence[TrajectoryRun], tenant_id: str = "taubench-airline",
                *, redaction: bool = True) -> dict:
    """Record one experience-store episode per run (:meth:`TrajectoryRun.episode`), all in
    one transaction.

    Parameters
    ----------
    store : dyna.experience.ExperienceStore
    runs : sequence of TrajectoryRun
    tenant_id : str
    redaction : bool
        Redact each episode as the digest does before the store's own redaction.

    Returns
    -------
    dict
        ``ids`` and ``n``, as :meth:`ExperienceStore.record`.
    """
    return store.record(tenant_id, [r.episode(redaction=redaction) for r in runs])


# ============================================================================ personal data

def _json_objects(text: str):
    """The parsed JSON of a tool output, or None (plain parsing, no detector)."""
    s = text.strip()
    if s[:1] not in "{[" or s[-1:] not in "}]":
        return None
    try:
        return json.loads(s)
    except (ValueError, RecursionError):
        return None


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
        data = _json_objects(text)
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


_BOUNDARY = r"(?<![A-Za-z0-9]){}(?![A-Za-z0-9])"


def _pattern(values: frozenset) -> re.Pattern | None:
    if not values:
        return None
    alts = "|".join(re.escape(v) for v in sorted(values, key=lambda s: (-len(s), s)))
    return re.compile(_BOUNDARY.format(f"(?:{alts})"))


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
            and re.search(_BOUNDARY.format(re.escape(v)), text) is not None}


# ============================================================================ workflow induction

#: Tools that are notes to self, not actions on the world (dropped from workflows).
NOT_ACTIONS = ("think",)
#: Workflow predictors scored by :func:`leave_one_task_out`.
PREDICTORS = ("induced", "mode_ground_truth", "mode_success")


def abstract_call(name: str, args: Mapping) -> str:
    """A tool call with its arguments abstracted to their names, the way Agent Workflow
    Memory abstracts example-specific values into variables (Wang, Mao, Fried & Neubig,
    "Agent Workflow Memory", ICML 2025, arXiv 2409.07429, section 2.2):
    ``book_reservation(cabin,flights,...)``.

    >>> abstract_call("get_user_details", {"user_id": "mia_li_3668"})
    'get_user_details(user_id)'
    """
    return f"{name}({','.join(sorted(str(k) for k in args))})"


def run_workflow(run: TrajectoryRun) -> tuple[str, ...]:
    """The abstracted calls of a run that returned no error, in order, without
    :data:`NOT_ACTIONS` (a failed call does not advance the task)."""
    return tuple(abstract_call(c["name"], c["args"]) for c in run.tool_calls
                 if not c["error"] and c["name"] not in NOT_ACTIONS)


def truth_workflow(run: TrajectoryRun) -> tuple[str, ...]:
    """The run's ground-truth tool calls (``info.task.actions``), abstracted."""
    return tuple(abstract_call(n, kw) for n, kw in run.ground_truth if n not in NOT_ACTIONS)


def induce_workflow(examples: Sequence[Sequence[str]]) -> tuple[str, ...]:
    """The consensus workflow of example call sequences.

    A call is kept when it occurs in more than half of the examples, as many times as the
    median example has it (rounded down, examples without it counting 0); its j-th
    occurrence is placed at the mean relative position (index / length) of the j-th
    occurrences in the examples that have one; ties by name. It is a deterministic
    stand-in for AWM's LM induction, which keeps the sub-routines common to the examples
    and drops the example-specific steps.

    Parameters
    ----------
    examples : sequence of sequence of str
        Abstracted call sequences (:func:`run_workflow`).

    Returns
    -------
    tuple of str
        Empty when there are no examples.
    """
    import numpy as np
    n = len(examples)
    if n == 0:
        return ()
    names = sorted({c for e in examples for c in e})
    items = []
    for c in names:
        counts = [list(e).count(c) for e in examples]
        if sum(k > 0 for k in counts) * 2 <= n:
            continue
        for j in range(int(np.median(counts))):
            where = [[i for i, x in enumerate(e) if x == c][j] / max(len(e), 1)
                     for e in examples if list(e).count(c) > j]
            items.append((float(np.mean(where)), c, j))
    return tuple(c for _, c, _ in sorted(items))


def _mode(seqs: Sequence[tuple]) -> tuple:
    """The most frequent sequence, ties to the one seen first."""
    counts: dict[tuple, int] = {}
    for s in seqs:
        counts[s] = counts.get(s, 0) + 1
    return max(counts, key=lambda s: (counts[s], -seqs.index(s))) if counts else ()


def sequence_scores(predicted: Sequence[str], truth: Sequence[str]) -> tuple[float, float, bool]:
    """``(precision, recall, exact)`` of a predicted call sequence against the truth.

    Precision and recall are over calls as multisets (a call predicted twice but needed
    once counts once); ``exact`` is sequence equality. An empty prediction has precision
    0 (against a non-empty truth); the truth must not be empty.

    Raises
    ------
    ConfigError
        Empty ``truth`` (recall is undefined; such tasks are reported apart).
    """
    if not truth:
        raise ConfigError("truth", list(truth), "must not be empty: recall is undefined")
    from collections import Counter
    hit = sum((Counter(predicted) & Counter(truth)).values())
    precision = hit / len(predicted) if predicted else 0.0
    return precision, hit / len(truth), tuple(predicted) == tuple(truth)


def leave_one_task_out(runs: Sequence[TrajectoryRun]) -> list[dict]:
    """Workflow induction evaluated leave-one-task-out within each task type.

    For each task: the workflow induced (:func:`induce_workflow`) from the successful runs
    of the *other* tasks of its type, and two baselines from the same tasks: the type's
    most frequent ground-truth sequence (``mode_ground_truth``) and the most frequent
    successful-run sequence (``mode_success``); each scored against the held-out task's
    ground truth (:func:`sequence_scores`).

    Parameters
    ----------
    runs : sequence of TrajectoryRun
        Every trial of every task (the ground truth of a task is read from its first run).

    Returns
    -------
    list of dict
        One per task, by task id: ``task_id``, ``task_type``, ``status`` (``"scored"``,
        ``"nothing_to_induce"``: no other task of the type has a successful run, or
        ``"empty_ground_truth"``), ``n_examples`` (successful runs induced from),
        ``n_truth`` (ground-truth calls), and per predictor of :data:`PREDICTORS`
        ``<p>_len`` and, when scored, ``<p>_precision``, ``<p>_recall``, ``<p>_exact``
        (NaN / None otherwise).
    """
    tasks: dict[int, list[TrajectoryRun]] = {}
    for r in sorted(runs, key=lambda r: (r.trial, r.task_id)):
        tasks.setdefault(r.task_id, []).append(r)
    out = []
    for tid in sorted(tasks):
        own = tasks[tid][0]
        ttype, truth = own.task_type, truth_workflow(own)
        others = [t for t in sorted(tasks) if t != tid and tasks[t][0].task_type == ttype]
        examples = [run_workflow(r) for t in others for r in tasks[t] if r.success]
        preds = {"induced": induce_workflow(examples),
                 "mode_ground_truth": _mode([truth_workflow(tasks[t][0]) for t in others]),
                 "mode_success": _mode(examples)}
        status = ("empty_ground_truth" if not truth else
                  "nothing_to_induce" if not examples else "scored")
        row = {"task_id": tid, "task_type": ttype, "status": status,
               "n_examples": len(examples), "n_truth": len(truth),
               "truth": " ".join(truth)}
        for p, seq in preds.items():
            row[f"{p}_len"] = len(seq)
            row[f"{p}_workflow"] = " ".join(seq)
            if status == "scored":
                pr, rc, ex = sequence_scores(seq, truth)
            else:
                pr, rc, ex = float("nan"), float("nan"), None
            row.update({f"{p}_precision": pr, f"{p}_recall": rc, f"{p}_exact": ex})
        out.append(row)
    return out
