"""Reading a trajectories file: every run checked, hostile input refused by name.

A *trajectories file* is a JSON list of runs in tau-bench's shape (Yao, Shinn, Razavi &
Narasimhan, "tau-bench: A Benchmark for Tool-Agent-User Interaction in Real-World Domains",
arXiv 2406.12045; ``historical_trajectories/*.json`` of ``sierra-research/tau-bench``): per
run ``task_id``, ``trial``, ``reward``, ``info.task`` (``user_id``, ``instruction``, the
ground-truth ``actions``) and ``traj``, the conversation in chat-completions form (assistant
``tool_calls`` with ``function.arguments`` as JSON text, ``tool`` messages with each call's
output). :func:`load_trajectories` reads a file, :func:`parse_run` one run; a malformed run
raises :class:`~dyna.loops.trajectories.runs.TrajectoryError` naming the run and the field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

from dyna.fileio.unique_json import loads_unique
from dyna.errors import MissingFileError
from dyna.loops.llm.client import json_depth
from dyna.loops.trajectories.json_text import MAX_DEPTH, strict_json
from dyna.loops.trajectories.runs import MAX_ID, TrajectoryError, TrajectoryRun

__all__ = ["MAX_TEXT", "load_trajectories", "parse_run"]

#: Longest text (characters) accepted anywhere in a run: 25 times the longest of the 200
#: airline runs (8,117). A 100 MB argument took 450 s and 10 GB to replay.
MAX_TEXT = 200_000


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

    _check_run(raw, fail)
    user_id, instruction, truth = _read_task(raw["info"]["task"], fail)
    if "traj" not in raw:
        fail("traj", None, "missing")
    traj = raw["traj"]
    if not isinstance(traj, list):
        fail("traj", type(traj).__name__, "must be a list of messages")
    calls, outputs, texts, first = _read_messages(traj, fail)
    return TrajectoryRun(index, raw["task_id"], raw["trial"], float(raw["reward"]), user_id,
                         instruction, first or "", tuple(truth), tuple(calls),
                         _usage(raw), tuple(outputs), tuple(texts))


def _check_run(raw, fail) -> None:
    """The run is an object, neither too deep nor holding too long a text, with ids, a
    finite reward and ``info.task`` objects (else ``fail``)."""
    if not isinstance(raw, Mapping):
        fail("run", type(raw).__name__, "must be a JSON object")
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


def _read_task(task: Mapping, fail) -> tuple[str, str, list]:
    """``(user_id, instruction, ground truth)`` of ``info.task`` (else ``fail``)."""
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
    return user_id, instruction, truth


def _read_messages(traj: list, fail) -> tuple[list, list, list, str | None]:
    """``(tool calls, tool outputs, user and assistant texts, first user message)`` of the
    conversation, each tool output given to the call it answers (else ``fail``)."""
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
            for cid, call in _read_tool_calls(msg, where, fail):
                calls.append(call)
                if isinstance(cid, str) and cid:
                    by_id[cid] = call
        elif role == "tool":
            text = content or ""
            if text.lstrip()[:1] in ("{", "["):
                try:
                    strict_json(text)
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
    return calls, outputs, texts, first


def _read_tool_calls(msg: Mapping, where: str, fail) -> list[tuple[object, dict]]:
    """``(id, call)`` of each tool call of an assistant message: ``name``, ``args`` (the
    strict JSON object of ``function.arguments``), no output yet (else ``fail``)."""
    tcs = msg.get("tool_calls") or []
    if not isinstance(tcs, list):
        fail(f"{where}.tool_calls", type(tcs).__name__, "must be a list")
    out = []
    for c, tc in enumerate(tcs):
        cw = f"{where}.tool_calls[{c}]"
        fn = tc.get("function") if isinstance(tc, Mapping) else None
        if not isinstance(fn, Mapping):
            fail(f"{cw}.function", fn, "missing" if fn is None else "must be an object")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            fail(f"{cw}.function.name", name, "must be a non-empty string")
        text = fn.get("arguments", "{}")
        if not isinstance(text, str):
            fail(f"{cw}.function.arguments", text, "must be JSON text")
        try:
            args = strict_json(text) if text.strip() else {}
        except ValueError as exc:
            fail(f"{cw}.function.arguments", text, f"not JSON ({exc})")
        if not isinstance(args, dict):
            fail(f"{cw}.function.arguments", text, "must be a JSON object")
        out.append((tc.get("id"), {"name": name, "args": args, "output": "", "error": False}))
    return out


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
