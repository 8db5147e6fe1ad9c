"""Where numba caches dyna's compiled kernels: one directory per version of their sources.

numba's on-disk cache (``@njit(cache=True)``) checks only the file that defines a kernel
(its modification time and size). A kernel that calls a compiled helper in another module
(``dyna/planning.py`` calls ``dyna/model.py``), or reads a constant imported from one, keeps
loading the old machine code after that other module is edited. So, unless the user chose
``NUMBA_CACHE_DIR``, :func:`configure` points numba at

    ``$XDG_CACHE_HOME/dyna/numba/<key>`` (``~/.cache/dyna/numba/<key>`` by default)

where ``<key>`` (:func:`kernel_sources_key`) hashes the contents of every module that
imports numba and every module of the package those import, directly or not: any edit that
can change a compiled kernel gives a fresh, empty cache; editing anything else (the
experiment layer, loops, stores) keeps the compiled kernels. numba reads ``NUMBA_CACHE_DIR``
when it is imported (``numba.core.config``), so :mod:`dyna` calls :func:`configure` in its
``__init__`` before any of its modules imports numba; if numba was imported earlier, its
configuration is reloaded.

Nothing is written next to the sources, so an installation in a read-only location works.
If the cache home cannot be written, a per-user directory under the system temporary
directory is used. :func:`configure` creates nothing: numba makes the directory when a
cached kernel is first defined (a module with ``@njit(cache=True)`` is imported), so a
command that imports no kernel module (``dyna --help``, the skills and memory commands)
leaves no trace. Old directories do not pile up: when a new one is created, every other
one that is not among the ``keep`` most recently used and has not been used for
``max_idle_s`` seconds is removed (a process still running an old source version keeps its
directory meanwhile; numba fails when asked to save into a directory that has vanished).

Cost at ``import dyna``: reading ~1.7 MB of sources (90 modules), finding the few that
import numba (a substring test before the regex) and hashing the ~15 modules kernels depend
on, about 5-10 ms on the reference machine (2 cores; ``kernel_sources_key`` on this
repository, warm file cache; the regex run over every source would take ~30 ms), plus
~2 ms to import hashlib.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import time
from collections.abc import Sequence

__all__ = ["KEEP", "MAX_IDLE_S", "cache_home", "compiled_kernels", "configure",
           "kernel_sources_key"]

#: Directories kept whatever their age (the most recently used ones).
KEEP = 3
#: Seconds a directory beyond the ``KEEP`` newest must have gone unused before removal.
MAX_IDLE_S = 24 * 3600.0

# Fallback home under the system temporary directory when the cache home is not writable.
_FALLBACK_NAME = f"dyna-numba-{os.getuid() if hasattr(os, 'getuid') else 'user'}"

_NUMBA_IMPORT = re.compile(rb"^[ \t]*(?:import|from)[ \t]+numba\b", re.M)
_IMPORT = re.compile(
    rb"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)|import[ \t]+([^\n]+))",
    re.M)


def _read_modules(roots: Sequence[str]) -> dict[str, tuple[str, bytes]]:
    """Module name -> (path relative to the roots' parent, source bytes) for every .py file."""
    modules = {}
    for root in roots:
        root = os.path.abspath(root)
        parent, top = os.path.split(root)
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            rel_dir = os.path.relpath(dirpath, parent)
            package = rel_dir.replace(os.sep, ".")
            for name in sorted(filenames):
                if not name.endswith(".py"):
                    continue
                with open(os.path.join(dirpath, name), "rb") as fh:
                    source = fh.read()
                module = package if name == "__init__.py" else f"{package}.{name[:-3]}"
                modules[module] = (os.path.join(rel_dir, name), source)
    return modules


def _imported(module: str, source: bytes, modules: dict) -> set[str]:
    """Known modules that ``module``'s ``source`` imports (and the packages on their way)."""
    package = module if modules[module][0].endswith("__init__.py") else module.rpartition(".")[0]
    found = set()
    for m in _IMPORT.finditer(source):
        if m.group(1) is not None:
            base = m.group(1).decode()
            if base.startswith("."):          # relative: one dot is the current package
                up = len(base) - len(base.lstrip("."))
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (up - 1)] if up > 1 else anchor
                base = ".".join(anchor + ([base.lstrip(".")] if base.lstrip(".") else []))
            names = m.group(2).decode().strip().strip("()").replace("\\", " ").split(",")
            candidates = [base] + [f"{base}.{n.split()[0]}" for n in names if n.split()]
        else:
            candidates = [n.split()[0] for n in m.group(3).decode().split(",") if n.split()]
        for name in candidates:
            parts = name.split(".")
            for i in range(1, len(parts) + 1):
                if ".".join(parts[:i]) in modules:
                    found.add(".".join(parts[:i]))
    return found


def kernel_sources_key(roots: Sequence[str | os.PathLike]) -> str:
    """Short hash of the sources that compiled kernels in the packages ``roots`` depend on.

    Parameters
    ----------
    roots : sequence of path-like
        Package directories (``.../dyna``, ``.../envs``); their ``.py`` files are read.

    Returns
    -------
    str
        16 hex digits (BLAKE2b, 8 bytes) over the relative path and contents of every module
        that imports numba and of every module of ``roots`` they import, transitively;
        ``""`` when no module imports numba (nothing to cache).

    Raises
    ------
    OSError
        A source file cannot be read.
    """
    modules = _read_modules([os.fspath(r) for r in roots])
    # the substring test first: a regex scan of every line start of ~1.7 MB of sources took
    # ~25 ms at each start, and most modules never mention numba
    todo = [name for name, (_, src) in modules.items()
            if b"numba" in src and _NUMBA_IMPORT.search(src)]
    if not todo:
        return ""
    closure = set(todo)
    while todo:
        name = todo.pop()
        for dep in _imported(name, modules[name][1], modules) - closure:
            closure.add(dep)
            todo.append(dep)
    digest = hashlib.blake2b(digest_size=8)
    for name in sorted(closure):
        rel, src = modules[name]
        digest.update(rel.encode() + b"\0" + len(src).to_bytes(8, "little") + src)
    return digest.hexdigest()


