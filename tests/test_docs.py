"""The module maps in docs/SERVICE.md and docs/ENGINE.md list exactly the modules of the tree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def listed_modules(doc: str, heading: str) -> set[str]:
    """The paths at the start of each line of the first code block after the heading."""
    text = (ROOT / "docs" / doc).read_text()
    section = text[text.index(heading) :]
    blocks = re.findall(r"```\n(.*?)```", section, re.S)
    # The first block that is a map (every line starts with a path).
    for block in blocks:
        paths = [line.split()[0] for line in block.splitlines() if line.strip()]
        if paths and all(p.endswith((".py", ".c", ".h")) for p in paths):
            return set(paths)
    raise AssertionError(f"no module map under {heading!r} in {doc}")


def tree(folder: str) -> set[str]:
    """The sources of a folder, build scripts (native/ffi) and generated files aside."""
    return {
        str(p.relative_to(ROOT))
        for p in (ROOT / folder).rglob("*")
        if p.suffix in (".py", ".c", ".h")
        and not {"__pycache__", "ffi"} & set(p.parts)
        and not p.name.startswith("_sealflow_native")
    }


@pytest.mark.parametrize(
    ("doc", "heading", "folders"),
    [
        ("SERVICE.md", "## Modules", ["service"]),
        ("ENGINE.md", "## Layers", ["engine", "native"]),
    ],
)
def test_module_map_matches_the_tree(doc: str, heading: str, folders: list[str]) -> None:
    actual = set().union(*(tree(f) for f in folders))
    listed = {p for p in listed_modules(doc, heading) if p.split("/")[0] in folders}
    assert sorted(actual - listed) == [], f"modules missing from docs/{doc}"
    assert sorted(listed - actual) == [], f"docs/{doc} lists modules that do not exist"
