"""Tests of the tests' throw-away PostgreSQL cluster helper (tests/pg_cluster.py): stale
clusters of killed runs are reaped and nothing else is, SIGTERM tears the cluster down, and a
start interrupted half-way leaves no folder. No server is started here (fast)."""

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import pg_cluster


@pytest.fixture
def tmp_root(tmp_path, monkeypatch):
    """tempfile's folder moved to tmp_path, where the helper looks for cluster folders."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _folder(root: Path, name: str, owner: str | None) -> Path:
    path = root / (pg_cluster.PREFIX + name)
    (path / "data").mkdir(parents=True)
    if owner is not None:
        (path / pg_cluster.OWNER).write_text(owner)
    return path


def test_only_folders_of_gone_creators_are_reaped(tmp_root):
    me = f"{os.getpid()} {pg_cluster._started(os.getpid())}"
    dead = _folder(tmp_root, "dead", f"{_dead_pid()} 12345")
    reused = _folder(tmp_root, "reused", f"{os.getpid()} 1")  # my pid, another start time
    live = _folder(tmp_root, "live", me)
    legacy = _folder(tmp_root, "legacy", None)  # an older run's folder: no owner file
    garbled = _folder(tmp_root, "garbled", "not a pid")
    zombie = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                              stdin=subprocess.PIPE)
    _folder(tmp_root, "zombie", f"{zombie.pid} {pg_cluster._started(zombie.pid)}")
    zombie.stdin.close()  # it ends, and is not waited for yet
    os.waitid(os.P_PID, zombie.pid, os.WEXITED | os.WNOWAIT)
    assert Path(f"/proc/{zombie.pid}/stat").read_text().split(") ")[1][0] == "Z"
    (tmp_root / (pg_cluster.PREFIX + "link")).symlink_to(dead)
    other = tmp_root / "unrelated"
    other.mkdir()
    (other / pg_cluster.OWNER).write_text(f"{_dead_pid()} 1")
    gone = pg_cluster.reap_stale(Path("/nonexistent-bin"), [])
    zombie.wait()
    assert sorted(p.name for p in gone) == [pg_cluster.PREFIX + n
                                            for n in ("dead", "reused", "zombie")]
    assert not dead.exists() and not reused.exists()
    assert live.is_dir() and legacy.is_dir() and garbled.is_dir() and other.is_dir()
    assert (tmp_root / (pg_cluster.PREFIX + "link")).is_symlink()


def test_a_start_interrupted_half_way_leaves_no_folder(tmp_root, monkeypatch):
    def interrupted(root, bin_dir, as_user):
        assert (root / pg_cluster.OWNER).read_text().split()[0] == str(os.getpid())
        raise KeyboardInterrupt

    monkeypatch.setattr(pg_cluster, "_init_and_start", interrupted)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # no postgres user needed
    with pytest.raises(KeyboardInterrupt):
        pg_cluster.start(Path("/nonexistent-bin"))
    assert list(tmp_root.glob(pg_cluster.PREFIX + "*")) == []


def test_sigterm_stops_the_cluster_and_a_forked_child_still_dies_of_it(monkeypatch):
    stopped = []
    fake = pg_cluster.Cluster(Path("/nonexistent"), 1, Path("/nonexistent-bin"), [],
                              os.getpid())
    monkeypatch.setattr(fake, "stop", lambda: stopped.append(True))
    monkeypatch.delenv(pg_cluster.ENV_DSN, raising=False)
    monkeypatch.setattr(pg_cluster, "find_bin", lambda: Path("/nonexistent-bin"))
    monkeypatch.setattr(pg_cluster, "start", lambda: fake)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        with pg_cluster.running() as dsn:
            assert dsn == fake.dsn
            child = os.fork()
            if child == 0:  # pragma: no cover - the child is killed by the signal
                os.kill(os.getpid(), signal.SIGTERM)
                os._exit(0)
            _, status = os.waitpid(child, 0)
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
            os.kill(os.getpid(), signal.SIGTERM)
    assert stopped == [True] and signal.getsignal(signal.SIGTERM) is before


def test_a_port_taken_before_the_server_binds_is_chosen_again(tmp_path, monkeypatch):
    ports = iter([5001, 5002])
    tried = []

    def run(argv, root, name):
        if name == "pg_ctl start":
            port = int(argv[argv.index("-o") + 1].split("port=")[1].split()[0])
            tried.append(port)
            if port == 5001:
                raise RuntimeError('pg_ctl start failed: could not bind IPv4 address '
                                   '"127.0.0.1": Address already in use')

    monkeypatch.setattr(pg_cluster, "free_port", lambda: next(ports))
    monkeypatch.setattr(pg_cluster, "_run", run)
    cluster = pg_cluster._init_and_start(tmp_path, Path("/bin-dir"), [])
    assert tried == [5001, 5002] and cluster.port == 5002 and cluster.pid == os.getpid()
    monkeypatch.setattr(pg_cluster, "free_port", lambda: 5001)  # another failure: raised
    with pytest.raises(RuntimeError, match="already in use"):
        pg_cluster._init_and_start(tmp_path, Path("/bin-dir"), [])
    assert tried[2:] == [5001] * 3


def test_the_ci_stop_command_removes_only_cluster_folders(tmp_root, capsys):
    keep = tmp_root / "precious"
    keep.mkdir()
    (keep / pg_cluster.OWNER).write_text("1 1")
    fake = _folder(tmp_root, "x", "1 1")
    assert pg_cluster.main(["stop", str(keep)]) == 2 and keep.is_dir()
    assert "not a cluster folder" in capsys.readouterr().err
    assert pg_cluster.main(["stop", str(tmp_root / "elsewhere" / fake.name)]) == 2
    assert pg_cluster.main(["stop", str(fake)]) == 0 and not fake.exists()
    assert pg_cluster.main(["bogus"]) == 2
