"""Similarity index over experience features: exact cosine top-k, and an optional ANN backend.

:class:`ExactIndex` answers cosine top-k queries exactly. It keeps, for every row, the raw
float32 vector, its inverse L2 norm (0 for a zero vector) and a recency stamp, and scores a
query ``q`` as ``(x . q_hat) * inv_norm(x)``:

* one query is one BLAS ``sgemv`` over the stored matrix (into one float32 score per row)
  followed by a single compiled pass that scales by the inverse norms and keeps a size-k
  heap, testing chunks of scores against the heap's threshold vectorised (no sort);
* a batch of queries is a loop over blocks of rows, each one ``sgemm`` of the block against
  all queries and a compiled per-query heap update run in parallel, so the memory used is one
  block of scores, never the full ``q x N`` matrix;
* a filtered search (``candidates``) touches only the candidate rows: a contiguous range is a
  zero-copy slice, anything else is gathered row by row inside the compiled kernel.

Ordering is total and deterministic: score descending, ties broken by recency (larger stamp
first). Zero vectors score exactly 0 (never NaN); a zero query raises :class:`ConfigError`
(a ``ValueError``) because it has no direction. Asking for more neighbours than there are
candidates returns all of them.

:class:`AnnIndex` offers the same ``search`` signature over faiss HNSW (``pip install
"dyna[ann]"``), and :func:`recall_at_k` measures it against :class:`ExactIndex`.

:class:`ColumnStore` is the storage primitive both this index and
:class:`dyna.buffer.ExperienceBuffer` use: equal-length numpy columns that grow by amortised
doubling (never ``np.resize``), drop a prefix in O(1), compact in place, or act as a ring.

Modules: :mod:`~dyna.index.columns` (the column store), :mod:`~dyna.index.norms` (inverse
norms), :mod:`~dyna.index.kernels` (the compiled top-k heaps), :mod:`~dyna.index.search`
(queries, candidates, threads, the search itself), :mod:`~dyna.index.exact` and
:mod:`~dyna.index.ann` (the two indexes).
"""

from dyna.index.ann import AnnIndex, recall_at_k
from dyna.index.columns import ColumnStore
from dyna.index.exact import ExactIndex
from dyna.index.norms import copy_with_inverse_norms, inverse_norms
from dyna.index.search import search_arrays

__all__ = ["AnnIndex", "ColumnStore", "ExactIndex", "copy_with_inverse_norms", "inverse_norms",
           "recall_at_k", "search_arrays"]
