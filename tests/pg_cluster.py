"""A throw-away PostgreSQL cluster for the tests and benchmarks (never for real data).

``.ci/run`` starts one cluster for the whole CI run and exports its DSN as
``DYNA_TEST_POSTGRES_DSN``; without that variable the tests' session fixture
(``tests/conftest.py``) calls :func:`start` here, so ``python -m pytest`` alone exercises the
PostgreSQL backend where the binaries are installed. ``initdb`` refuses to run as root, so a
root process runs the server commands as the ``postgres`` user (``runuser -u postgres``).
The cluster listens on 127.0.0.1 and a Unix socket in its own temporary folder only, trusts
local connections (it holds test rows and is removed at the end) and is stopped by
:meth:`Cluster.stop`.

A run that is killed cannot stop its cluster: :func:`start` first reaps the stale ones,
folders ``<tmp>/dyna-pg-*`` whose ``owner`` file (written by this user, naming the creating
process by pid and start time) names a process that is gone; a folder without that file,
of another user, or whose creator still runs is left alone. :func:`running` turns SIGTERM
into KeyboardInterrupt while its cluster is up, so pytest's teardown stops it.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

#: Where Debian's PostgreSQL packages put the server binaries (newest version first).
BIN_GLOB = "/usr/lib/postgresql/*/bin"
ENV_DSN = "DYNA_TEST_POSTGRES_DSN"
PREFIX = "dyna-pg-"
#: The file in a cluster's folder naming the process that created it ("<pid> <start time>").
OWNER = "owner"
#: Why the PostgreSQL tests skip when :func:`running` finds no server.
NO_SERVER = f"no PostgreSQL: {ENV_DSN} is not set and no server binaries under {BIN_GLOB}"


def find_bin() -> Path | None:
    """The newest ``/usr/lib/postgresql/<v>/bin`` holding ``initdb`` and ``pg_ctl``, or None."""
    found = [Path(p) for p in glob.glob(BIN_GLOB)
             if (Path(p) / "initdb").exists() and (Path(p) / "pg_ctl").exists()]
    found.sort(key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    return found[-1] if found else None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _started(pid: int) -> str | None:
    """A process's start time (clock ticks since boot, /proc/<pid>/stat field 22), or None
    when no such process runs (or only its zombie): with the pid it names one process even
    after pid reuse."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]  # a zombie has ended


def _owner_gone(root: Path) -> bool:
    """Whether ``root`` is a cluster folder of this user whose creating process is gone."""
    try:
        if root.is_symlink() or not root.is_dir():
            return False
        owner = root / OWNER
        if owner.is_symlink() or owner.stat().st_uid != os.geteuid():
            return False
        pid, started = owner.read_text().split()
        return _started(int(pid)) != started
    except (OSError, ValueError):
        return False  # no owner file (yet, or an older run's): not ours to judge


def reap_stale(bin_dir: Path, as_user: list[str]) -> list[Path]:
    """Stop (immediate shutdown) and remove the clusters of runs that were killed (see the
    module notes); returns the folders removed."""
    gone = []
    for root in sorted(Path(tempfile.gettempdir()).glob(PREFIX + "*")):
        if not _owner_gone(root):
            continue
        if (root / "data" / "postmaster.pid").exists():
            subprocess.run(as_user + [str(bin_dir / "pg_ctl"), "-D", str(root / "data"), "-m",
                                      "immediate", "-w", "stop"],
                           capture_output=True, timeout=60, check=False)
        shutil.rmtree(root, ignore_errors=True)
        gone.append(root)
    return gone


