"""A small tmpfs mounted for one test: a real full disk (or a read-only file system).

:func:`mounted` mounts a tmpfs of ``size`` on a fresh folder and unmounts it (lazily, so an
open descriptor cannot keep it) when the block ends; where the machine does not allow it
(not root, no ``mount``) the test is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import subprocess

import pytest


@contextlib.contextmanager
def mounted(root, size: str = "512k"):
    """Yield ``root`` (made here) with a tmpfs of ``size`` mounted on it."""
    root.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(root)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or 'not root'}): the "
                    "case needs a real small file system")
    try:
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)
