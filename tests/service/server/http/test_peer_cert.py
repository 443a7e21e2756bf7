"""The verified TLS client certificate on each request's ``Head`` (``Head.peer_cert``), what a
login by certificate will match on: uvicorn serving sealflow's protocol with sealflow's TLS
contexts (``_tls.listener``) and an app that answers with what its head carries, called by
curl and httpx with client certificates."""

from __future__ import annotations

import functools
import hashlib
import json
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from cryptography.hazmat.primitives.serialization import Encoding

from sealflow.service.server import http
from sealflow.service.server.http import _tls
from tests.service import pki
from tests.service.conftest import free_port


async def echo(scope: Any, receive: Any, send: Any) -> None:
    """Answers with the head's client certificate, as JSON (null: none)."""
    assert scope["type"] == "http"
    head: http.Head = scope["sealflow.head"]
    cert = head.peer_cert
    fields = None
    if cert is not None:
        fields = {
            "connection_identity": id(cert),
            "subject": cert.subject,
            "common_name": cert.common_name,
            "organizational_units": list(cert.organizational_units),
            "issuer": cert.issuer,
            "serial": cert.serial,
            "not_after": cert.not_after.isoformat(),
            "fingerprint": cert.fingerprint,
            "dns_sans": list(cert.dns_sans),
            "uri_sans": list(cert.uri_sans),
            "email_sans": list(cert.email_sans),
            "ip_sans": list(cert.ip_sans),
            "authority": cert.authority(),
            "der": hashlib.sha256(cert.der).hexdigest(),
        }
    body = json.dumps(fields).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


class Served:
    def __init__(self, directory: Path) -> None:
        self.ca = pki.ca(directory, "clients-ca")
        self.server = pki.server_cert(self.ca, directory, "server")
        self.client = pki.issue(
            self.ca,
            directory,
            "orders-app",
            [
                (pki.NameOID.COMMON_NAME, "orders-app"),
                (pki.NameOID.ORGANIZATIONAL_UNIT_NAME, "payments"),
                (pki.NameOID.ORGANIZATION_NAME, "acme"),
            ],
            dns=("orders.internal",),
            uris=("spiffe://acme/orders",),
            emails=("orders@acme.test",),
            ips=("10.1.2.3",),
        )
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"https://localhost:{self.port}"

    def context(self, client: pki.Issued | None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.ca.cert_path)
        if client is not None:
            ctx.load_cert_chain(client.cert_path, client.key_path)
        return ctx


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    out = Served(tmp_path)
    files = _tls.Files(out.server.cert_path, out.server.key_path, out.ca.cert_path)
    config = uvicorn.Config(
        echo,
        host="127.0.0.1",
        port=out.port,
        http=http.HttpProtocol,
        ssl_context_factory=functools.partial(_tls.listener, files),
        lifespan="off",
        log_config=None,
        loop="uvloop",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    try:
        yield out
    finally:
        server.should_exit = True
        thread.join(30)
        _tls._active = None  # this test process serves nothing else


def expected(served: Served) -> dict[str, object]:
    cert = served.client.cert
    der = cert.public_bytes(Encoding.DER)
    return {
        "subject": "O=acme,OU=payments,CN=orders-app",
        "common_name": "orders-app",
        "organizational_units": ["payments"],
        "issuer": "CN=clients-ca",
        "serial": format(cert.serial_number, "x"),
        "not_after": cert.not_valid_after_utc.isoformat(),
        "fingerprint": hashlib.sha256(der).hexdigest(),
        "dns_sans": ["orders.internal"],
        "uri_sans": ["spiffe://acme/orders"],
        "email_sans": ["orders@acme.test"],
        "ip_sans": ["10.1.2.3"],
        "authority": hashlib.sha256(served.ca.cert.public_bytes(Encoding.DER)).hexdigest(),
        "der": hashlib.sha256(der).hexdigest(),
    }


def test_httpx_client_certificate_reaches_the_head(served: Served) -> None:
    with httpx.Client(base_url=served.url, verify=served.context(served.client)) as client:
        first = client.get("/anything").json()
        second = client.post("/v1/auth/cert/login", content=b"{}").json()
    # Read once for the connection: both requests carry the same object.
    assert first.pop("connection_identity") == second.pop("connection_identity")
    assert first == second == expected(served)
    with httpx.Client(base_url=served.url, verify=served.context(served.client)) as client:
        other = client.get("/anything").json()
    assert other.pop("connection_identity") is not None
    assert other == expected(served)


def test_curl_client_certificate_reaches_the_head(served: Served) -> None:
    done = subprocess.run(  # noqa: S603
        [  # noqa: S607 (curl from the PATH, as a user runs it)
            "curl",
            "--silent",
            "--show-error",
            "--cacert",
            str(served.ca.cert_path),
            "--cert",
            str(served.client.cert_path),
            "--key",
            str(served.client.key_path),
            f"{served.url}/x",
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    seen.pop("connection_identity")
    assert seen == expected(served)


def test_no_certificate_no_identity(served: Served) -> None:
    with httpx.Client(base_url=served.url, verify=served.context(None)) as client:
        assert client.get("/").json() is None
