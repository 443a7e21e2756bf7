"""What the PromQL in deploy/ names, and promtool to check it (tests/deploy)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

# Words of PromQL that are neither a metric nor a function call (a function is a word before
# "("; "by (...)" and friends hold label names, removed first).
_KEYWORDS = frozenset(("and", "or", "unless", "bool", "offset"))
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")


def promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """promtool from Debian's prometheus package (.ci/run installs it): missing, it fails."""
    tool = shutil.which("promtool")
    assert tool, "promtool is missing: apt-get install prometheus (.ci/run does)"
    return subprocess.run(  # noqa: S603 (promtool on PATH)
        [tool, *map(str, args)], capture_output=True, text=True, check=False
    )


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings: label values, regexes
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range and subquery durations
    text = _GROUPING.sub("", text)
    words = re.finditer(r"(?<![\w.])([A-Za-z_:][\w:]*)(\s*\()?", text)
    return {m[1] for m in words if m[2] is None and m[1] not in _KEYWORDS}
