"""Temporary files and folders that name their writer, so orphans are removed safely.

A file written atomically (an export, a recovered store, a skill file) goes first to a
temporary sibling, and an experiment's output folder is built in a temporary sibling folder;
both are renamed into place at the end. A writer killed before the rename (SIGKILL, a power
cut) leaves its temporary behind. Its name records who made it::

    .<name>.<pid>-<start>-<host>.<random><suffix>     a file (suffix ".tmp", ".recover-tmp")
    .<name>.tmp-<pid>-<start>-<host>-<random>         a folder (``dyna run``)

where ``pid`` is the writer's process id, ``start`` its start time (field 22 of
``/proc/<pid>/stat``, clock ticks after boot), which tells a live writer from a new process
that was given the same id later, and ``host`` 8 hex digits naming where process ids mean
something: a hash of the kernel's boot id, the pid namespace and the host name
(:func:`host_tag`). A temporary made on another host, in another container (pid namespace)
or before a reboot is never removed: its pid says nothing here. The name is chosen by the
same call that creates the file or folder, so no temporary ever exists without its owner.

A temporary's name must fit where its target's fits (255 bytes on most file systems): when
``<name>`` plus the longest owner, random part, suffix and SQLite companion (:data:`SPARE`
bytes) would not, ``<name>`` is replaced by ``~`` and 16 hex digits of its BLAKE2b hash
(:func:`temp_key`), so a target whose name is at the limit is still written, and its
orphans are still found by the same name.

The next write of the same target (:func:`clean_orphans`, called by
:func:`dyna.fileio.atomic.atomic_target` and by the experiment runner) removes the
temporaries of that target whose owner is no live process: no process with that id, or one
with another start time (the id was reused). A temporary of a live process (another run
writing the same target) is never touched, nor one whose owner cannot be read (an older
version's name without an owner, a foreign file), nor a symlink. Without ``/proc`` (not
Linux) the start time is recorded as 0 and only the process id is compared.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

__all__ = ["NAME_MAX", "SPARE", "clean_orphans", "host_tag", "is_live", "make_temp_dir",
           "make_temp_file", "owner", "process_start_time", "temp_key"]

#: Longest file name (bytes) assumed of a file system (Linux's ``NAME_MAX``).
NAME_MAX = 255
#: Bytes a temporary's name adds to its key, at most: the dots, the owner (a pid of 7
#: digits, a start time of 20, 8 hex digits of host), the random part (8), the longest
#: suffix (``.recover-tmp``) and SQLite companion (``-journal``).
SPARE = 2 + 7 + 1 + 20 + 1 + 8 + 1 + 8 + 12 + 8

_OWN: dict[int, tuple[int, int]] = {}  # pid -> (pid, start) of this process (per fork)
_HOST: dict[int, str] = {}              # pid -> host_tag() (per fork: a namespace may differ)


def _host() -> str:
    pid = os.getpid()
    tag = _HOST.get(pid)
    if tag is None:
        tag = _HOST[pid] = host_tag()
    return tag


def process_start_time(pid: int) -> int | None:
    """Start time of process ``pid`` in clock ticks after boot (``/proc/<pid>/stat`` field
    22), 0 when ``/proc`` is not available, None when there is no such process."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as fh:
            stat = fh.read()
    except FileNotFoundError:
        return None if os.path.isdir("/proc/self") else _pid_exists(pid)
    except OSError:
        return _pid_exists(pid)
    # field 2 (the command) is in parentheses and may hold spaces or ')': split after the
    # last ')'; the fields after it start at field 3, so field 22 is index 19
    try:
        return int(stat[stat.rindex(b")") + 2:].split()[19])
    except (ValueError, IndexError):  # unreadable: treat the process as live
        return 0


def _pid_exists(pid: int) -> int | None:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return None
    except OSError:  # exists, but belongs to someone else
        return 0
    return 0


