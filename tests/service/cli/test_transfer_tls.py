"""``sealflow encrypt`` / ``decrypt`` as a user runs them: over HTTPS with stdin a pipe.

``echo hi | sealflow encrypt --url https://...`` used to hang until the server gave up on the
body (tests/service/client/test_tls.py says why).
"""

from __future__ import annotations

import os
import subprocess

from tests.service.conftest import SEALFLOW, Server


def sealflow(server: Server, *args: str, stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    """The command with ``stdin`` through a pipe (``input=``), trusting the server's cert."""
    assert server.cert is not None
    env = {
        **os.environ,
        "SEALFLOW_TOKEN": server.token,
        "SEALFLOW_URL": server.https_url,
        "SSL_CERT_FILE": str(server.cert),  # OpenSSL's default trust store, for this process
    }
    return subprocess.run(  # noqa: S603
        [SEALFLOW, *args], input=stdin, capture_output=True, env=env, timeout=300, check=False
    )


def test_a_pipe_goes_over_https(tls_server: Server) -> None:
    for data in [b"hi\n"] * 6 + [os.urandom(5_000_000)] * 2:
        sealed = sealflow(tls_server, "encrypt", "--key", "default", stdin=data)
        assert (sealed.returncode, sealed.stderr) == (0, b"")
        opened = sealflow(tls_server, "decrypt", stdin=sealed.stdout)
        assert (opened.returncode, opened.stderr) == (0, b"")
        assert opened.stdout == data
