"""A small real filesystem for tests of a full disk: a tmpfs mounted for one test.

Mounting needs root, which the tests have here and in CI (.ci/run runs them as root, as it
runs tests/postgres.py's cluster as ``nobody``); a mount that fails fails the test, naming why.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def mounted(where: Path, size: int) -> Iterator[Path]:
    """A tmpfs of ``size`` bytes at ``where`` (made if missing), unmounted on the way out."""
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(  # noqa: S603
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)],  # noqa: S607
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"mounting a tmpfs needs root (CI runs as root): {done.stderr}"
    try:
        yield where
    finally:
        # A process still holding a file there (a server that did not stop) would make a
        # plain unmount fail: detach it then, so the next test starts clean.
        if subprocess.run(["umount", str(where)], check=False).returncode:  # noqa: S603, S607
            subprocess.run(["umount", "--lazy", str(where)], check=True)  # noqa: S603, S607


def used(where: Path) -> int:
    """Bytes in use on the filesystem at ``where`` (what df shows as Used)."""
    stat = os.statvfs(where)
    return (stat.f_blocks - stat.f_bfree) * stat.f_frsize
