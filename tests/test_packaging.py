"""The installed layout: one `sealflow` namespace, every module folder a package that ships."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import sealflow

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "sealflow"
# Folders with Python files that must not ship: the cffi build script.
NOT_SHIPPED = {SRC / "native" / "ffi"}


def test_the_three_folders_import_under_sealflow() -> None:
    for name, folder in (("native", "native"), ("engine", "engine"), ("service", "service")):
        module = importlib.import_module(f"sealflow.{name}")
        assert module.__file__ is not None
        assert Path(module.__file__).resolve().parent == ROOT / folder


def test_every_folder_with_modules_is_a_package() -> None:
    # setuptools finds packages by their __init__.py (namespaces off): a folder without one
    # would silently be left out of the wheel.
    folders = {p.parent for p in SRC.rglob("*.py")} - NOT_SHIPPED
    missing = sorted(str(f.relative_to(SRC)) for f in folders if not (f / "__init__.py").exists())
    assert missing == []


def test_build_requirements_understand_the_license_expression() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert isinstance(project["project"]["license"], str)  # PEP 639: setuptools >= 77
    assert "setuptools>=77" in project["build-system"]["requires"]


def test_version_is_the_distributions() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert sealflow.__version__ == project["project"]["version"]
