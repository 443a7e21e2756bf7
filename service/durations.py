"""Token lifetimes as Vault writes them: ``90s``, ``30m``, ``1h``, ``768h``, ``1h30m``, ``2d``, or
a whole number of seconds; and seconds back in Vault's words (``1h1m1s``, ``768h``), for its
warnings."""

from __future__ import annotations

import re

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+)([smhd])")
_WHOLE = re.compile(r"(?:\d+[smhd])+")
# A lifetime past this is a typo, not a plan (and keeps every sum far inside 64 bits).
MAX_SECONDS = 100 * 365 * 86400


def parse_duration(value: object) -> int:
    """Whole seconds from a duration (``1h30m``) or a number of seconds (``5400``, ``"5400"``);
    ValueError, saying what is accepted, for anything else (negative, fractional, unknown
    unit, beyond 100 years)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, int):
        seconds = value
    elif isinstance(value, str) and value.strip().isdigit():
        seconds = int(value.strip())
    elif isinstance(value, str) and _WHOLE.fullmatch(value.strip()):
        seconds = sum(int(n) * _UNITS[u] for n, u in _PART.findall(value.strip()))
    else:
        raise ValueError(
            f"{value!r} is not a duration: give whole seconds (3600) or a number with a unit"
            " s, m, h or d (90s, 30m, 1h, 768h, 1h30m)"
        )
    if not 0 <= seconds <= MAX_SECONDS:
        raise ValueError(f"a duration must be from 0 to 100 years, not {seconds} s")
    return seconds


def format_duration(seconds: int) -> str:
    """Seconds as Vault's messages show a duration: hours, minutes and seconds, zero parts left
    out (``1h``, ``1m30s``, ``768h``), ``0s`` for none."""
    if seconds <= 0:
        return "0s"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    return text + (f"{secs}s" if secs else "")
