"""Per-label row groups of the buffer: what makes a search filtered to one label cheap.

A search filtered to one label (``buffer.search(q, k, tenant_id="t1")``) reads only that
label's rows: the first such search by a column builds the row list of each of its labels
(one counting sort of its codes), kept up to date as rows arrive and dropped whenever rows
are deleted or moved. A label whose rows are contiguous is searched as a zero-copy slice; a
label whose rows are scattered among others' gets a contiguous copy of its features, inverse
norms and ids with its own index, built on its first search and extended as rows arrive.
"""

from __future__ import annotations

from collections.abc import Mapping

import numba
import numpy as np

from dyna.buffer.labels import LabelDictionary
from dyna.buffer.schema import label_text
from dyna.errors import ConfigError
from dyna.index import ColumnStore, ExactIndex

__all__ = ["GroupIndex", "LabelGroups", "RowGroup"]


@numba.njit(cache=True, nogil=True)
def _split_by_code(codes, first_row):  # pragma: no cover - compiled
    """Stable counting sort of rows by code.

    Returns ``(rows, present, bounds)``: ``rows`` (int64) are ``first_row + i`` grouped by
    code in ascending code order, each group ascending; ``present`` the codes that occur;
    group ``j`` is ``rows[bounds[j]:bounds[j + 1]]``.
    """
    n = codes.shape[0]
    hi = 0
    for i in range(n):
        hi = max(hi, codes[i])
    counts = np.zeros(hi + 2, np.int64)
    for i in range(n):
        counts[codes[i] + 1] += 1
    m = 0
    for c in range(hi + 1):
        m += counts[c + 1] > 0
    present = np.empty(m, np.int64)
    bounds = np.empty(m + 1, np.int64)
    j = 0
    for c in range(hi + 1):
        if counts[c + 1] > 0:
            present[j] = c
            bounds[j] = counts[c]
            j += 1
        counts[c + 1] += counts[c]
    bounds[m] = n
    rows = np.empty(n, np.int64)
    for i in range(n):
        c = codes[i]
        rows[counts[c]] = first_row + i
        counts[c] += 1
    return rows, present, bounds


@numba.njit(cache=True, nogil=True)
def _gather_rows(features, inv, ids, rows, f_dst, inv_dst, id_dst, base):  # pragma: no cover
    """Copy the given rows' features, inverse norms and ids to ``base, base + 1, ...``."""
    d = features.shape[1]
    for i in range(rows.shape[0]):
        r = rows[i]
        for j in range(d):
            f_dst[base + i, j] = features[r, j]
        inv_dst[base + i] = inv[r]
        id_dst[base + i] = ids[r]


class RowGroup:
    """Row positions of one label (ascending), and once searched while scattered, a
    contiguous copy of those rows' features, inverse norms and ids with its own index."""

    __slots__ = ("rows", "copy", "index")

    def __init__(self, rows: np.ndarray):
        self.rows = ColumnStore({"row": (np.int64, ())}, max(rows.size, 16))
        self.copy: ColumnStore | None = None
        self.index: ExactIndex | None = None
        self.append(rows, None)

    def append(self, rows: np.ndarray, store: ColumnStore | None) -> None:
        """Add these buffer rows (ascending, after the group's); with a copy, copy them too
        from ``store``."""
        if rows.size == 0:
            return
        for dst, _ in self.rows.claim(rows.size):
            self.rows.array("row")[dst] = rows
        if self.copy is not None:
            self._gather(store, rows)

    def _gather(self, store: ColumnStore, rows: np.ndarray) -> None:
        """Append these buffer rows' features, inverse norms and ids to the copy."""
        for dst, _ in self.copy.claim(rows.size):
            _gather_rows(store.view("features"), store.view("inv_norm"), store.view("id"),
                         rows, self.copy.array("features"), self.copy.array("inv_norm"),
                         self.copy.array("id"), dst.start)

    def contiguous(self) -> slice | None:
        """The group's rows as one slice when they are contiguous, else None."""
        rows = self.rows.view("row")
        if rows.size and int(rows[-1]) - int(rows[0]) + 1 == rows.size:
            return slice(int(rows[0]), int(rows[-1]) + 1)
        return None

    def searchable(self, store: ColumnStore, dim: int) -> ExactIndex:
        """The index over the group's own contiguous copy (built on first use)."""
        if self.index is None:
            rows = self.rows.view("row")
            self.copy = ColumnStore({"features": (np.float32, (dim,)),
                                     "inv_norm": (np.float32, ()), "id": (np.int64, ())},
                                    max(rows.size, 16))
            self._gather(store, rows)
            self.index = ExactIndex.over(self.copy, vectors="features", inv_norm="inv_norm",
                                         stamp="id")
        return self.index

    def nbytes(self) -> int:
        """Bytes of the row list and of the copy."""
        return self.rows.nbytes() + (self.copy.nbytes() if self.copy is not None else 0)


