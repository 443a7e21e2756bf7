"""The engine's modules import one another in one direction only.

pyproject.toml states the layers as an import-linter contract, checked by `lint-imports`. These
tests read the engine's source themselves and count every import, at module level, inside a
function or under ``TYPE_CHECKING``: a function-level import is how the old circle was hidden
(``_providers`` -> ``_calibration`` -> ``_chunked`` -> ``_aead`` -> ``_providers``), so it must
count here whether or not a graph builder sees it the same way.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "engine"
PACKAGE = "sealflow.engine"
# The compiled cffi module: its `ffi` and `lib` are the binding's alone.
CFFI_MODULE = "sealflow.native._sealflow_native"
BINDING = f"{PACKAGE}._binding"


def module_name(path: Path) -> str:
    return PACKAGE if path.stem == "__init__" else f"{PACKAGE}.{path.stem}"


MODULES = {module_name(p): p for p in sorted(ENGINE.glob("*.py"))}


def imported(source: str, importer: str, modules: set[str]) -> Iterator[str]:
    """Every module that the source of `importer` (a module of the engine) imports, wherever
    the import statement stands: `from . import x` and `from .x import y` resolved to x."""
    package = importer if importer == PACKAGE else importer.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                yield submodule if submodule in modules else base


def engine_graph() -> dict[str, set[str]]:
    """Importer -> the engine modules it imports (the package's __init__ included)."""
    names = set(MODULES)
    return {
        name: {m for m in imported(path.read_text(), name, names) if m in names and m != name}
        for name, path in MODULES.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of imports, as the modules along it (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def declared_layers() -> list[set[str]]:
    """The engine's layers from its import-linter contract, top first, as module names."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for contract in config["tool"]["importlinter"]["contracts"]:
        if contract.get("containers") == [PACKAGE]:
            return [
                {f"{PACKAGE}.{tail.strip()}" for tail in layer.replace(":", "|").split("|")}
                for layer in contract["layers"]
            ]
    raise AssertionError("pyproject.toml has no layers contract for sealflow.engine")


def test_the_walk_counts_function_level_and_type_checking_imports() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import _a\n"
        "if TYPE_CHECKING:\n"
        "    from ._b import B\n"
        "def f() -> None:\n"
        "    from sealflow.engine._c import c\n"
        "    import sealflow.engine._d\n"
        "    from sealflow.engine import seal\n"
    )
    modules = {PACKAGE, *(f"{PACKAGE}._{x}" for x in "abcdx")}
    found = set(imported(source, f"{PACKAGE}._x", modules)) & modules
    assert found == {PACKAGE, *(f"{PACKAGE}._{x}" for x in "abcd")}


def test_no_circle_among_the_engine_modules() -> None:
    assert find_cycle(engine_graph()) is None


def test_the_cycle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]


def test_every_import_runs_down_the_declared_layers() -> None:
    """The contract's layers, checked over every import the source holds; the package's
    __init__ (the public API) sits above them all and no module imports it."""
    layers = declared_layers()
    assert set().union(*layers) == set(MODULES) - {PACKAGE}, "a module outside the layers"
    rank = {m: i + 1 for i, layer in enumerate(layers) for m in layer}
    rank[PACKAGE] = 0
    upward = sorted(
        (importer, target)
        for importer, targets in engine_graph().items()
        for target in targets
        if rank[target] <= rank[importer]
        and not (rank[target] == rank[importer] and target == importer)
    )
    assert upward == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_only_the_binding_imports_the_cffi_module(name: str) -> None:
    names = set(MODULES) | {CFFI_MODULE}
    touches = CFFI_MODULE in set(imported(MODULES[name].read_text(), name, names))
    assert touches == (name == BINDING)
