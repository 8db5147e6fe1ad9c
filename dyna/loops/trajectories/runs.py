"""A tau-bench run as the loops' records: its digest and its experience-store episode.

A :class:`TrajectoryRun` is one checked run of a trajectories file
(:mod:`dyna.loops.trajectories.parse`): its task, reward, ground truth and tool calls.
:meth:`TrajectoryRun.digest` builds the :class:`~dyna.loops.review.Digest` a reviewer sees
(redacted or not), :meth:`TrajectoryRun.episode` the experience-store episode, and
:func:`import_runs` records them all in an :class:`~dyna.experience.ExperienceStore`; each
redacts with the tau-bench formats (:mod:`dyna.loops.trajectories.redaction`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from dyna.errors import ConfigError, DynaError
from dyna.loops.trajectories.redaction import (DIGEST_SENSITIVE_KEYS, TAU_BENCH_FORMATS,
                                               redact_run)
from dyna.redact import redaction_formats

__all__ = ["MAX_ID", "NO_CHANGE", "STATE_CHANGING", "TrajectoryError", "TrajectoryRun",
           "import_runs", "task_type"]

#: Tools of the tau-bench airline domain that change the database (prefix match for
#: ``update_reservation_*``).
STATE_CHANGING = ("book_reservation", "cancel_reservation", "update_reservation_",
                  "send_certificate")
#: Task type of a task whose ground truth changes nothing.
NO_CHANGE = "no_change"
#: Bound of ``task_id`` and ``trial`` (they become int64 columns and store labels).
MAX_ID = 2**31


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
        """Whether the run was rewarded in full (``reward == 1.0``)."""
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
               sensitive_keys: Iterable[str] | None = None,
               task_source: str | None = "simulation"):
        """The :class:`~dyna.loops.review.Digest` of this run.

        Parameters
        ----------
        redaction : bool
            Redact the task, every argument and every output (the loop's ``redaction``
            switch), with the tau-bench formats (:data:`TAU_BENCH_FORMATS`); outputs are cut
            to 200 characters after redaction. First the whole
            run, its messages included, is redacted as one object (:func:`redact_run`),
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
        task_source : str or None
            Who wrote the task text (the first user message), as
            :attr:`Digest.task_source`. tau-bench's first message is written by its user
            simulator, a model following the benchmark's own scripted instruction, so an
            import of the benchmark's runs declares it ``"simulation"`` (trusted). Runs
            with real customers' messages pass ``"untrusted"`` (or None): every lesson of
            the run is then staged for approval.

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
            task, texts = redact_run(task, [(c["args"], c["output"]) for c in calls],
                                     self.messages, keys)
            for c, (args, output) in zip(calls, texts):
                c["args"], c["output"] = args, output
        with redaction_formats(TAU_BENCH_FORMATS):
            return Digest.from_run(self.run_id, task, success=self.success, verified=True,
                                   steps=len(calls), tokens=self.tokens, tool_calls=calls,
                                   actions=self.actions, redaction=redaction,
                                   sensitive_keys=keys, task_source=task_source)

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
            whole run at once, with ``sensitive_keys`` and the tau-bench formats) before
            the store's own redaction (:func:`import_runs`); this pass also erases id-like
            values found under sensitive keys wherever else they occur.
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
            task, texts = redact_run(task, [(a, c["output"]) for a, c in
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
        Redact each episode as the digest does before the store's own redaction; the store
        redacts with the tau-bench formats too (:data:`TAU_BENCH_FORMATS`).

    Returns
    -------
    dict
        ``ids`` and ``n``, as :meth:`ExperienceStore.record`.
    """
    episodes = [r.episode(redaction=redaction) for r in runs]
    with redaction_formats(TAU_BENCH_FORMATS):
        return store.record(tenant_id, episodes)
