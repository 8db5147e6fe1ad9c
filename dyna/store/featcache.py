"""A columnar cache of a SQLite store's feature vectors, for queries that load no episode.

Opening a store of millions of episodes and answering one tenant's top-k similarity query
needs only that tenant's feature vectors and the k result rows ("open in a second"). This
module keeps the vectors beside the database, grouped by tenant, so that a
query memory-maps one tenant's rows instead of reading every row into an
:class:`~dyna.buffer.ExperienceBuffer`.

Files (beside ``DB``)
    ``DB.features.json``
        The header: format, ``dim``, the store's ``generation`` and highest id ``max_id``
        and row count when the cache was written, a random ``token`` (also written to the
        database's ``meta`` table as ``features_token``), the names of the two data files,
        ``block_rows`` and per tenant ``[offset, count, max_id, crc32 of its ids, [crc32 of
        each block of block_rows vectors]]`` (blocks of about 16 MB, checked in parallel).
    ``DB.features-<token>.npy`` and ``DB.features-<token>.ids.npy``
        float32 ``(n, d)`` vectors and int64 ``(n,)`` episode ids, tenant by tenant (tenants
        in sorted order), ids ascending within a tenant.

Validity (never a wrong answer)
    A cache describes the rows with ``id <= max_id`` at one ``generation``. Ids only grow and
    every delete or rewrite bumps the generation (:mod:`dyna.store.sqlite`), so while the
    database's generation is the header's, those rows are exactly the cached ones, and the
    rows committed since are the ones with ``id > max_id``: each query reads those above the
    highest id it has scanned (a rowid range) and keeps them with the earlier ones (the live
    view; rewrite the cache when they become many). At open the header is parsed and
    checked (types, sizes, offsets) and its token and generation compared with the
    database; a tenant's section is used only after the checksums of its ids and vectors
    match and sampled rows of it (first, last, 14 between) are the database's rows, ids,
    tenant and vector bytes. Anything else (no cache, another generation, another token, a
    damaged or foreign file) means :func:`open_cache` returns None or a search
    returns None, and the caller reads from SQL. Not detected: a program other than dyna
    rewriting stored vectors in place without bumping the generation.

Writing
    :func:`write_cache` is called only by commands that write (``dyna store cache``,
    :meth:`dyna.experience.ExperienceStore.write_feature_cache`); a read-only open never
    creates or changes a file here. The data files get new names, the header is renamed
    over the old one (atomic), then the token is committed to the database; a reader sees
    the old cache, the new one or none, and the old data files are removed (open maps of
    them stay valid on POSIX).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import secrets
import stat
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from dyna.errors import ConfigError, StoreReadOnlyError
from dyna.fileio.atomic import atomic_target
from dyna.fileio.paths import open_regular
from dyna.index import inverse_norms, search_arrays
from dyna.store.columns import join_vectors

__all__ = ["FeatureCache", "cache_paths", "open_cache", "write_cache"]

FORMAT = "dyna-features/1"
TOKEN_KEY = "features_token"
#: A header larger than this is not one dyna wrote (one short entry per tenant).
MAX_HEADER_BYTES = 64 << 20
_CHUNK = 65536


def cache_paths(db_path) -> tuple[Path, Path]:
    """The header file of a store's cache and the folder it lives in."""
    p = Path(db_path)
    return p.with_name(p.name + ".features.json"), p.parent


_POOL: tuple[int, ThreadPoolExecutor] | None = None   # (pid, pool)


def _crc(arr: np.ndarray) -> int:
    """crc32 of an array's bytes (no copy of a memory map)."""
    return zlib.crc32(arr.reshape(-1).view(np.uint8))


def _block_crcs(X: np.ndarray, block_rows: int) -> list[int]:
    """crc32 of each block of ``block_rows`` rows, computed on every core (zlib releases
    the GIL)."""
    global _POOL
    blocks = [X[a:a + block_rows] for a in range(0, X.shape[0], block_rows)]
    if len(blocks) <= 1:
        return [_crc(b) for b in blocks]
    if _POOL is None or _POOL[0] != os.getpid():   # a forked child has none of its threads
        _POOL = (os.getpid(), ThreadPoolExecutor(max_workers=max(1, min(os.cpu_count() or 1,
                                                                         8)),
                                                 thread_name_prefix="dyna-featcache"))
    return list(_POOL[1].map(_crc, blocks))


