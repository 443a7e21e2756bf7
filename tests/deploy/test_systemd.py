"""deploy/systemd/sealflow.service: `systemd-analyze verify` and its offline security score,
and the service run under the restrictions the unit sets that can be set without systemd
(this machine runs no systemd): the master key from a credential file, and write-xor-execute
memory (MemoryDenyWriteExecute=, here by the kernel's PR_SET_MDWE, which refuses the same
W+X mappings and mprotect(PROT_EXEC) calls)."""

from __future__ import annotations

import base64
import os
import re
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.service.conftest import SEALFLOW, free_port

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "systemd" / "sealflow.service"


def systemd_analyze(*args: str | Path) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("systemd-analyze")
    assert tool, "systemd-analyze is missing: apt-get install systemd"
    return subprocess.run(  # noqa: S603 (systemd-analyze on PATH)
        [tool, *map(str, args)], capture_output=True, text=True, check=False
    )


def installed_copy(directory: Path, text: str | None = None) -> Path:
    """The unit with ExecStart at this venv's sealflow (verify checks the binary exists)."""
    text = UNIT.read_text() if text is None else text
    text, n = re.subn(r"(?m)^ExecStart=\S+", f"ExecStart={SEALFLOW}", text)
    assert n == 1
    (directory / "sealflow.service").write_text(text)
    return directory / "sealflow.service"


def directives() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            found.setdefault(key, []).append(value)
    return found


def test_the_unit_verifies_without_a_warning(tmp_path: Path) -> None:
    verified = systemd_analyze("verify", installed_copy(tmp_path))
    assert verified.returncode == 0, verified.stderr
    assert verified.stderr == ""


def test_verify_reports_a_misspelt_directive(tmp_path: Path) -> None:
    # verify exits 0 for an unknown directive (systemd ignores it): the warning is the failure.
    typo = UNIT.read_text().replace("NoNewPrivileges=yes", "NoNewPrivilege=yes")
    verified = systemd_analyze("verify", installed_copy(tmp_path, typo))
    assert "Unknown key 'NoNewPrivilege'" in verified.stderr


def test_the_unit_is_hardened(tmp_path: Path) -> None:
    found = directives()
    expected = {
        "DynamicUser": "yes",
        "StateDirectory": "sealflow",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "NoNewPrivileges": "yes",
        "CapabilityBoundingSet": "",
        "SystemCallFilter": "@system-service",
        "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
        "MemoryDenyWriteExecute": "yes",
        "LoadCredential": "master.key:/etc/sealflow/master.key",
    }
    for key, value in expected.items():
        assert found.get(key) == [value], key
    assert "SEALFLOW_MASTER_KEY_FILE=%d/master.key" in found["Environment"]
    assert "SEALFLOW_DATA_DIR=%S/sealflow" in found["Environment"]
    assert not [e for e in found["Environment"] if e.startswith("SEALFLOW_MASTER_KEY=")]
    # systemd's own measure of what the unit still allows: 0 (none) to 10 (everything).
    scored = systemd_analyze("security", "--offline=true", installed_copy(tmp_path))
    level = re.search(r"Overall exposure level for sealflow\.service: ([\d.]+)", scored.stdout)
    assert level, scored.stdout + scored.stderr
    assert float(level[1]) <= 2.0, scored.stdout


# Runs sealflow with PR_SET_MDWE (PR_MDWE_REFUSE_EXEC_GAIN), inherited across exec, after
# showing that a writable and executable mapping is refused.
_WRAPPER = """
import ctypes, mmap, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(65, 1, 0, 0, 0) != 0:
    sys.exit("PR_SET_MDWE: " + os.strerror(ctypes.get_errno()))
try:
    mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
except PermissionError:
    pass
else:
    sys.exit("PR_SET_MDWE did not refuse a W+X mapping")
os.execv(sys.argv[1], sys.argv[1:])
"""


@pytest.fixture
def restricted(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A server as the unit starts it: data in its state directory, the master key from a
    credential directory (read-only, elsewhere), no W+X memory. (URL, root token)."""
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "master.key").write_text(base64.b64encode(os.urandom(32)).decode())
    (credentials / "master.key").chmod(0o400)
    credentials.chmod(0o500)
    port = free_port()
    env = {
        **os.environ,
        "CREDENTIALS_DIRECTORY": str(credentials),
        "SEALFLOW_MASTER_KEY_FILE": str(credentials / "master.key"),
        "SEALFLOW_DATA_DIR": str(tmp_path / "state"),
        "SEALFLOW_PORT": str(port),
    }
    out, log = tmp_path / "out", tmp_path / "log"
    with out.open("wb") as stdout, log.open("wb") as stderr:
        proc = subprocess.Popen(  # noqa: S603
            [sys.executable, "-c", _WRAPPER, SEALFLOW, "serve"],
            env=env,
            stdout=stdout,
            stderr=stderr,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        token = out.read_text().split("Root token: ", 1)[1].split()[0]
        assert not (tmp_path / "state" / "master.key").exists()  # the credential was used
        yield url, token
    finally:
        proc.terminate()
        proc.wait(60)
        credentials.chmod(0o700)


def test_the_service_runs_without_writable_executable_memory(
    restricted: tuple[str, str],
) -> None:
    url, token = restricted
    auth = {"authorization": f"Bearer {token}"}
    plaintext = os.urandom(100_000)
    with httpx.Client(base_url=url, headers=auth, timeout=60) as client:
        for algorithm in ("aes-128-gcm", "aes-256-gcm", "chacha20-poly1305"):
            name = f"k-{algorithm}"
            body = {"name": name, "algorithm": algorithm}
            assert client.post("/v1/keys", json=body).status_code == 201
            for mode in ("stream", "single"):
                sealed = client.post(f"/v1/keys/{name}/encrypt?mode={mode}", content=plaintext)
                assert sealed.status_code == 200, sealed.text
                assert client.post("/v1/decrypt", content=sealed.content).content == plaintext
            records = b"".join(struct.pack(">I", len(r)) + r for r in (b"a", b"bc"))
            batch = client.post(f"/v1/keys/{name}/encrypt?mode=records", content=records)
            assert batch.status_code == 200, batch.text
            (length,) = struct.unpack(">I", batch.content[:4])
            assert client.post("/v1/decrypt", content=batch.content[4 : 4 + length]).content == b"a"