def host_tag() -> str:
    """8 hex digits naming this boot, pid namespace and host (BLAKE2b of
    ``/proc/sys/kernel/random/boot_id``, the inode of ``/proc/self/ns/pid`` and the host
    name; what is unreadable counts as empty): two processes with the same tag share one
    space of process ids."""
    import hashlib
    import socket

    parts = []
    try:
        parts.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
    except OSError:
        parts.append("")
    try:
        parts.append(str(os.stat("/proc/self/ns/pid").st_ino))
    except OSError:
        parts.append("")
    parts.append(socket.gethostname())
    return hashlib.blake2b("\0".join(parts).encode(), digest_size=4).hexdigest()


def owner() -> tuple[int, int]:
    """``(pid, start time)`` of this process (see :func:`process_start_time`)."""
    pid = os.getpid()
    own = _OWN.get(pid)
    if own is None:
        own = _OWN[pid] = (pid, process_start_time(pid) or 0)
    return own


def is_live(pid: int, start: int) -> bool:
    """True when process ``pid`` runs and started at ``start`` (0: start unknown, the id
    alone decides)."""
    now = process_start_time(pid)
    return now is not None and (start == 0 or now == 0 or now == start)


def temp_key(name: str) -> str:
    """What the temporaries of a target named ``name`` are named after: ``name`` itself
    when a temporary's name then fits in :data:`NAME_MAX` bytes (``name`` of at most
    ``NAME_MAX - SPARE`` bytes), else ``~`` and 16 hex digits of its BLAKE2b hash."""
    raw = os.fsencode(name)
    if len(raw) + SPARE <= NAME_MAX:
        return name
    import hashlib

    return "~" + hashlib.blake2b(raw, digest_size=8).hexdigest()


def _pattern(name: str, folder: bool, suffix: str) -> re.Pattern:
    if folder:
        return re.compile(re.escape(f".{name}.tmp-") + r"(\d+)-(\d+)-([0-9a-f]{8})-"
                          r"[A-Za-z0-9_]+\Z")
    return re.compile(re.escape(f".{name}.") + r"(\d+)-(\d+)-([0-9a-f]{8})\.[A-Za-z0-9_]+"
                      + re.escape(suffix) + r"(?:-wal|-shm|-journal)?\Z")


def make_temp_file(path, suffix: str = ".tmp") -> str:
    """Create an empty temporary file beside ``path`` named with this process as owner;
    return its path (the caller renames it onto ``path`` or removes it)."""
    path = Path(path)
    pid, start = owner()
    fd, tmp = tempfile.mkstemp(prefix=f".{temp_key(path.name)}.{pid}-{start}-{_host()}.",
                               suffix=suffix, dir=path.parent)
    os.close(fd)
    return tmp


def make_temp_dir(path) -> Path:
    """Create a temporary folder (mode 0700) beside ``path`` named with this process as
    owner; return it."""
    path = Path(path)
    pid, start = owner()
    return Path(tempfile.mkdtemp(prefix=f".{temp_key(path.name)}.tmp-{pid}-{start}-{_host()}-",
                                 dir=path.parent))


def clean_orphans(path, *, folder: bool = False, suffix: str = ".tmp") -> list[str]:
    """Remove the temporaries of target ``path`` left by writers that have ended.

    Parameters
    ----------
    path : str or Path
        The target (the file or folder the temporaries were to be renamed to).
    folder : bool
        Look for temporary folders (:func:`make_temp_dir`) instead of files.
    suffix : str
        The files' suffix (:func:`make_temp_file`); their SQLite ``-wal``, ``-shm`` and
        ``-journal`` companions go with them.

    Returns
    -------
    list of str
        Names removed (in the target's folder), sorted. Best effort: an entry that cannot
        be removed (gone meanwhile, no permission) is left and not listed; nothing raises.
    """
    path = Path(path)
    key = temp_key(path.name)
    pat = _pattern(key, folder, suffix)
    head = f".{key}."
    here = _host()
    removed = []
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(head):
            continue
        m = pat.match(entry.name)
        if m is None or m.group(3) != here or is_live(int(m.group(1)), int(m.group(2))):
            continue   # not ours to judge (another host, container or boot), or alive
        try:
            if entry.is_symlink():
                continue
            if folder and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            elif not folder and entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
            else:
                continue
        except OSError:
            continue
        removed.append(entry.name)
    return sorted(removed)
