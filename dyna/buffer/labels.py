"""The labels of the buffer's categorical columns: one dictionary per column, label <-> code.

A categorical column stores int32 codes; its :class:`LabelDictionary` maps each code to its
label (code 0 is "", which means missing) and back. Encoding a batch's values
(:meth:`LabelDictionary.encode`) commits nothing: the labels it finds new are added only
once the whole batch is valid. A new label must be valid Unicode and, while the buffer checks
labels, hold no secret (:func:`dyna.redact.check_label`): a redacted label would merge
buckets, so such a label is refused rather than redacted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from dyna.buffer.schema import (CATEGORICAL_FIELDS, REQUIRED_FIELDS, Categorical,
                                check_label_text, check_nfkc, label_text)
from dyna.errors import ConfigError
from dyna.redact import check_label

__all__ = ["LabelDictionary", "check_new_labels", "column_dictionary", "find_tainted",
           "refuse_tainted"]


class LabelDictionary:
    """Label <-> int32 code for one categorical column; code 0 is "" (missing).

    Attributes
    ----------
    labels : list of str
        The label of each code, in code order.
    lookup : dict of str to int
        The code of each label.
    """

    __slots__ = ("labels", "lookup")

    def __init__(self, labels: Iterable[str] = ("",)):
        self.labels: list[str] = list(labels)
        self.lookup: dict[str, int] = {label: code for code, label in enumerate(self.labels)}

    def copy(self) -> LabelDictionary:
        """An independent copy."""
        return LabelDictionary(self.labels)

    def intern(self, label: str) -> int:
        """The code of ``label``, adding it as the next code when it is new."""
        code = self.lookup.get(label)
        if code is None:
            code = len(self.labels)
            self.labels.append(label)
            self.lookup[label] = code
        return code

    def add(self, labels: Iterable[str]) -> None:
        """Add each of ``labels`` that is new as the next code, in order."""
        for label in labels:
            self.intern(label)

    def truncate(self, size: int) -> None:
        """Forget every label whose code is ``size`` or more."""
        for label in self.labels[size:]:
            del self.lookup[label]
        del self.labels[size:]

    def encode(self, name: str, values, n: int) -> tuple[Any, list[str]]:
        """Codes of column ``name``'s values for a batch of ``n`` rows, and the labels that
        would be new; nothing is committed.

        Parameters
        ----------
        values : str, sequence, array or Categorical
            One label for every row, ``n`` labels, or dictionary-encoded codes.

        Returns
        -------
        (code, new) or ((src, mapping), new)
            An int code for every row, or per-row codes: row ``i`` gets ``mapping[src[i]]``
            (int32 ``mapping``; applied and range-checked when the batch is staged). ``new``
            lists the labels that get codes ``len(labels), len(labels) + 1, ...``, in order.

        Raises
        ------
        ConfigError
            A missing label of a required field, a bytes label, or values of the wrong shape.
        """
        if values is None:
            return 0, []
        if isinstance(values, str):
            # a str subclass (e.g. an Enum member) becomes its str()
            label = values if type(values) is str else label_text(values, name)
            if not label and name in REQUIRED_FIELDS:
                raise ConfigError(name, values, "is required and must be non-empty")
            code = self.lookup.get(label)
            return (code, []) if code is not None else (len(self.labels), [label])
        if isinstance(values, Categorical):
            codes = np.asarray(values.codes)
            if codes.shape != (n,) or (n and codes.dtype.kind not in "iu"):
                raise ConfigError(name, codes.shape, f"Categorical codes must be {n} integers")
            # labels already known as plain str need no conversion (the usual batch)
            get = self.lookup.get
            known = [get(v) if type(v) is str else None for v in values.labels]
            if None not in known:
                return (codes, np.array(known, dtype=np.int32)), []
            uniq_labels, inverse = [label_text(v, name) for v in values.labels], codes
        else:
            if isinstance(values, (list, tuple)) and any(
                    not isinstance(v, (int, float)) and type(v) is not str for v in values):
                # numpy would size a str-subclass member by its value but fill in its str()
                values = [label_text(v, name) for v in values]
            arr = np.asarray(values)
            if arr.ndim == 0:
                return self.encode(name, label_text(arr.item(), name), n)
            if arr.shape != (n,):
                raise ConfigError(name, arr.shape, f"must be a scalar or have shape ({n},)")
            if arr.dtype == object:
                arr = np.array([label_text(v, name) for v in arr], dtype=object) if n else arr
            uniq, inverse = np.unique(arr, return_inverse=True)
            uniq_labels = [label_text(v, name) for v in uniq]
        mapping = []
        new: dict[str, int] = {}     # label -> code, in order of first appearance
        for label in uniq_labels:
            code = self.lookup.get(label)
            if code is None:
                code = new.setdefault(label, len(self.labels) + len(new))
            mapping.append(code)
        return (inverse, np.array(mapping, dtype=np.int32)), list(new)


def column_dictionary(dicts: Mapping[str, LabelDictionary], name: str) -> LabelDictionary:
    """The dictionary of categorical column ``name``.

    Raises
    ------
    ConfigError
        ``name`` is not a categorical column.
    """
    try:
        return dicts[name]
    except KeyError:
        raise ConfigError("column", name, "not a categorical column") from None


def check_new_labels(new_labels: Iterable[tuple[str, list[str]]], secrets: bool) -> None:
    """Refuse a new label too long, holding a NUL, UTF-8 cannot encode
    (:func:`dyna.buffer.schema.check_label_text`), a tenant not in Unicode NFKC form
    (:func:`dyna.buffer.schema.check_nfkc`: tenants are matched byte for byte, never folded)
    or, with ``secrets``, holding a secret.

    Raises
    ------
    ConfigError
        Naming the field; the secret is never echoed (:func:`dyna.redact.check_label`).
    """
    for name, labels in new_labels:
        for label in labels:
            check_label_text(name, label)
            if name == "tenant_id":
                check_nfkc(name, label)
            if secrets:
                check_label(name, label)


def find_tainted(dicts: Mapping[str, LabelDictionary]) -> dict[str, set]:
    """The labels of every categorical column in which a secret detector fires
    (:func:`dyna.redact.check_label`): field -> its labels holding a secret (fields without
    one are left out)."""
    out = {}
    for name in CATEGORICAL_FIELDS:
        bad = set()
        for label in dicts[name].labels:
            if not label:
                continue
            try:
                check_label(name, label)
            except ConfigError:
                bad.add(label)
        if bad:
            out[name] = bad
    return out


def refuse_tainted(tainted: Mapping[str, set], columns: Mapping[str, Any]) -> None:
    """Refuse a batch whose ``columns`` use a label of ``tainted`` (field -> labels).

    Raises
    ------
    ConfigError
        Naming the field, never the label.
    """
    for name, bad in tainted.items():
        values = columns.get(name)
        if values is None:
            continue
        if isinstance(values, str):
            present = {values}
        elif isinstance(values, Categorical):
            labels = list(values.labels)
            present = {labels[int(c)] for c in np.unique(np.asarray(values.codes))}
        else:
            present = set(np.asarray(values, dtype=object).ravel().tolist())
        if not present.isdisjoint(bad):
            check_label(name, next(iter(present & bad)))
