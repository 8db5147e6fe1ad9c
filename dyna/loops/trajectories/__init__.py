"""Real agent runs as the loops' records: the tau-bench trajectories importer.

A *trajectories file* is a JSON list of runs in tau-bench's shape (Yao, Shinn, Razavi &
Narasimhan, "tau-bench: A Benchmark for Tool-Agent-User Interaction in Real-World Domains",
arXiv 2406.12045). ``data/agent_trajectories/`` holds the 200 GPT-4o airline runs.

* :mod:`~dyna.loops.trajectories.parse`: :func:`load_trajectories` parses and checks a file
  into :class:`TrajectoryRun` objects; hostile input (not JSON, a run without ``traj``,
  tool-call arguments that are not a JSON object, ...) raises :class:`TrajectoryError`
  naming the run and the field.
* :mod:`~dyna.loops.trajectories.runs`: :func:`task_type` is the first state-changing tool
  the ground truth calls (:data:`STATE_CHANGING`), or ``"no_change"``;
  :meth:`TrajectoryRun.digest` builds the :class:`~dyna.loops.review.Digest` a reviewer
  sees (redacted or not); :meth:`TrajectoryRun.episode` the experience-store episode;
  :func:`import_runs` records them all in an :class:`~dyna.experience.ExperienceStore`.
* :mod:`~dyna.loops.trajectories.redaction`: the tau-bench id formats
  (:data:`TAU_BENCH_FORMATS`: user ids and payment-method ids) every redaction of the
  importer uses.
* :mod:`~dyna.loops.trajectories.personal`: :func:`harvest_personal_values` collects a
  run's personal data *by field* from its structured tool outputs (not by the redactor, so
  that counting what the redactor missed is not circular); :func:`find_personal_values`
  finds them in a text.
* :mod:`~dyna.loops.trajectories.workflows`: workflow induction, scored leave one task out.
"""

from dyna.loops.trajectories.json_text import MAX_DEPTH
from dyna.loops.trajectories.parse import MAX_TEXT, load_trajectories, parse_run
from dyna.loops.trajectories.personal import (ADDRESS_PARTS, PERSONAL_FIELDS,
                                              find_personal_values, harvest_by_field,
                                              harvest_personal_values)
from dyna.loops.trajectories.redaction import (DIGEST_SENSITIVE_KEYS, PAYMENT_METHOD_KINDS,
                                               TAU_BENCH_FORMATS, USER_ID_CUE_KEYS,
                                               USER_ID_SHAPE, redact_run)
from dyna.loops.trajectories.runs import (MAX_ID, NO_CHANGE, STATE_CHANGING, TrajectoryError,
                                          TrajectoryRun, import_runs, task_type)
from dyna.loops.trajectories.workflows import (NOT_ACTIONS, PREDICTORS, abstract_call,
                                               induce_workflow, leave_one_task_out,
                                               run_workflow, sequence_scores, truth_workflow)

__all__ = ["ADDRESS_PARTS", "DIGEST_SENSITIVE_KEYS", "MAX_DEPTH", "MAX_ID", "MAX_TEXT",
           "NOT_ACTIONS", "NO_CHANGE", "PAYMENT_METHOD_KINDS", "PERSONAL_FIELDS", "PREDICTORS",
           "STATE_CHANGING", "TAU_BENCH_FORMATS", "TrajectoryError", "TrajectoryRun",
           "USER_ID_CUE_KEYS", "USER_ID_SHAPE", "abstract_call", "find_personal_values",
           "harvest_by_field", "harvest_personal_values", "import_runs", "induce_workflow",
           "leave_one_task_out", "load_trajectories", "parse_run", "redact_run",
           "run_workflow", "sequence_scores", "task_type", "truth_workflow"]
