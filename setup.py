"""The two compiled parts of the package; everything else is in pyproject.toml.

- ``cffi_modules``: the native AEAD and HMAC extension (native/).
- ``ext_modules``: the modules every small request runs through, compiled by mypyc from the
  same typed Python (``[tool.sealflow] compiled`` in pyproject.toml says which, and why:
  docs/SERVICE.md, "Compiled modules"). ``SEALFLOW_COMPILE=0`` builds them as plain Python.
"""

import importlib.metadata
import os
import re
import sys
import tomllib
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent


with (HERE / "pyproject.toml").open("rb") as f:
    PROJECT = tomllib.load(f)
COMPILE = os.environ.get("SEALFLOW_COMPILE", "1") != "0"


def compiled() -> list[str]:
    if not COMPILE:
        return []
    names = PROJECT["tool"]["sealflow"]["compiled"]
    return [f"src/{name.replace('.', '/')}.py" for name in names]


def missing() -> list[str]:
    """The runtime dependencies not installed (an isolated build's first pass, which asks for
    them: setup_requires below)."""
    names = [re.match(r"[A-Za-z0-9._-]+", r).group() for r in PROJECT["project"]["dependencies"]]
    absent = []
    for name in names:
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            absent.append(name)
    return absent


def ext_modules() -> list[object]:
    paths = compiled()
    if not paths or set(sys.argv[1:2]) & {"sdist", "egg_info", "dist_info"}:
        return []  # not asked, or not a build (metadata, requirements, the sdist)
    if absent := missing():
        print(f"setup.py: not compiling (missing: {', '.join(absent)})", file=sys.stderr)
        return []
    from mypyc.build import mypycify

    # The project's own mypy settings (strict), without the note on override sections that
    # name other files (mypyc treats any message as a failure). The C the modules share is one
    # more extension, sealflow.compiled__mypyc: inside the package (mypyc's default is a
    # top-level module named by a hash).
    return list(
        mypycify(
            ["--no-warn-unused-configs", *paths],
            opt_level="3",
            debug_level="1",
            group_name="sealflow.compiled",
        )
    )


setup(
    cffi_modules=["native/ffi/build.py:ffi"],
    ext_modules=ext_modules(),
    # mypyc type-checks what it compiles, so the packages those modules import must be there:
    # an isolated build (the README's `pip install .`, `python -m build`) gets the runtime
    # dependencies too (setuptools' build backend asks for setup_requires before it builds;
    # a build without isolation uses the venv's, from the locks).
    setup_requires=PROJECT["project"]["dependencies"] if COMPILE else [],
)