class LabelGroups:
    """Per-label row lists of one categorical column, kept up to date as rows are appended.

    Built on the first filtered search by that column (one counting sort of its codes);
    dropped whenever rows are deleted or moved (they are rebuilt on the next search).
    """

    def __init__(self, codes: np.ndarray):
        self.groups: dict[int, RowGroup] = {}
        self.append(codes, 0, None)

    def append(self, codes: np.ndarray, first_row: int, store: ColumnStore | None) -> None:
        """Add rows ``first_row .. first_row + len(codes) - 1`` with these codes."""
        if codes.size == 0:
            return
        rows, present, bounds = _split_by_code(codes, first_row)
        for j, code in enumerate(present.tolist()):
            rows_j = rows[bounds[j]:bounds[j + 1]]
            g = self.groups.get(code)
            if g is None:
                self.groups[code] = RowGroup(rows_j)
            else:
                g.append(rows_j, store)

    def nbytes(self) -> int:
        """Bytes of every group of the column."""
        return sum(g.nbytes() for g in self.groups.values())


class GroupIndex:
    """The :class:`LabelGroups` of every categorical column a filtered search used.

    Attributes
    ----------
    columns : dict of str to LabelGroups
        Column name -> its label groups.
    """

    def __init__(self):
        self.columns: dict[str, LabelGroups] = {}

    def search(self, index: ExactIndex, store: ColumnStore,
               dicts: Mapping[str, LabelDictionary], name: str, label, query, k: int):
        """Cosine top-k over the rows of ``store`` whose categorical column ``name`` holds
        ``label`` (a label never recorded has no row); ``(rows, scores)`` as
        :meth:`dyna.index.ExactIndex.search`, rows being positions in ``store``.

        Raises
        ------
        ConfigError
            ``name`` is not a categorical column of ``dicts``.
        """
        if name not in dicts:
            raise ConfigError(name, label, "not a categorical field to select on")
        code = dicts[name].lookup.get(label_text(label, name))
        group = None
        if code is not None:
            groups = self.columns.get(name)
            if groups is None:
                groups = self.columns[name] = LabelGroups(store.view(name))
            group = groups.groups.get(code)
        if group is None:
            return index.search(query, k, candidates=slice(0, 0))
        sl = group.contiguous()
        if sl is not None:
            return index.search(query, k, candidates=sl)
        dim = store.view("features").shape[1]
        pos, scores = group.searchable(store, dim).search(query, k)
        return group.rows.view("row")[pos], scores

    def append(self, store: ColumnStore, n: int) -> None:
        """Add the last ``n`` rows of ``store`` to the groups (a ring store drops them)."""
        if not self.columns or n == 0:
            return
        if store.ring:
            self.columns.clear()
            return
        first = len(store) - n
        for name, groups in self.columns.items():
            groups.append(store.view(name)[first:], first, store)

    def clear(self) -> None:
        """Drop every group (rows were deleted or moved; they are rebuilt when searched)."""
        self.columns.clear()

    def nbytes(self) -> int:
        """Bytes of the row lists and feature copies of every column."""
        return sum(g.nbytes() for g in self.columns.values())
