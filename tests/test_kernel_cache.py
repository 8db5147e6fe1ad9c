"""numba's kernel cache is keyed on the kernels' sources (dyna.kernel_cache): editing a module
a kernel calls gives a fresh cache instead of stale machine code.

The end-to-end test copies a tiny package (a cached kernel calling a compiled helper in
another module) into tmp_path, runs it in subprocesses through the same ``configure`` dyna
calls at import, edits the helper and checks the new result; a control run with a fixed
NUMBA_CACHE_DIR shows the stale result numba gives without it.
"""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dyna import kernel_cache
from dyna.kernel_cache import configure, kernel_sources_key

REPO = Path(__file__).resolve().parents[1]

PKG_INIT = """
import importlib.util, os
spec = importlib.util.spec_from_file_location("kc", os.environ["KC_PATH"])
kc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kc)
kc.configure([os.path.dirname(os.path.abspath(__file__))], os.environ.get("KC_HOME"))
"""
HELPER = """
from numba import njit


@njit(cache=True)
def scale(x):
    return x * {factor}
"""
KERNEL = """
from numba import njit

from kpkg.helper import scale


@njit(cache=True)
def total(n):
    s = 0
    for i in range(n):
        s += scale(i)
    return s
"""
MAIN = """
import os
import kpkg.kern as k
print(k.total(10), len(k.total.stats.cache_hits), os.environ.get("NUMBA_CACHE_DIR"))
"""


def write_package(root: Path, factor: int) -> Path:
    pkg = root / "kpkg"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(PKG_INIT)
    (pkg / "kern.py").write_text(KERNEL)
    set_factor(pkg, factor)
    return pkg


def set_factor(pkg: Path, factor: int) -> None:
    helper = pkg / "helper.py"
    helper.write_text(HELPER.format(factor=factor))


def run_package(root: Path, home: Path | None, cache_dir: Path | None = None):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(KC_PATH=kernel_cache.__file__, PYTHONPATH=str(root), PYTHONDONTWRITEBYTECODE="1")
    if home is not None:
        env["KC_HOME"] = str(home)
    if cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = str(cache_dir)
    proc = subprocess.run([sys.executable, "-c", MAIN], env=env, capture_output=True,
                          text=True, timeout=120, cwd=root)
    assert proc.returncode == 0, proc.stderr
    value, hits, where = proc.stdout.split()
    return int(value), int(hits), where


def test_editing_a_called_module_gives_a_fresh_cache(tmp_path):
    """sum(i * factor for i < 10) = 45 * factor."""
    pkg = write_package(tmp_path / "src", factor=2)
    home = tmp_path / "cache"
    assert run_package(tmp_path / "src", home)[:2] == (90, 0)      # compiled
    value, hits, first_dir = run_package(tmp_path / "src", home)
    assert (value, hits) == (90, 1)                                   # loaded from the cache
    assert Path(first_dir).parent == home
    set_factor(pkg, 3)                                                # kern.py untouched
    value, hits, second_dir = run_package(tmp_path / "src", home)
    assert (value, hits) == (135, 0)
    assert second_dir != first_dir
    # nothing is written next to the sources (works from a read-only install)
    assert not list(pkg.rglob("*.nb[ic]"))

    # control: a fixed cache directory (the user's choice, left alone) serves the stale kernel
    control = write_package(tmp_path / "control", factor=2)
    fixed = tmp_path / "fixed"
    assert run_package(tmp_path / "control", home, fixed) == (90, 0, str(fixed))
    set_factor(control, 3)
    assert run_package(tmp_path / "control", home, fixed) == (90, 1, str(fixed))


def tree(root: Path, files: dict) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


FILES = {
    "p/__init__.py": "",
    "p/kern.py": "from numba import njit\nfrom p.consts import LIMIT\nfrom . import util\n",
    "p/consts.py": "LIMIT = 3\n",
    "p/util.py": "import p.deep.leaf as leaf\n",
    "p/deep/__init__.py": "",
    "p/deep/leaf.py": "X = 1\n",
    "p/loops.py": "import json\nfrom p import consts\n",
}


@pytest.mark.parametrize("edit, changes", [
    ("p/kern.py", True),        # holds a kernel
    ("p/consts.py", True),      # a constant a kernel module imports
    ("p/util.py", True),        # relative import (from . import util)
    ("p/deep/leaf.py", True),   # imported by an imported module, transitively
    ("p/loops.py", False),      # imports from the kernels' modules but no kernel uses it
])
def test_key_covers_exactly_what_kernels_depend_on(tmp_path, edit, changes):
    root = tree(tmp_path, FILES)
    before = kernel_sources_key([root / "p"])
    assert len(before) == 16 and int(before, 16) >= 0
    with open(root / edit, "a") as fh:
        fh.write("# edited\n")
    assert (kernel_sources_key([root / "p"]) != before) is changes