def cache_home(package: str = "dyna") -> str:
    """``$XDG_CACHE_HOME/<package>/numba`` (default ``~/.cache/<package>/numba``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, package, "numba")


def compiled_kernels(directory: str | None = None, module: str | None = None) -> int | None:
    """How many compiled kernels numba's on-disk cache holds: its index files (``*.nbi``,
    one per cached kernel) anywhere under ``directory``, or only those of one module.

    numba names an index file ``<module file stem>.<function>-<line>.pyXY.nbi`` inside a
    folder ``<the module's folder name>_<hash of its path>``, so the kernels of
    ``dyna.agents.tabular`` are the ``tabular.*.nbi`` files of the ``agents_*`` folders.

    Parameters
    ----------
    directory : str, optional
        Default: ``NUMBA_CACHE_DIR`` (what :func:`configure` set).
    module : str, optional
        A dotted module name (``"dyna.agents.tabular"``): count its kernels only. Another
        module's kernels in the cache (the index's, the buffer's) say nothing about whether
        this one's are compiled.

    Returns
    -------
    int or None
        0 before the first run of a version of the kernels' sources (the compile that run
        does is the one-off one; ``dyna run`` says so first); None when no directory is
        known (numba caches next to the sources then).
    """
    directory = directory or os.environ.get("NUMBA_CACHE_DIR")
    if not directory:
        return None
    if not os.path.isdir(directory):
        return 0
    folder, stem = "", ""
    if module:
        package, _, name = module.rpartition(".")
        folder, stem = package.rpartition(".")[2] + "_", name + "."
    return sum(name.endswith(".nbi") and name.startswith(stem)
               for dirpath, _dirnames, filenames in os.walk(directory)
               if os.path.basename(dirpath).startswith(folder)
               for name in filenames)


def _usable_dir(path: str) -> bool:
    """Whether ``path`` is a writable directory or can be made one: its nearest existing
    ancestor is a writable directory. Nothing is created here: numba makes the directory
    (and its parents) when a cached kernel is first defined."""
    p = path
    while not os.path.lexists(p):
        parent = os.path.dirname(p)
        if parent == p:
            return False
        p = parent
    return os.path.isdir(p) and os.access(p, os.W_OK | os.X_OK)


def _prune(home: str, current: str, keep: int, max_idle_s: float) -> list[str]:
    """Remove old key directories under ``home``; returns the removed paths."""
    import shutil

    now = time.time()
    entries = []
    try:
        with os.scandir(home) as it:
            for entry in it:
                if entry.is_dir(follow_symlinks=False) and entry.path != current:
                    entries.append((entry.stat(follow_symlinks=False).st_mtime, entry.path))
    except OSError:
        return []
    entries.sort(reverse=True)
    removed = []
    for mtime, path in entries[max(0, keep - 1):]:   # the current one counts as kept
        if now - mtime > max_idle_s:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def configure(roots: Sequence[str | os.PathLike], home: str | None = None, *,
              keep: int = KEEP, max_idle_s: float = MAX_IDLE_S) -> str | None:
    """Point numba's cache at a directory keyed on the kernels' sources, unless the user chose.

    Parameters
    ----------
    roots : sequence of path-like
        Package directories whose sources key the cache (see :func:`kernel_sources_key`).
    home : str, optional
        Parent of the key directories; default :func:`cache_home`. A ``NUMBA_CACHE_DIR``
        that lies directly under ``home`` is taken as set by an earlier :func:`configure`
        (a parent process, another checkout) and replaced; any other value is the user's
        and is left alone.
    keep : int
        Most recently used key directories never removed (>= 1).
    max_idle_s : float
        Other key directories are removed once unused for this many seconds.

    Returns
    -------
    str or None
        The cache directory now in ``NUMBA_CACHE_DIR``, or None when left alone (set by the
        user, no kernels found, sources unreadable, no writable directory).

    Notes
    -----
    Never raises: a failure leaves numba's default behaviour (cache next to the sources).
    """
    home = os.path.abspath(home or cache_home())
    current = os.environ.get("NUMBA_CACHE_DIR")
    if current:
        parent = os.path.dirname(os.path.abspath(current))
        if parent != home and os.path.basename(parent) != _FALLBACK_NAME:
            return None
    try:
        key = kernel_sources_key(roots)
    except OSError:
        return None
    if not key:
        return None
    path = os.path.join(home, key)
    fresh = not os.path.isdir(path)
    if not _usable_dir(path):
        import tempfile

        home = os.path.join(tempfile.gettempdir(), _FALLBACK_NAME)
        path = os.path.join(home, key)
        fresh = not os.path.isdir(path)
        if not _usable_dir(path):
            return None
    try:
        os.utime(path)                        # last use, for pruning
    except OSError:
        pass
    if fresh:
        _prune(home, path, keep, max_idle_s)
    os.environ["NUMBA_CACHE_DIR"] = path
    config = sys.modules.get("numba.core.config")
    if config is not None:                    # numba was imported before dyna
        config.reload_config()
    return path
