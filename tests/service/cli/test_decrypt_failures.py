"""``sealflow decrypt`` of a tampered input, in both transports, against a real server: one
message (``decryption failed``), a non-zero exit, and no output file; what a generic client
sees of the same failure in full duplex; an existing output file's owner and mode kept;
``--cacert``.
"""

from __future__ import annotations

import http.client
import os
import socket
import stat
import subprocess
from pathlib import Path

import pytest

from tests.service import duplex
from tests.service.conftest import SEALFLOW, Server

MiB = 1 << 20
DATA = os.urandom(3 * MiB // 2)


def sealflow(server: Server, *args: str, url: str | None = None, **env: str) -> tuple[int, str]:
    environ = {**os.environ, "SEALFLOW_URL": url or server.url, "SEALFLOW_TOKEN": server.token}
    done = subprocess.run(  # noqa: S603
        [SEALFLOW, *args], env={**environ, **env}, capture_output=True, timeout=120, check=False
    )
    return done.returncode, done.stderr.decode()


@pytest.fixture(scope="module")
def tampered(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 1.5 MiB stream envelope with one byte changed in a chunk near its end: decryption
    has released most of the plaintext (in full duplex) before it fails."""
    folder = tmp_path_factory.mktemp("tampered")
    plain, sealed = folder / "plain", folder / "sealed"
    plain.write_bytes(DATA)
    assert sealflow(server, "encrypt", "--key", "default", "-i", str(plain), "-o", str(sealed)) == (
        0,
        "",
    )
    envelope = bytearray(sealed.read_bytes())
    envelope[-100_000] ^= 0x01
    sealed.write_bytes(envelope)
    return sealed


@pytest.mark.parametrize("transport", ["--duplex", "--no-duplex"])
def test_a_tampered_input_says_decryption_failed_and_leaves_no_output(
    server: Server, tampered: Path, tmp_path: Path, transport: str
) -> None:
    out = tmp_path / "out"
    code, err = sealflow(server, "decrypt", transport, "-i", str(tampered), "-o", str(out))
    assert code == 1
    assert err.startswith("sealflow: decrypt failed: decryption failed"), err
    assert "connection" not in err
    assert list(tmp_path.iterdir()) == []  # neither the output nor its temporary file


@pytest.mark.parametrize("transport", ["--duplex", "--no-duplex"])
def test_a_tampered_input_keeps_an_existing_output_as_it_was(
    server: Server, tampered: Path, tmp_path: Path, transport: str
) -> None:
    out = tmp_path / "out"
    out.write_bytes(b"what was there")
    code, err = sealflow(server, "decrypt", transport, "-i", str(tampered), "-o", str(out))
    assert (code, "decryption failed" in err) == (1, True)
    assert out.read_bytes() == b"what was there"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def read_into(got: bytearray, reply: duplex.Reply) -> None:
    for piece in reply.pieces():
        got += piece
    reply.response.read()  # http.client raises on the cut-off chunk here at the latest


def test_a_generic_client_sees_the_duplex_failure_as_an_incomplete_body(
    server: Server, tampered: Path
) -> None:
    """http.client knows nothing of the in-band signal: the body still never ends cleanly."""
    envelope = tampered.read_bytes()
    pieces = (envelope[i : i + 65536] for i in range(0, len(envelope), 65536))
    headers = {"Authorization": f"Bearer {server.token}", "Sealflow-Duplex": "1"}
    with duplex.post(f"{server.url}/v1/decrypt", pieces, headers, len(envelope)) as reply:
        assert reply.status == 200
        assert reply.header("Transfer-Encoding") == "chunked"
        got = bytearray()
        with pytest.raises(http.client.IncompleteRead):
            read_into(got, reply)
    assert 0 < len(got) < len(DATA)
    assert DATA.startswith(got)  # only authenticated chunks came out


def test_the_signal_is_a_chunk_size_line_before_the_close(server: Server, tampered: Path) -> None:
    """On the wire: the last line is a chunk size with the extension, for a chunk that never
    comes; no final zero-size chunk."""
    envelope = tampered.read_bytes()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(
            b"POST /v1/decrypt HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
            b"Sealflow-Duplex: 1\r\nContent-Length: %d\r\n\r\n%s"
            % (server.token.encode(), len(envelope), envelope)
        )
        received = bytearray()
        while piece := sock.recv(1 << 20):
            received += piece
    assert received.endswith(b"\r\n1;sealflow-error=decryption_failed\r\n")
    assert b"\r\n0\r\n" not in received[-64:]


@pytest.mark.parametrize("existing", [True, False], ids=["existing", "new"])
def test_an_existing_output_keeps_its_owner_and_mode(
    server: Server, tmp_path: Path, existing: bool
) -> None:
    plain, sealed, out = tmp_path / "plain", tmp_path / "sealed", tmp_path / "out"
    plain.write_bytes(b"hello")
    assert (
        sealflow(server, "encrypt", "--key", "default", "-i", str(plain), "-o", str(sealed))[0] == 0
    )
    if existing:
        out.write_bytes(b"old")
        out.chmod(0o644)
        os.chown(out, 4321, 4322)  # the tests run as root
    code, err = sealflow(server, "decrypt", "-i", str(sealed), "-o", str(out))
    assert (code, err) == (0, "")
    assert out.read_bytes() == b"hello"
    st = out.stat()
    if existing:
        assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o644, 4321, 4322)
    else:
        assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o600, os.getuid())


def test_cacert_trusts_a_private_ca(tls_server: Server) -> None:
    assert tls_server.cert is not None
    url = tls_server.https_url
    env = {"SSL_CERT_FILE": "/nonexistent"}  # the system's trust store must not be what works
    code, err = sealflow(
        tls_server, "encrypt", "--key", "default", "-o", "/dev/null", url=url, **env
    )
    assert (code, "certificate" in err.lower()) == (1, True), err
    code, err = sealflow(
        tls_server, "encrypt", "--key", "default", "--cacert", str(tls_server.cert),
        "-o", "/dev/null", url=url, **env,
    )  # fmt: skip
    assert (code, err) == (0, "")
    code, err = sealflow(tls_server, "decrypt", "--cacert", "/nonexistent", url=url)
    assert (code, "--cacert" in err) == (2, True)


def test_a_tampered_input_over_https_says_decryption_failed(
    tls_server: Server, tmp_path: Path
) -> None:
    """TLS cannot half-close: the signal still arrives before the connection ends."""
    assert tls_server.cert is not None
    plain, sealed, out = tmp_path / "plain", tmp_path / "sealed", tmp_path / "out"
    plain.write_bytes(DATA)
    tls = ("--cacert", str(tls_server.cert))
    url = tls_server.https_url
    args = ("encrypt", "--key", "default", *tls, "-i", str(plain), "-o", str(sealed))
    assert sealflow(tls_server, *args, url=url) == (0, "")
    envelope = bytearray(sealed.read_bytes())
    envelope[-100_000] ^= 0x01
    sealed.write_bytes(envelope)
    for transport in ("--duplex", "--no-duplex"):
        opening = ("decrypt", transport, *tls, "-i", str(sealed), "-o", str(out))
        code, err = sealflow(tls_server, *opening, url=url)
        assert (code, err.startswith("sealflow: decrypt failed: decryption failed")) == (1, True), (
            err
        )
        assert not out.exists()
