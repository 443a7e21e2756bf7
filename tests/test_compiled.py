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


def test_a_built_module_older_than_its_source_is_stale(tmp_path: Path) -> None:
    assert _compiled.stale() == []
    _compiled.check()  # nothing stale: returns
    (tmp_path / ".git").mkdir()  # a checkout: an installed wheel's files are never stale
    package = tmp_path / "sealflow_stale_probe"
    built = package.with_name(package.name + EXTENSION_SUFFIXES[0])
    source = package.with_suffix(".py")
    built.write_bytes(b"")
    source.write_text("")
    os.utime(built, (1_000_000, 1_000_000))
    os.utime(source, (2_000_000, 2_000_000))
    probe = types.ModuleType("sealflow.stale_probe")
    probe.__file__ = str(built)
    sys.modules[probe.__name__] = probe
    try:
        assert _compiled.stale() == ["sealflow.stale_probe"]
        with pytest.raises(SystemExit, match=r"sealflow\.stale_probe changed since"):
            _compiled.check()
        os.utime(source, (1_000_000, 1_000_000))  # same age: the build of that source
        assert _compiled.stale() == []
        os.utime(source, (2_000_000, 2_000_000))
        (tmp_path / ".git").rmdir()  # not a checkout: an installed wheel
        assert _compiled.stale() == []
    finally:
        del sys.modules[probe.__name__]
