"""The locks in requirements/ agree with pyproject.toml and with each other.

The image installs requirements/build.txt and runtime.txt, CI installs build.txt and test.txt
(docs/DEPLOY.md, "Dependencies"): every line must be an exact pin with hashes, every requirement
of pyproject.toml must be pinned inside its bounds, and a package must have one version across
the locks, so that CI tests what the image ships.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from pathlib import Path

import pytest
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
RUNTIME: list[str] = PROJECT["project"]["dependencies"]
TEST: list[str] = PROJECT["project"]["optional-dependencies"]["test"]
BUILD: list[str] = PROJECT["build-system"]["requires"]
LOCKS = {"runtime.txt": RUNTIME, "test.txt": RUNTIME + TEST, "build.txt": BUILD}

HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")

Pins = dict[NormalizedName, Version]


def read_lock(text: str) -> tuple[Pins, list[str]]:
    """The pins of a lock, and each line that is not `name==version --hash=sha256:...`."""
    pins: Pins = {}
    problems = []
    for line in text.replace("\\\n", " ").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        requirement, *options = line.split()
        try:
            req = Requirement(requirement)
        except InvalidRequirement:
            problems.append(f"not a requirement: {requirement}")
            continue
        specs = list(req.specifier)
        if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version:
            problems.append(f"not pinned with ==: {requirement}")
            continue
        if not options:
            problems.append(f"no hash: {requirement}")
        problems += [f"not a sha256 hash: {o}" for o in options if not HASH.fullmatch(o)]
        name = canonicalize_name(req.name)
        if name in pins:
            problems.append(f"pinned twice: {name}")
        pins[name] = Version(specs[0].version)
    return pins, problems


def unmet(pins: Pins, requirements: Iterable[str]) -> list[str]:
    """The requirements (for this platform) that the pins leave out or do not satisfy."""
    problems = []
    for text in requirements:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate():
            continue
        version = pins.get(canonicalize_name(req.name))
        if version is None:
            problems.append(f"{req.name} is not in the lock")
        elif not req.specifier.contains(version, prereleases=True):
            problems.append(f"{req.name}=={version} is outside {req.specifier}")
    return problems


def lock(name: str) -> str:
    return (ROOT / "requirements" / name).read_text()


@pytest.mark.parametrize(("name", "requirements"), LOCKS.items())
def test_the_lock_pins_every_requirement_with_hashes(name: str, requirements: list[str]) -> None:
    pins, problems = read_lock(lock(name))
    assert problems == []
    assert unmet(pins, requirements) == []


@pytest.mark.parametrize("name", LOCKS)
def test_the_lock_says_how_it_was_made_for_the_image_s_python(name: str) -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    python = re.search(r"^ARG PYTHON=(\S+)$", dockerfile, re.M)
    assert python is not None
    command = lock(name).splitlines()[1]
    assert command.startswith("#    uv pip compile ")
    assert "--generate-hashes" in command.split()
    assert f"--python-version {python.group(1)} " in command
    assert command.endswith(f"--output-file requirements/{name}")


def test_a_package_has_one_version_across_the_locks() -> None:
    runtime, _ = read_lock(lock("runtime.txt"))
    test, _ = read_lock(lock("test.txt"))
    build, _ = read_lock(lock("build.txt"))
    # CI runs the tests on test.txt: it must hold the image's runtime.txt exactly.
    assert {name: test.get(name) for name in runtime} == runtime
    shared = {name: version for name, version in build.items() if name in test}
    assert shared == {name: test[name] for name in shared}


def test_build_in_is_the_build_system_requires() -> None:
    _, problems = read_lock(lock("build.txt"))
    assert problems == []
    listed = [line for line in lock("build.in").splitlines() if line and not line.startswith("#")]
    assert sorted(map(str, map(Requirement, listed))) == sorted(map(str, map(Requirement, BUILD)))


def test_the_extras_bring_their_packages() -> None:
    """uvicorn[standard] must bring httptools and uvloop: `sealflow serve` names them."""
    pins, _ = read_lock(lock("runtime.txt"))
    assert {"httptools", "uvloop"} <= set(pins)


def test_a_lock_that_breaks_the_rules_is_caught() -> None:
    sha = f"--hash=sha256:{'a' * 64}"
    pins, problems = read_lock(
        f"# via nothing\nfastapi>=0.115 {sha}\nh11==0.16.0\ncryptography==51.0.0 \\\n    {sha}\n"
        f"pydantic==2.14.4 --hash=md5:{'b' * 32}\nuvicorn~=0.54 {sha}\nbogus=1 {sha}\n"
        f"H11==0.14.0 {sha}\n"
    )
    assert problems == [
        "not pinned with ==: fastapi>=0.115",
        "no hash: h11==0.16.0",
        f"not a sha256 hash: --hash=md5:{'b' * 32}",
        "not pinned with ==: uvicorn~=0.54",
        "not a requirement: bogus=1",
        "pinned twice: h11",
    ]
    assert unmet(pins, ["cryptography>=50,<51", "h11>=0.14,<1", "tqdm>=4.66"]) == [
        "cryptography==51.0.0 is outside <51,>=50",
        "tqdm is not in the lock",
    ]
