"""TLS client certificates (``--tls-client-ca``, ``--tls-client-auth``) on a real ``sealflow
serve``, with real clients: curl ``--cert``, httpx, and Python's ssl for the handshake itself."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.service import pki
from tests.service.conftest import SEALFLOW, Server

MakeServer = Any


class Pki:
    """A CA with a server certificate and a client certificate, and a second CA's client."""

    def __init__(self, directory: Path) -> None:
        self.ca = pki.ca(directory, "client-ca")
        self.server = pki.server_cert(self.ca, directory, "server")
        self.client = pki.client_cert(self.ca, directory, "orders-app")
        self.other_ca = pki.ca(directory, "other-ca")
        self.stranger = pki.client_cert(self.other_ca, directory, "stranger")

    def settings(self, **more: object) -> dict[str, object]:
        return {
            "tls_cert": self.server.cert_path,
            "tls_key": self.server.key_path,
            "tls_client_ca": self.ca.cert_path,
            **more,
        }


@pytest.fixture
def certs(tmp_path: Path) -> Pki:
    return Pki(tmp_path / "pki")


def context(certs: Pki, client: pki.Issued | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=certs.ca.cert_path)
    if client is not None:
        ctx.load_cert_chain(client.cert_path, client.key_path)
    return ctx


def curl(srv: Server, certs: Pki, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(  # noqa: S603
        [  # noqa: S607 (curl from the PATH, as a user runs it)
            "curl",
            "--silent",
            "--show-error",
            "--cacert",
            str(certs.ca.cert_path),
            "--header",
            f"authorization: Bearer {srv.token}",
            *args,
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )


def curl_encrypt(
    srv: Server, certs: Pki, client: pki.Issued | None, *args: str
) -> subprocess.CompletedProcess[bytes]:
    cert = (
        [] if client is None else ["--cert", str(client.cert_path), "--key", str(client.key_path)]
    )
    return curl(
        srv,
        certs,
        *cert,
        *args,
        "--write-out",
        "\n%{http_code}",
        "--data-binary",
        "sealed by curl",
        f"{srv.https_url}/v1/keys/default/encrypt",
    )


def test_clients_with_a_certificate_of_the_ca(make_server: MakeServer, certs: Pki) -> None:
    srv = make_server(**certs.settings())
    done = curl_encrypt(srv, certs, certs.client)
    assert done.returncode == 0, done.stderr
    envelope, _, status = done.stdout.rpartition(b"\n")
    assert status == b"200"
    headers = {"authorization": f"Bearer {srv.token}"}
    with httpx.Client(base_url=srv.https_url, verify=context(certs, certs.client)) as client:
        assert client.post("/v1/decrypt", content=envelope, headers=headers).content == (
            b"sealed by curl"
        )
        sealed = client.post("/v1/keys/default/encrypt", content=b"httpx", headers=headers)
        assert sealed.status_code == 200
        assert client.post("/v1/decrypt", content=sealed.content, headers=headers).content == (
            b"httpx"
        )
        # The server did ask: the connection carries the certificate httpx presented.
        stream = sealed.extensions["network_stream"]
        assert stream.get_extra_info("ssl_object").version() in ("TLSv1.2", "TLSv1.3")


def test_optional_lets_a_client_without_a_certificate_in(
    make_server: MakeServer, certs: Pki
) -> None:
    srv = make_server(**certs.settings())  # optional: the default with a client CA
    done = curl_encrypt(srv, certs, None)
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith(b"\n200")


def test_a_certificate_of_another_ca_is_refused(make_server: MakeServer, certs: Pki) -> None:
    srv = make_server(**certs.settings())
    refused_in_the_handshake(srv, certs, certs.stranger)
    with (
        httpx.Client(base_url=srv.https_url, verify=context(certs, certs.stranger)) as client,
        pytest.raises(httpx.TransportError),
    ):
        client.get("/readyz")
    # The CA's own client still gets in.
    assert exchange(srv.port, context(certs, certs.client)).startswith(b"HTTP/1.1 200 ")


def refused_in_the_handshake(srv: Server, certs: Pki, client: pki.Issued | None) -> None:
    """The server ends the handshake: no HTTP answer ever comes.

    The server's fatal alert (unknown_ca, certificate_required) is not on the wire: uvloop's
    SSL transport, like asyncio's before CPython gh-98078, closes the connection without
    flushing it. So a TLS 1.2 client sees its handshake fail with an EOF, and a TLS 1.3
    client, whose side of the handshake is over before the server checks its certificate,
    sees the connection end before any byte of an answer.
    """
    assert exchange(srv.port, context(certs, client)) == b""  # TLS 1.3: nothing
    tls12 = context(certs, client)
    tls12.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        handshake(srv.port, tls12)
    done = curl_encrypt(srv, certs, client)
    assert done.returncode in (52, 56), (done.returncode, done.stderr)  # after the handshake
    assert done.stdout == b"\n000"  # no status came
    done = curl_encrypt(srv, certs, client, "--tls-max", "1.2")
    assert done.returncode == 35, (done.returncode, done.stderr)  # SSL connect error
    assert done.stdout == b"\n000"


def handshake(port: int, ctx: ssl.SSLContext) -> str | None:
    """A handshake alone; the TLS version it agreed."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname="localhost") as conn,
    ):
        return conn.version()


def exchange(port: int, ctx: ssl.SSLContext) -> bytes:
    """A handshake, one GET /readyz, and all that came back until the connection closed."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname="localhost") as conn,
    ):
        conn.sendall(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := conn.recv(4096):
            answer += chunk
        return answer


def test_required_refuses_a_client_without_a_certificate_in_the_handshake(
    make_server: MakeServer, certs: Pki
) -> None:
    client = (certs.client.cert_path, certs.client.key_path)
    srv = make_server(**certs.settings(tls_client_auth="required"), probe_cert=client)
    refused_in_the_handshake(srv, certs, None)
    # With the CA's certificate, curl, httpx and Python's ssl get their answers.
    done = curl_encrypt(srv, certs, certs.client)
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith(b"\n200")
    assert exchange(srv.port, context(certs, certs.client)).startswith(b"HTTP/1.1 200 ")
    tls12 = context(certs, certs.client)
    tls12.maximum_version = ssl.TLSVersion.TLSv1_2
    assert handshake(srv.port, tls12) == "TLSv1.2"
    with httpx.Client(base_url=srv.https_url, verify=context(certs, certs.client)) as c:
        assert c.get("/readyz").status_code == 200
    # A certificate from another CA is refused in this mode too.
    refused_in_the_handshake(srv, certs, certs.stranger)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"tls_client_auth": "required"}, "--tls-client-auth (SEALFLOW_TLS_CLIENT_AUTH) needs"),
        ({"tls_client_ca": "ca.pem"}, "--tls-client-ca (SEALFLOW_TLS_CLIENT_CA) needs --tls-cert"),
    ],
)
def test_client_settings_that_do_not_go_alone(
    tmp_path: Path, settings: dict[str, str], message: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEALFLOW_")}
    env.update({f"SEALFLOW_{k.upper()}": v for k, v in settings.items()})
    done = subprocess.run(  # noqa: S603
        [SEALFLOW, "serve", "--data-dir", str(tmp_path), "--port", "0"],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert message in done.stderr.decode()


def test_a_bad_client_ca_file_stops_the_start(tmp_path: Path, certs: Pki) -> None:
    bad = tmp_path / "not-a-ca.pem"
    bad.write_text("not PEM at all\n")
    done = subprocess.run(  # noqa: S603
        [
            SEALFLOW,
            "serve",
            "--data-dir",
            str(tmp_path / "data"),
            "--tls-cert",
            str(certs.server.cert_path),
            "--tls-key",
            str(certs.server.key_path),
            "--tls-client-ca",
            str(bad),
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert f"{bad} holds no PEM certificate" in done.stderr.decode()