def test_no_kernels_no_key_and_no_configuration(tmp_path, monkeypatch):
    root = tree(tmp_path, {"q/__init__.py": "import json\n"})
    assert kernel_sources_key([root / "q"]) == ""
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    assert configure([root / "q"], str(tmp_path / "home")) is None
    assert "NUMBA_CACHE_DIR" not in os.environ


def test_configure_respects_the_user_and_replaces_its_own(tmp_path, monkeypatch):
    root = tree(tmp_path / "src", FILES)
    home = tmp_path / "home"
    key = kernel_sources_key([root / "p"])
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "mine"))
    assert configure([root / "p"], str(home)) is None
    assert os.environ["NUMBA_CACHE_DIR"] == str(tmp_path / "mine")
    # a directory set by an earlier configure (parent process, other checkout) is replaced
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(home / "0123456789abcdef"))
    assert configure([root / "p"], str(home)) == str(home / key)
    assert os.environ["NUMBA_CACHE_DIR"] == str(home / key)
    assert not home.exists()   # nothing created: numba makes it when a kernel is defined


def test_unwritable_home_falls_back_to_the_temporary_directory(tmp_path, monkeypatch):
    import tempfile

    root = tree(tmp_path / "src", FILES)
    (tmp_path / "file").write_text("not a directory")
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    path = configure([root / "p"], str(tmp_path / "file" / "home"))
    key = kernel_sources_key([root / "p"])
    assert path == str(tmp_path / "tmp" / kernel_cache._FALLBACK_NAME / key)
    assert os.environ["NUMBA_CACHE_DIR"] == path
    assert sorted(p.name for p in (tmp_path / "tmp").iterdir()) == []   # nothing created
    # a child process recognises the fallback as dyna's own, not the user's
    assert configure([root / "p"], str(tmp_path / "file" / "home")) == path


def test_old_directories_are_pruned_but_recent_ones_kept(tmp_path, monkeypatch):
    root = tree(tmp_path / "src", FILES)
    home = tmp_path / "home"
    now = time.time()
    ages_h = {"a": 100, "b": 50, "c": 30, "d": 2, "e": 1}   # hours since last use
    for name, hours in ages_h.items():
        (home / name / "sub").mkdir(parents=True)
        os.utime(home / name, (now - hours * 3600,) * 2)
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    path = configure([root / "p"], str(home), keep=3, max_idle_s=24 * 3600)
    # kept: the 3 most recently used (the new one, not made yet, e, d); c, b, a are older
    # and idle > 24 h
    assert sorted(p.name for p in home.iterdir()) == ["d", "e"]
    # an existing key directory (numba made it when it saved a kernel) is reused without
    # pruning, and marked as used now
    Path(path).mkdir()
    os.utime(home / "d", (now - 90 * 3600,) * 2)
    assert configure([root / "p"], str(home), keep=1, max_idle_s=0) == path
    assert (home / "d").is_dir()
    assert Path(path).stat().st_mtime >= now - 1


def test_a_home_that_is_not_a_writable_directory_is_not_used(tmp_path, monkeypatch):
    import tempfile

    root = tree(tmp_path / "src", FILES)
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    key = kernel_sources_key([root / "p"])
    fallback = str(tmp_path / "tmp" / kernel_cache._FALLBACK_NAME / key)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / key).write_text("a file where the key directory goes")
    assert configure([root / "p"], str(tmp_path / "home")) == fallback
    (tmp_path / "ro").mkdir()
    os.chmod(tmp_path / "ro", 0o500)
    try:
        want = fallback if not os.access(tmp_path / "ro", os.W_OK) else str(
            tmp_path / "ro" / "home" / key)   # (root may write anywhere)
        assert configure([root / "p"], str(tmp_path / "ro" / "home")) == want
    finally:
        os.chmod(tmp_path / "ro", 0o700)
    assert list((tmp_path / "ro").iterdir()) == []


def test_a_process_that_imports_no_kernel_creates_no_cache_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    env["HOME"] = str(tmp_path / "home")
    (tmp_path / "home").mkdir()
    for args in (["--help"], ["skills", "list", str(tmp_path / "none")]):
        proc = subprocess.run([sys.executable, "-m", "dyna.cli", *args], env=env, text=True,
                              capture_output=True, timeout=120, cwd=tmp_path)
        assert proc.returncode in (0, 2), proc.stderr
    assert not (tmp_path / "xdg").exists()


def test_dyna_import_points_numba_at_its_keyed_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")   # not the cwd: ./dyna would shadow dyna
    key = kernel_sources_key([REPO / "dyna", REPO / "envs"])
    code = ("import sys; first = sys.argv[1] == 'numba-first'\n"
            "if first: import numba\n"
            "import dyna, numba.core.config as c; print(c.CACHE_DIR)")
    for order in ("dyna-first", "numba-first"):
        proc = subprocess.run([sys.executable, "-c", code, order], env=env, text=True,
                              capture_output=True, timeout=60, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == str(tmp_path / "xdg" / "dyna" / "numba" / key)
