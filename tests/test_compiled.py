"""The modules pyproject.toml names under ``[tool.sealflow] compiled`` are built by mypyc
(setup.py) unless the build was asked not to (``SEALFLOW_COMPILE=0``, in this run's
environment too), and a module edited after the build is caught (server/_compiled.py)."""

from __future__ import annotations

import importlib
import os
import sys
import tomllib
import types
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from sealflow.service.server import _compiled

ROOT = Path(__file__).resolve().parents[1]
COMPILED: list[str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["sealflow"][
    "compiled"
]
BUILT = os.environ.get("SEALFLOW_COMPILE", "1") != "0"


def _is_extension(module: types.ModuleType) -> bool:
    assert module.__file__ is not None
    return module.__file__.endswith(tuple(EXTENSION_SUFFIXES))


@pytest.mark.parametrize("name", COMPILED)
def test_each_named_module_is_built_as_asked(name: str) -> None:
    module = importlib.import_module(name)
    assert _is_extension(module) is BUILT
    source = ROOT / "src" / (name.replace(".", "/") + ".py")
    assert source.exists()


def test_no_other_module_is_compiled() -> None:
    # What runs compiled is what the list says: a module dropped from it must not keep an
    # extension from an earlier build.
    for name in COMPILED:
        importlib.import_module(name)
    loaded = [(n, m) for n, m in list(sys.modules.items()) if n.startswith("sealflow.")]
    extensions = {n for n, m in loaded if getattr(m, "__file__", None) and _is_extension(m)}
    # Besides the listed modules: the cffi extension, and the library they share (setup.py).
    others = {"sealflow.native._sealflow_native", "sealflow.compiled__mypyc"}
    assert extensions - others == (set(COMPILED) if BUILT else set())


def _probe(folder: Path, built_at: int, source_at: int) -> str:
    """A module ``sealflow.<folder's name>_probe`` "loaded" from an extension in folder, with
    its source beside it, each of the given age; its name."""
    folder.mkdir(parents=True)
    built = folder / ("probe" + EXTENSION_SUFFIXES[0])
    source = folder / "probe.py"
    built.write_bytes(b"")
    source.write_text("")
    os.utime(built, (built_at, built_at))
    os.utime(source, (source_at, source_at))
    probe = types.ModuleType(f"sealflow.{folder.name}_probe")
    probe.__file__ = str(built)
    sys.modules[probe.__name__] = probe
    return probe.__name__


def test_a_built_module_older_than_its_source_is_stale(tmp_path: Path) -> None:
    assert _compiled.stale() == []
    _compiled.check()  # nothing stale: returns
    names = [
        _probe(tmp_path / "tree" / "edited", 1_000_000, 2_000_000),  # an edit since the build
        _probe(tmp_path / "tree" / "built", 1_000_000, 1_000_000),  # the build of its source
        # An installed wheel (the README's `pip install .` puts the venv in the checkout):
        # its files are written in any order, and never edited.
        _probe(tmp_path / "tree" / ".venv" / "site-packages" / "wheel", 1_000_000, 2_000_000),
        _probe(tmp_path / "dist-packages" / "debian", 1_000_000, 2_000_000),
    ]
    try:
        assert _compiled.stale() == ["sealflow.edited_probe"]
        with pytest.raises(SystemExit, match=r"sealflow\.edited_probe changed since"):
            _compiled.check()
    finally:
        for name in names:
            del sys.modules[name]