def _block_rows(dim: int) -> int:
    return max(1, (16 << 20) // (4 * dim))


def _sql(store, sql: str, args=()) -> list:
    """Run one read on the store's connection with its typed errors."""
    return store.connection.query(sql, args)


def _token(store) -> str | None:
    rows = _sql(store, "SELECT value FROM meta WHERE key = ?", (TOKEN_KEY,))
    return rows[0][0] if rows else None


class FeatureCache:
    """An open, header-checked cache (see the module notes); made by :func:`open_cache`.

    Attributes
    ----------
    generation, max_id, n_rows : int
        The store's state the cache holds.
    sections : dict of str to tuple
        Tenant -> ``(offset, count, max_id, crc_ids, block_crcs)``.
    block_rows : int
        Rows per checksummed block of vectors.
    """

    def __init__(self, header: dict, vectors: np.ndarray, ids: np.ndarray):
        self.generation = header["generation"]
        self.max_id = header["max_id"]
        self.n_rows = header["n_rows"]
        self.sections = {t: tuple(v) for t, v in header["tenants"].items()}
        self.block_rows = header["block_rows"]
        self._vectors, self._ids = vectors, ids
        self._checked: dict[str, tuple | None] = {}   # tenant -> (X, inv, ids) or None
        # tenant -> (highest id scanned, ids, vectors, inverse norms, task types) of the
        # rows committed after the cache (see _tail_rows)
        self._tails: dict[str, tuple] = {}

    def _section(self, store, tenant: str):
        """The tenant's checked ``(vectors, inverse norms, ids)``; None when the section does
        not match the database (checked once per tenant)."""
        if tenant in self._checked:
            return self._checked[tenant]
        off, count, top, crc_i, crc_x = self.sections.get(tenant, (0, 0, -1, 0, []))
        X = self._vectors[off:off + count]
        ids = self._ids[off:off + count]
        ok = (_crc(ids) == crc_i and _block_crcs(X, self.block_rows) == crc_x
              and (count == 0 or (int(ids[-1]) == top and bool(np.all(ids[1:] > ids[:-1]))))
              and self._rows_match(store, tenant, X, ids))
        out = None
        if ok:
            try:
                inv = inverse_norms(X) if count else np.zeros(0, np.float32)
            except ConfigError:     # a stored non-finite vector: the SQL path reports it
                inv = None
            out = None if inv is None else (X, inv, np.ascontiguousarray(ids))
        self._checked[tenant] = out
        return out

    def _rows_match(self, store, tenant: str, X: np.ndarray, ids: np.ndarray) -> bool:
        """Sampled rows of the section (first, last and 14 evenly between) are the
        database's: the same ids of this tenant with the same vector bytes; a tenant without
        a section has no row up to ``max_id`` (one index seek)."""
        if ids.size == 0:
            return not _sql(store, "SELECT 1 FROM episodes WHERE tenant_id = ? AND id <= ? "
                            "LIMIT 1", (tenant, self.max_id))
        pos = np.unique(np.linspace(0, ids.size - 1, 16).round().astype(np.int64))
        want = [int(i) for i in ids[pos]]
        got = _sql(store, f"SELECT id, tenant_id, features FROM episodes WHERE id IN "
                   f"({', '.join('?' * len(want))}) ORDER BY id", want)
        return ([r[0] for r in got] == want and all(r[1] == tenant for r in got)
                and join_vectors([r[2] for r in got], store.dim) == X[pos].tobytes())

    def _tail_rows(self, store, tenant: str, dim: int):
        """The tenant's rows committed after the cache: ``(ids, vectors, inverse norms, task
        types)``, kept between queries and extended by the rows with ids above the highest
        this cache has scanned (a rowid range read, not the tenant index); None when a
        stored vector is not finite (the buffer path reports it)."""
        seen, *held = self._tails.get(tenant, (self.max_id, np.zeros(0, np.int64),
                                               np.zeros((0, dim), np.float32),
                                               np.zeros(0, np.float32),
                                               np.zeros(0, dtype=object)))
        top = _sql(store, "SELECT MAX(id) FROM episodes")[0][0]
        if top is not None and top > seen:
            new = _sql(store, "SELECT id, features, task_type FROM episodes WHERE id > ? AND "
                       "id <= ? AND +tenant_id = ? ORDER BY id", (seen, top, tenant))
            if new:
                NX = np.frombuffer(join_vectors([r[1] for r in new], dim),
                                   np.float32).reshape(-1, dim)
                try:
                    ninv = inverse_norms(NX)
                except ConfigError:
                    return None
                tasks = np.empty(len(new), dtype=object)
                tasks[:] = [r[2] for r in new]
                held = [np.concatenate([held[0], np.array([r[0] for r in new], np.int64)]),
                        np.concatenate([held[1], NX]), np.concatenate([held[2], ninv]),
                        np.concatenate([held[3], tasks])]
            seen = top
        self._tails[tenant] = (seen, *held)
        return tuple(held)

    def search(self, store, tenant: str, task_type: str | None, query: np.ndarray, k: int):
        """Exact cosine top-k of a tenant's rows (optionally one task type), or None.

        Searches the tenant's cached rows and the rows committed after the cache (read from
        SQL) with :func:`dyna.index.search_arrays` and merges by (score, id) descending, the
        order one :class:`~dyna.index.ExactIndex` over all of them gives.

        Parameters
        ----------
        store : dyna.store.sqlite.SQLiteStore
            The database the cache was opened against.
        tenant : str
        task_type : str or None
            Exact task type filter (None: none).
        query : numpy.ndarray
            float32 ``(d,)``, finite, non-zero.
        k : int
            >= 1.

        Returns
        -------
        (ids, scores) or None
            int64 and float32 ``(k',)``, best first; None when the cache does not describe
            the database (another generation, a section that fails its checks, a cached
            row missing from the task type's SQL index).
        """
        with store.snapshot():
            if store.generation() != self.generation:
                return None
            sec = self._section(store, tenant)
            if sec is None:
                return None
            X, inv, ids = sec
            cand = None
            if task_type is not None:
                want = np.array([r[0] for r in _sql(
                    store, "SELECT id FROM episodes WHERE tenant_id = ? AND task_type = ? "
                    "AND id <= ? ORDER BY id", (tenant, task_type, self.max_id))], np.int64)
                cand = np.searchsorted(ids, want)
                if cand.size and (cand[-1] >= ids.size or not np.array_equal(ids[cand], want)):
                    return None
            tail = self._tail_rows(store, tenant, X.shape[1])
            if tail is None:
                return None
        r1, s1 = search_arrays(X, inv, ids, query, k, candidates=cand)
        out_ids, out_s = ids[r1], s1
        nid, NX, ninv, ntask = tail
        if task_type is not None:
            keep = np.flatnonzero(ntask == task_type)
            nid, NX, ninv = nid[keep], NX[keep], ninv[keep]
        if nid.size:
            r2, s2 = search_arrays(NX, ninv, nid, query, k)
            out_ids = np.concatenate([out_ids, nid[r2]])
            out_s = np.concatenate([out_s, s2])
            order = np.lexsort((-out_ids, -out_s))[:k]
            out_ids, out_s = out_ids[order], out_s[order]
        return out_ids, out_s


def _check_header(h, dim: int) -> dict | None:
    """The header if every field has the type and range :func:`write_cache` gives it."""
    def nat(v, lo=0):
        return type(v) is int and v >= lo

    if not (isinstance(h, dict) and h.get("format") == FORMAT and h.get("dim") == dim
            and nat(h.get("generation")) and nat(h.get("max_id"), -1)
            and nat(h.get("n_rows")) and isinstance(h.get("token"), str)
            and h.get("block_rows") == _block_rows(dim)
            and len(h["token"]) == 32 and all(c in "0123456789abcdef" for c in h["token"])
            and isinstance(h.get("tenants"), dict)):
        return None
    off = 0
    for t in sorted(h["tenants"]):
        v = h["tenants"][t]
        if not (isinstance(t, str) and t and isinstance(v, list) and len(v) == 5
                and all(nat(x) for x in v[:2]) and nat(v[2], -1) and nat(v[3])
                and v[0] == off and v[1] >= 1 and v[2] <= h["max_id"]
                and isinstance(v[4], list) and all(nat(x) for x in v[4])
                and len(v[4]) == -(-v[1] // h["block_rows"])):
            return None
        off += v[1]
    return h if off == h["n_rows"] else None


def _map_npy(path: Path) -> np.memmap:
    """A read-only memory map of a C-order .npy file of plain numbers (version 1 or 2
    header), opened as a regular file; ValueError or OSError for anything else."""
    with open_regular(path) as fh:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
        else:
            raise ValueError(f"{path}: .npy version {version}")
        if fortran or dtype.hasobject or dtype.kind not in "fi":
            raise ValueError(f"{path}: not a C-order array of numbers")
        return np.memmap(fh, dtype=dtype, mode="r", shape=shape, offset=fh.tell())


def open_cache(store) -> FeatureCache | None:
    """The store's cache when it exists and its header matches the database, else None.

    Reads the header and memory-maps the two data files (read-only); writes nothing.
    """
    if not getattr(store, "persistent", False):
        return None
    head, folder = cache_paths(store.path)
    name = Path(store.path).name
    try:
        with open_regular(head) as fh:
            raw = fh.read(MAX_HEADER_BYTES + 1)
        if len(raw) > MAX_HEADER_BYTES:
            return None
        h = _check_header(json.loads(raw), store.dim)
        if h is None:
            return None
        X = _map_npy(folder / f"{name}.features-{h['token']}.npy")
        ids = _map_npy(folder / f"{name}.features-{h['token']}.ids.npy")
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if (X.dtype != np.float32 or X.shape != (h["n_rows"], store.dim) or ids.dtype != np.int64
            or ids.shape != (h["n_rows"],) or not X.flags.c_contiguous):
        return None
    with store.snapshot():
        if _token(store) != h["token"] or store.generation() != h["generation"]:
            return None
    return FeatureCache(h, X, ids)


def _created(path: Path, mode: int, dtype, shape) -> np.memmap:
    """A new .npy file of this shape (refused if the name exists), with the store file's
    permission bits before any data is written, mapped for writing."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), mode)
    os.fchmod(fd, mode)       # not narrowed by the umask: readable by whoever reads the store
    os.close(fd)
    return np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)


def _ids_by_tenant(store) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Every stored id ordered by tenant (tenants sorted), then id: ``(ids, tenant ranks,
    tenants)``, int64 ``(n,)`` twice and the tenant names in first-seen order.

    Raises
    ------
    ConfigError
        A stored tenant id that is not text.
    """
    codes: dict[str, int] = {}
    c_parts, i_parts = [], []
    for chunk in store.connection.scan("SELECT tenant_id, id FROM episodes", size=_CHUNK):
        c_parts.append(np.array([codes.setdefault(t, len(codes)) for t, _ in chunk], np.int64))
        i_parts.append(np.array([i for _, i in chunk], np.int64))
    labels = list(codes)
    if any(type(t) is not str for t in labels):
        raise ConfigError("tenant_id", next(t for t in labels if type(t) is not str),
                          "a stored tenant id that is not text")
    rank = np.empty(len(labels), np.int64)
    rank[np.argsort(np.array(labels, dtype=object))] = np.arange(len(labels))
    t_rank = rank[np.concatenate(c_parts)] if c_parts else np.zeros(0, np.int64)
    all_ids = np.concatenate(i_parts) if i_parts else np.zeros(0, np.int64)
    order = np.lexsort((all_ids, t_rank))
    return all_ids[order], t_rank[order], labels


def _fill_vectors(store, X: np.ndarray, c_ids: np.ndarray) -> None:
    """Write every stored vector into its row of ``X`` (rows in the order of ``c_ids``),
    reading the table once in id order."""
    sorted_ids = np.sort(c_ids)
    where = np.empty(c_ids.size, np.int64)
    where[np.searchsorted(sorted_ids, c_ids)] = np.arange(c_ids.size)   # id rank -> position
    done = 0
    for chunk in store.connection.scan("SELECT id, features FROM episodes ORDER BY id",
                                       size=_CHUNK):
        raw = join_vectors([r[1] for r in chunk], store.dim)
        X[where[done:done + len(chunk)]] = np.frombuffer(raw, np.float32).reshape(-1, store.dim)
        done += len(chunk)


def _sections(c_ids: np.ndarray, c_rank: np.ndarray, labels: list[str], X: np.ndarray,
              dim: int) -> dict:
    """The header's tenant sections: tenant -> ``[offset, count, max_id, crc32 of its ids,
    [crc32 of each block of vectors]]``."""
    sections = {}
    n = c_ids.size
    by_rank = sorted(labels)
    firsts = np.flatnonzero(np.r_[True, c_rank[1:] != c_rank[:-1]]) if n else []
    bounds = [int(a) for a in firsts] + [n]
    for a, b in itertools.pairwise(bounds):
        sections[by_rank[int(c_rank[a])]] = [a, b - a, int(c_ids[b - 1]), _crc(c_ids[a:b]),
                                             _block_crcs(X[a:b], _block_rows(dim))]
    return sections


def _write_data(store, paths: list[Path], mode: int) -> tuple[dict, int, int, int]:
    """Write the two data files from one consistent read of the store: returns the tenant
    sections, the generation read, the highest id (-1 without rows) and the row count."""
    with store.snapshot():
        gen = store.generation()
        c_ids, c_rank, labels = _ids_by_tenant(store)
        X = _created(paths[0], mode, np.float32, (c_ids.size, store.dim))
        _fill_vectors(store, X, c_ids)
    top = int(c_ids.max()) if c_ids.size else -1
    X.flush()
    ids_file = _created(paths[1], mode, np.int64, (c_ids.size,))
    ids_file[:] = c_ids
    ids_file.flush()
    sections = _sections(c_ids, c_rank, labels, X, store.dim)
    del X, ids_file
    for p in paths:
        with open(p, "rb+") as fh:
            os.fsync(fh.fileno())
    return sections, gen, top, int(c_ids.size)


def write_cache(store) -> dict:
    """Write (or replace) the store's cache from one consistent read of the database.

    Parameters
    ----------
    store : dyna.store.sqlite.SQLiteStore
        A writable, file-backed store.

    Returns
    -------
    dict
        ``path`` (the header), ``n_rows``, ``n_tenants``, ``generation``, ``max_id``.

    Raises
    ------
    StoreReadOnlyError
        The store was opened read-only (nothing is written).
    ConfigError
        An in-memory store.
    OSError
        The folder is not writable; the old cache (if any) is left as it was.
    """
    if store.read_only:
        raise StoreReadOnlyError(f"DB={store.path}: opened read-only; no feature cache is "
                                 "written")
    if not store.persistent:
        raise ConfigError("db_path", ":memory:", "a feature cache needs a store file")

    head, folder = cache_paths(store.path)
    name = Path(store.path).name
    token = secrets.token_hex(16)
    paths = [folder / f"{name}.features-{token}.npy", folder / f"{name}.features-{token}.ids.npy"]
    mode = stat.S_IMODE(os.stat(store.path).st_mode) & 0o666   # the store's own
    try:
        sections, gen, top, n = _write_data(store, paths, mode)
        header = {"format": FORMAT, "dim": store.dim, "generation": gen, "max_id": top,
                  "n_rows": n, "token": token, "block_rows": _block_rows(store.dim),
                  "tenants": sections}
        with atomic_target(head) as tmp, open(tmp, "w", encoding="utf-8") as fh:
            os.chmod(tmp, mode)
            json.dump(header, fh, separators=(",", ":"))
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        for p in paths:
            with contextlib.suppress(OSError):
                p.unlink()
        raise
    store.connection.write(lambda conn: conn.execute(
        "INSERT OR REPLACE INTO meta VALUES (?, ?)", (TOKEN_KEY, token)))
    prefix = f"{name}.features-"
    for entry in os.listdir(folder):       # earlier caches' data files
        if entry.startswith(prefix) and entry.endswith(".npy") and folder / entry not in paths:
            with contextlib.suppress(OSError):
                (folder / entry).unlink()
    return {"path": str(head), "n_rows": n, "n_tenants": len(sections), "generation": gen,
            "max_id": top}
