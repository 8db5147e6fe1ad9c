"""Workflow induction from the runs, scored leave one task out.

A run's workflow is its tool calls with their arguments abstracted to their names, the way
Agent Workflow Memory abstracts example-specific values into variables (Wang, Mao, Fried &
Neubig, "Agent Workflow Memory", ICML 2025, arXiv 2409.07429): :func:`induce_workflow` keeps
the consensus of the successful runs of the other tasks of a type, and
:func:`leave_one_task_out` scores it against each task's ground truth.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dyna.errors import ConfigError
from dyna.loops.trajectories.runs import TrajectoryRun

__all__ = ["NOT_ACTIONS", "PREDICTORS", "abstract_call", "induce_workflow",
           "leave_one_task_out", "run_workflow", "sequence_scores", "truth_workflow"]

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
