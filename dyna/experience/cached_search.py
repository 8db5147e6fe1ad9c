"""Top-k similarity from a SQLite store's feature cache, without loading its episodes.

A store opened without reading its episodes (the default) answers
:meth:`dyna.experience.ExperienceStore.query_similar` from the feature cache beside a SQLite
file (:mod:`dyna.store.featcache`) while the buffer is not loaded: it memory-maps the
tenant's vectors, searches them and reads the k episodes by id, in one read transaction,
with the answer a loaded store gives. Without a valid cache (none, another generation, a
damaged file) the caller loads the buffer and searches it.
"""

from __future__ import annotations

import numpy as np

from dyna.buffer import CATEGORICAL_FIELDS, DICT_FIELDS
from dyna.experience.episodes import RECORD_SCHEMA
from dyna.experience.stored import redact_texts, stored_json
from dyna.experience.view import LiveView
from dyna.store import featcache
from dyna.store.featcache import FeatureCache
from dyna.store.sqlite import SQLiteStore

__all__ = ["CachedSearch"]


class CachedSearch:
    """The feature cache of a store's SQLite file, opened when first used and opened again
    when its header file changes (a new inode, time or size).

    Attributes
    ----------
    cache : FeatureCache or None
        The cache as last opened (None: none, not looked yet, or found stale).
    """

    def __init__(self, db):
        self.db = db
        self.cache: FeatureCache | None = None
        self._key: tuple | None = None   # the header file's (inode, mtime, size) when opened

    def forget(self) -> None:
        """Drop the opened cache (it is looked for again on the next search)."""
        self.cache, self._key = None, None

    def _current(self) -> FeatureCache | None:
        """The file's feature cache, (re)opened when its header file changed; None when
        there is none or it does not match the file."""
        head, _ = featcache.cache_paths(self.db.path)
        try:
            st = head.stat()
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            key = None
        if key != self._key:
            self.cache = None if key is None else featcache.open_cache(self.db)
            self._key = key
        return self.cache

    def search(self, view: LiveView, tenant_id: str, task_type, q: np.ndarray, k: int):
        """``(scores, episodes)`` of a top-k search from the feature cache, or None.

        None when the buffer is loaded (it is up to date and faster) or an operation is
        running, the store is not a SQLite file, there is no valid cache, or the cache does
        not describe the file any more. Same results as the buffer's search; the search and
        the read of the k episodes see one committed state (one read transaction).
        """
        if (view.loaded or view.depth or view.unflushed or not isinstance(self.db, SQLiteStore)
                or not self.db.persistent or task_type == ""):
            return None
        if task_type is not None and not isinstance(task_type, str):
            return None   # the buffer's search reports it
        cache = self._current()
        if cache is None:
            return None
        with self.db.snapshot():
            hits = cache.search(self.db, tenant_id, task_type, q, k)
            if hits is None:
                self.forget()   # stale: look again next time
                return None
            return hits[1], self._episodes_by_id(hits[0], view)

    def _episodes_by_id(self, ids: np.ndarray, view: LiveView) -> list[dict]:
        """The episodes with these ids read from the file, as
        :meth:`~dyna.buffer.ExperienceBuffer.rows` gives them after a load (labels "" ->
        None, stored JSON redacted again by the store's keys as a load does)."""
        if not len(ids):
            return []
        names = [n for n, kind in RECORD_SCHEMA if kind != "vector"]
        cols = self.db.read({"id": [int(i) for i in ids]}, columns=names)
        at = {int(i): j for j, i in enumerate(cols["id"].tolist())}
        pick = np.array([at[int(i)] for i in ids], dtype=np.int64)
        out: dict[str, list] = {"id": cols["id"][pick].tolist()}
        for name in CATEGORICAL_FIELDS:
            out[name] = [v if v else None for v in cols[name][pick].tolist()]
        out["reward"] = cols["reward"][pick].tolist()
        out["timestamp"] = cols["timestamp"][pick].tolist()
        where = view.where()
        for name in DICT_FIELDS:
            texts = redact_texts(cols[name][pick], view.redact_keys, where)
            out[name] = [None if t is None else stored_json(t, name, where) for t in texts]
        keys = list(out)
        return [dict(zip(keys, vals)) for vals in zip(*out.values())]
