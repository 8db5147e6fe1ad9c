"""Which rows a buffer keeps when it forgets: the newest per group, the survivors in order."""

from __future__ import annotations

from collections.abc import Mapping

import numba
import numpy as np

from dyna.buffer.labels import LabelDictionary
from dyna.buffer.schema import unused_columns
from dyna.index import ColumnStore

__all__ = ["keep_rows", "newest_per_group"]


@numba.njit(cache=True, nogil=True)
def _keep_newest(group, keep, n_groups):  # pragma: no cover - compiled
    """Mask of the last ``keep`` rows of each group, scanning rows from the end."""
    seen = np.zeros(n_groups, np.int64)
    mask = np.zeros(group.shape[0], np.bool_)
    for i in range(group.shape[0] - 1, -1, -1):
        g = group[i]
        if seen[g] < keep:
            mask[i] = True
            seen[g] += 1
    return mask


def newest_per_group(store: ColumnStore, dicts: Mapping[str, LabelDictionary], keep: int,
                     in_time_order: bool) -> np.ndarray:
    """Mask ``(len,)`` of the newest ``keep`` rows of every (tenant_id, task_type).

    "Newest" is by timestamp, ties by write order. One O(n) compiled pass from the newest
    row backwards counts rows per group; unless the rows are ``in_time_order`` (timestamps
    non-decreasing in row order, which is write order), they are first put in order with
    one stable argsort of the timestamps.
    """
    n = len(store)
    n_task = len(dicts["task_type"].labels)
    n_groups = len(dicts["tenant_id"].labels) * n_task
    group = store.view("tenant_id").astype(np.int64) * n_task
    group += store.view("task_type")
    if n_groups > max(4 * n, 1 << 20):
        _, group = np.unique(group, return_inverse=True)
        n_groups = int(group.max()) + 1
    if in_time_order:
        return _keep_newest(group, int(keep), n_groups)
    order = store.order()
    order = order[np.argsort(store.view("timestamp")[order], kind="stable")]
    keep_mask = np.zeros(n, dtype=bool)
    keep_mask[order] = _keep_newest(group[order], int(keep), n_groups)
    return keep_mask


def keep_rows(store: ColumnStore, keep: np.ndarray, used: set) -> int:
    """Keep the rows of ``store`` the mask ``keep`` ``(len,)`` keeps, in write order; return
    how many were deleted. Optional columns not in ``used`` hold no value and stay as they
    are."""
    if store.in_write_order:
        survivors = np.flatnonzero(keep)
    else:
        order = store.order()
        survivors = order[keep[order]]
    deleted = len(store) - survivors.size
    if deleted:
        store.keep(survivors, blank=unused_columns(used))
    return deleted
