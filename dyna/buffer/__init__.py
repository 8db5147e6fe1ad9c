"""ExperienceBuffer: a columnar, vectorised store of episodes.

One row per episode, one numpy array per field (see :data:`FIELDS`):

============================  ===========================  =====================================
field                         storage                      meaning
============================  ===========================  =====================================
id                            int64                        monotonically increasing, never reused
tenant_id, task_type,         int32 codes + a per-column   categorical labels; code 0 is the empty
action_type, outcome,         string dictionary            string, which means "missing"
run_id, task_id, request_id,
outcome_source,
outcome_verified_by,
anti_gaming_policy
reward                        float64                      finite
timestamp                     float64                      seconds since the Unix epoch, UTC
state_before, action_taken,   object (JSON str or None)    free-form values, redacted, then JSON
state_after, metadata
features                      float32 ``(d,)``             numeric ``state_features`` or the
                                                           feature hash of the four dicts
inv_norm                      float32                      1 / ||features|| (0 for zero rows)
============================  ===========================  =====================================

Arrays grow by amortised doubling into fresh zeroed arrays (never ``np.resize``, which
repeats data), so capacity beyond ``len`` is never resident and never visible: every read
API covers rows ``0 <= r < len`` only. In ring mode (``ring=True``) the capacity is fixed
and the oldest rows are overwritten; row positions are then slots and
:meth:`ExperienceBuffer.order` gives the write order.

A batch (:meth:`ExperienceBuffer.record_batch`) is validated while it is staged in rows
that are not visible yet; they become visible only once everything is valid, so a bad batch
changes nothing (:mod:`dyna.buffer.batch`). A search filtered to one label reads only that
label's rows (:mod:`dyna.buffer.groups`).

Input is checked before anything is stored (:mod:`dyna.buffer.schema`): dict fields nest at
most :data:`MAX_DEPTH` (64) containers deep, text (labels, dict keys and values) must be
valid Unicode (no lone surrogates), labels are str (never bytes), numbers fit float64; each
violation is a :class:`dyna.errors.ConfigError` naming the field (and row) and the value.
:meth:`ExperienceBuffer.savepoint` and :meth:`ExperienceBuffer.rollback` undo appends (how
an experience store keeps nothing in memory that a failed write did not store).

A buffer is not thread-safe; guard it with a lock if several threads record.

Modules: :mod:`~dyna.buffer.schema` (fields, input types, value checks),
:mod:`~dyna.buffer.labels` (the label dictionaries), :mod:`~dyna.buffer.batch` (recording a
batch), :mod:`~dyna.buffer.reading` (selecting and decoding rows),
:mod:`~dyna.buffer.groups` (filtered search), :mod:`~dyna.buffer.retention` (which rows
survive compaction), :mod:`~dyna.buffer.frames` (polars) and
:mod:`~dyna.buffer.experience_buffer` (the class).
"""

from dyna.buffer.experience_buffer import ExperienceBuffer
from dyna.buffer.schema import (CATEGORICAL_FIELDS, DICT_FIELDS, FIELDS, MAX_DEPTH,
                                REQUIRED_FIELDS, Categorical, JsonText, check_value,
                                finite_float, short_value, to_json)

__all__ = [
    "CATEGORICAL_FIELDS",
    "Categorical",
    "JsonText",
    "DICT_FIELDS",
    "ExperienceBuffer",
    "FIELDS",
    "MAX_DEPTH",
    "REQUIRED_FIELDS",
    "check_value",
    "finite_float",
    "short_value",
    "to_json",
]
