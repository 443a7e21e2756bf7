"""The real ``bao`` CLI (OpenBao 2.7, from the test extra) pointed at sealflow."""

from __future__ import annotations

import base64
import subprocess

from tests.service.conftest import Server
from tests.service.transit.conftest import Bao, bao_binary, unique


def bao_cli(server: Server, bao: Bao, *args: str) -> str:
    done = subprocess.run(  # noqa: S603
        [bao_binary(), *args],
        env=bao.env(server.url, server.token),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().strip()


def test_write_encrypt_and_decrypt(server: Server, bao: Bao) -> None:
    name = unique("cli")
    bao_cli(server, bao, "write", "-f", f"transit/keys/{name}")
    plaintext = base64.b64encode(b"from the bao CLI").decode()
    ciphertext = bao_cli(
        server,
        bao,
        "write",
        "-field=ciphertext",
        f"transit/encrypt/{name}",
        f"plaintext={plaintext}",
    )
    assert ciphertext.startswith("vault:v1:")
    opened = bao_cli(
        server,
        bao,
        "write",
        "-field=plaintext",
        f"transit/decrypt/{name}",
        f"ciphertext={ciphertext}",
    )
    assert base64.b64decode(opened) == b"from the bao CLI"
    bao_cli(server, bao, "write", "-f", f"transit/keys/{name}/rotate")
    assert bao_cli(server, bao, "read", "-field=latest_version", f"transit/keys/{name}") == "2"
    assert name in bao_cli(server, bao, "list", "transit/keys").split()