@dataclass
class Cluster:
    """A running throw-away cluster: its folder, port and superuser DSN."""

    root: Path
    port: int
    bin: Path
    as_user: list[str]
    pid: int = 0  # the process that started it: only that one stops it (not a fork)

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its folder (only in the process that
        started it: a forked child unwinding the same stack leaves it running)."""
        if self.pid and self.pid != os.getpid():
            return
        if (self.root / "data" / "postmaster.pid").exists():  # a server was started
            subprocess.run(self.as_user + [str(self.bin / "pg_ctl"), "-D",
                                           str(self.root / "data"), "-m", "fast", "-w", "stop"],
                           capture_output=True, timeout=60, check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def _runuser() -> str | None:
    """The path of ``runuser``: it lives in /usr/sbin or /sbin, often not on a CI job's
    PATH."""
    return shutil.which("runuser", path=os.pathsep.join(
        [os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))


def start(bin_dir: Path | None = None, owner: int | None = None) -> Cluster:
    """Initialise and start a cluster in a new temporary folder on a free local port.

    ``owner``: the pid of the process whose end makes the cluster stale (default: this
    one; ``.ci/run`` passes its own, as it outlives the ``python`` that starts the cluster).

    Raises
    ------
    RuntimeError
        No binaries, no ``postgres`` user while running as root, or a command failed (its
        output is in the message).
    """
    bin_dir = bin_dir or find_bin()
    if bin_dir is None:
        raise RuntimeError(f"no PostgreSQL server binaries under {BIN_GLOB}")
    as_user: list[str] = []
    if os.geteuid() == 0:
        runuser = _runuser()
        if runuser is None:
            raise RuntimeError("running as root and no runuser to drop to the postgres user")
        if subprocess.run(["id", "-u", "postgres"], capture_output=True).returncode != 0:
            raise RuntimeError("running as root and no 'postgres' user to run the server: "
                               "create it (useradd --system postgres, as .ci/run does) or "
                               f"set {ENV_DSN}")
        as_user = [runuser, "-u", "postgres", "--"]
    reap_stale(bin_dir, as_user)
    root = Path(tempfile.mkdtemp(prefix=PREFIX))
    try:
        owner = os.getpid() if owner is None else owner
        (root / OWNER).write_text(f"{owner} {_started(owner)}")
        if as_user:
            shutil.chown(root, "postgres")
        return _init_and_start(root, bin_dir, as_user)
    except BaseException:  # a failed command or Ctrl-C half-way: nothing left behind
        Cluster(root, 0, bin_dir, as_user).stop()
        raise


def _init_and_start(root: Path, bin_dir: Path, as_user: list[str]) -> Cluster:
    """initdb and pg_ctl start in ``root`` (a port taken between its choice and the
    server's bind is chosen again, up to 3 times)."""
    data = root / "data"
    init = [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E",
            "UTF8", "--locale=C", "--no-sync"]
    _run(as_user + init, root, "initdb")
    for attempt in range(3):
        port = free_port()
        try:
            _run(as_user + [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(root / "log"),
                            "-w", "-t", "60", "-o",
                            f"-c listen_addresses=127.0.0.1 -c port={port} "
                            f"-c unix_socket_directories={root} -c fsync=off "
                            "-c max_connections=200", "start"], root, "pg_ctl start")
            return Cluster(root, port, bin_dir, as_user, os.getpid())
        except RuntimeError as exc:
            if attempt == 2 or "already in use" not in str(exc):
                raise


def _run(argv: list[str], root: Path, name: str) -> None:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if res.returncode != 0:
        log = (root / "log").read_text() if (root / "log").exists() else ""
        raise RuntimeError(f"{name} failed: {res.stdout}{res.stderr}{log}")


@contextlib.contextmanager
def running():
    """A superuser DSN: ``DYNA_TEST_POSTGRES_DSN`` when set, else a cluster started here and
    stopped on exit; None when neither is possible (no binaries), or the reason (a string
    starting "cannot start") when the binaries cannot be run here."""
    dsn = os.environ.get(ENV_DSN)
    if dsn:
        yield dsn
        return
    if find_bin() is None:
        yield None
        return
    try:
        cluster = start()
    except RuntimeError as exc:   # binaries, but no way to run them here: say why
        yield f"cannot start a PostgreSQL cluster: {exc}"
        return
    before = _sigterm_raises() if threading.current_thread() is threading.main_thread() \
        else None
    try:
        yield cluster.dsn
    finally:
        if before is not None:
            signal.signal(signal.SIGTERM, before)
        cluster.stop()


def _sigterm_raises():
    """Make SIGTERM raise KeyboardInterrupt in this process (pytest then tears down and the
    cluster is stopped); a forked child keeps dying of it. Returns the handler it replaced."""
    owner = os.getpid()

    def on_sigterm(signum, frame):
        if os.getpid() != owner:  # a forked child: die of the signal as it would have
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise KeyboardInterrupt("SIGTERM")

    return signal.signal(signal.SIGTERM, on_sigterm)


def main(argv: list[str]) -> int:
    """For ``.ci/run``: ``start OWNER_PID`` prints the folder and the DSN of a new cluster
    (one line, space-separated); ``stop FOLDER`` stops and removes a cluster folder of this
    helper (a folder that is not one is refused)."""
    if len(argv) == 2 and argv[0] == "start":
        cluster = start(owner=int(argv[1]))
        print(cluster.root, cluster.dsn)
        return 0
    if len(argv) == 2 and argv[0] == "stop":
        root = Path(argv[1])
        if (not root.name.startswith(PREFIX) or root.parent != Path(tempfile.gettempdir())
                or not (root / OWNER).is_file()):
            print(f"pg_cluster: {root} is not a cluster folder of this helper",
                  file=sys.stderr)
            return 2
        bin_dir = find_bin()
        as_user = [_runuser() or "runuser", "-u", "postgres", "--"] if os.geteuid() == 0 \
            else []
        Cluster(root, 0, bin_dir or Path("/nonexistent"), as_user).stop()
        return 0
    print("usage: pg_cluster.py start OWNER_PID | stop FOLDER", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
