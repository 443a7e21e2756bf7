"""The names of rotated audit files, and the order ``verify`` reads files in.

A rotated file is ``<path>.<UTC time with microseconds>``: names sort as time does, and a
new one is always named after every rotated file already there (a clock stepped back, or two
rotations in one microsecond, must not put a file out of order or replace one). The live file
is ``<path>`` itself, which sorts before its rotated files by name alone; ``file_order``
puts it after them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

_FORMAT = "%Y%m%dT%H%M%S.%fZ"
_STAMP = re.compile(r"\d{8}T\d{6}\.\d{6}Z")
_ROTATED = re.compile(r"(?P<base>.+)\.(?P<stamp>\d{8}T\d{6}\.\d{6}Z)")


def rotated_name(path: Path, now: float) -> Path:
    """The name ``path`` takes when it is rotated at ``now``: later than every rotated one."""
    stamp = datetime.fromtimestamp(now, UTC)
    prefix = path.name + "."
    taken = [
        name[len(prefix) :]
        for name in os.listdir(path.parent)
        if name.startswith(prefix) and _STAMP.fullmatch(name[len(prefix) :])
    ]
    if taken:
        last = datetime.strptime(max(taken), _FORMAT).replace(tzinfo=UTC)
        stamp = max(stamp, last + timedelta(microseconds=1))
    return path.with_name(prefix + stamp.strftime(_FORMAT))


def is_rotated(path: Path) -> bool:
    """Whether ``path`` is named as a rotated file (so no longer written to)."""
    return _ROTATED.fullmatch(path.name) is not None


def file_order(paths: Iterable[Path]) -> list[Path]:
    """``paths`` in the order they were written: by folder and base name, a base's rotated
    files by time, and the live file after them."""

    def key(path: Path) -> tuple[str, str, int, str]:
        rotated = _ROTATED.fullmatch(path.name)
        if rotated is None:
            return str(path.parent), path.name, 1, ""
        return str(path.parent), rotated["base"], 0, rotated["stamp"]

    return sorted(paths, key=key)
