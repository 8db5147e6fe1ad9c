"""A throw-away PostgreSQL cluster for the tests and benchmarks (never for real data).

``.ci/run`` starts one cluster for the whole CI run and exports its DSN as
``DYNA_TEST_POSTGRES_DSN``; without that variable the tests' session fixture
(``tests/conftest.py``) calls :func:`start` here, so ``python -m pytest`` alone exercises the
PostgreSQL backend where the binaries are installed. ``initdb`` refuses to run as root, so a
root process runs the server commands as the ``postgres`` user (``runuser -u postgres``).
The cluster listens on 127.0.0.1 and a Unix socket in its own temporary folder only, trusts
local connections (it holds test rows and is removed at the end) and is stopped by
:meth:`Cluster.stop`.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: Where Debian's PostgreSQL packages put the server binaries (newest version first).
BIN_GLOB = "/usr/lib/postgresql/*/bin"
ENV_DSN = "DYNA_TEST_POSTGRES_DSN"
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


@dataclass
class Cluster:
    """A running throw-away cluster: its folder, port and superuser DSN."""

    root: Path
    port: int
    bin: Path
    as_user: list[str]

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its folder."""
        subprocess.run(self.as_user + [str(self.bin / "pg_ctl"), "-D", str(self.root / "data"),
                                       "-m", "fast", "-w", "stop"],
                       capture_output=True, timeout=60, check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def start(bin_dir: Path | None = None) -> Cluster:
    """Initialise and start a cluster in a new temporary folder on a free local port.

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
    root = Path(tempfile.mkdtemp(prefix="dyna-pg-"))
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            raise RuntimeError("running as root and no runuser to drop to the postgres user")
        if subprocess.run(["id", "-u", "postgres"], capture_output=True).returncode != 0:
            shutil.rmtree(root, ignore_errors=True)
            raise RuntimeError("running as root and no 'postgres' user to run the server: "
                               "create it (useradd --system postgres, as .ci/run does) or "
                               f"set {ENV_DSN}")
        shutil.chown(root, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = root / "data", free_port()
    steps = [
        [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E",
         "UTF8", "--locale=C", "--no-sync"],
        [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-w", "-t", "60",
         "-o", f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={root}"
               " -c fsync=off -c max_connections=200", "start"],
    ]
    for argv in steps:
        res = subprocess.run(as_user + argv, capture_output=True, text=True, timeout=120)
        if res.returncode != 0:
            log = (root / "log").read_text() if (root / "log").exists() else ""
            shutil.rmtree(root, ignore_errors=True)
            raise RuntimeError(f"{Path(argv[0]).name} failed: {res.stdout}{res.stderr}{log}")
    return Cluster(root, port, bin_dir, as_user)


@contextlib.contextmanager
def running():
    """A superuser DSN: ``DYNA_TEST_POSTGRES_DSN`` when set, else a cluster started here and
    stopped on exit; None when neither is possible (no binaries)."""
    dsn = os.environ.get(ENV_DSN)
    if dsn:
        yield dsn
        return
    if find_bin() is None:
        yield None
        return
    cluster = start()
    try:
        yield cluster.dsn
    finally:
        cluster.stop()
