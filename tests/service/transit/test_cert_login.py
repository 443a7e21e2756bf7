"""Vault's cert auth method on a real ``sealflow serve`` over TLS, with real clients (curl
``--cert``, httpx, hvac's ``auth.cert.login``): certificate roles, a login by the connection's
client certificate and the token it yields encrypting on Transit; a certificate of another CA,
one whose common name a role's rule refuses, and a connection without one, refused with
Vault's words; the certificate taken from the TLS connection only, never from a header or the
body. The role routes' shapes are compared with a real OpenBao dev server's, and the login's (its
auth block, its refusals) with OpenBao's over TLS (``bao server -dev -dev-tls``).

(``--tls-client-auth required`` refusing a client without a certificate during the handshake:
tests/service/server/test_tls_client.py, ``test_required_refuses_a_client_without_...``.)
"""

from __future__ import annotations

import json
import secrets
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import hvac
import hvac.exceptions
import pytest

from tests.service import pki
from tests.service.audit.records import files_of, lines
from tests.service.conftest import Server, free_port, start_server
from tests.service.server.test_auth import new_token
from tests.service.transit.conftest import Bao, bao_binary, unique

NO_CERT = "no client certificate found"
UNTRUSTED = "invalid certificate or no client certificate supplied"
NO_MATCH = "no chain matching all constraints could be found for this login certificate"
HOUR = 3600


@dataclass
class Tls:
    """A server that asks for client certificates of two CAs (its client CA bundle), the
    client certificates, and an admin client over TLS."""

    srv: Server
    dir: Path
    ca: pki.Issued
    other_ca: pki.Issued
    orders: pki.Issued  # CN orders-app, of ``ca``
    billing: pki.Issued  # CN billing-app, of ``ca``
    stranger: pki.Issued  # CN orders-app too, of ``other_ca``

    def client(self, cert: pki.Issued | None, token: str | None = None) -> httpx.Client:
        ctx = ssl.create_default_context(cafile=self.ca.cert_path)
        if cert is not None:
            ctx.load_cert_chain(cert.cert_path, cert.key_path)
        headers = {} if token is None else {"X-Vault-Token": token}
        return httpx.Client(base_url=self.srv.https_url, verify=ctx, headers=headers, timeout=30)

    def admin(self) -> httpx.Client:
        return self.client(None, self.srv.token)


def start(d: Path) -> Tls:
    ca, other_ca = pki.ca(d, "client-ca"), pki.ca(d, "other-ca")
    server = pki.server_cert(ca, d, "server")
    bundle = d / "client-cas.pem"
    bundle.write_bytes(ca.cert_path.read_bytes() + other_ca.cert_path.read_bytes())
    srv = start_server(
        d / "data",
        tls_cert=server.cert_path,
        tls_key=server.key_path,
        tls_client_ca=bundle,
        audit_file=d / "audit.log",
    )
    return Tls(
        srv,
        d,
        ca,
        other_ca,
        pki.client_cert(ca, d, "orders-app"),
        pki.client_cert(ca, d, "billing-app"),
        pki.client_cert(other_ca, d, "orders-app-other"),
    )


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tls]:
    started = start(tmp_path_factory.mktemp("cert-login"))
    try:
        yield started
    finally:
        started.srv.stop()


def role(tls: Tls, name: str, **fields: object) -> None:
    body = {"certificate": tls.ca.cert_path.read_text(), "token_policies": "encrypt:default"}
    with tls.admin() as admin:
        done = admin.post(f"/v1/auth/cert/certs/{name}", json={**body, **fields})
    assert done.status_code == 204, done.text


def curl(tls: Tls, cert: pki.Issued, *args: str) -> tuple[int, bytes]:
    done = subprocess.run(  # noqa: S603
        [  # noqa: S607 (curl from the PATH, as a user runs it)
            "curl",
            "--silent",
            "--show-error",
            "--cacert",
            str(tls.ca.cert_path),
            "--cert",
            str(cert.cert_path),
            "--key",
            str(cert.key_path),
            "--write-out",
            "\n%{http_code}",
            *args,
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    body, _, status = done.stdout.rpartition(b"\n")
    return int(status), body


def test_curl_logs_in_with_its_certificate_and_encrypts_with_the_token(tls: Tls) -> None:
    role(tls, "curl-web", token_ttl="1h", token_max_ttl="2h")  # noqa: S106 (durations)
    status, body = curl(
        tls, tls.orders, "--data", '{"name": "curl-web"}', f"{tls.srv.https_url}/v1/auth/cert/login"
    )
    assert status == 200, body
    auth = json.loads(body)["auth"]
    assert auth["policies"] == auth["token_policies"] == ["encrypt:default"]
    assert auth["metadata"]["cert_name"] == "curl-web"
    assert auth["metadata"]["common_name"] == "orders-app"
    assert (auth["orphan"], auth["renewable"], auth["lease_duration"]) == (True, True, HOUR)
    assert auth["accessor"].startswith("tok_")
    status, body = curl(
        tls,
        tls.orders,
        "--header",
        f"X-Vault-Token: {auth['client_token']}",
        "--data",
        '{"plaintext": "aGVsbG8="}',
        f"{tls.srv.https_url}/v1/transit/encrypt/default",
    )
    assert status == 200, body
    assert json.loads(body)["data"]["ciphertext"].startswith("vault:v1:")
    # The token is what the role grants, no more: decrypt is not in it.
    with tls.client(None, auth["client_token"]) as c:
        self_ = c.get("/v1/auth/token/lookup-self").json()["data"]
        assert (self_["display_name"], self_["orphan"]) == ("cert-curl-web", True)
        denied = c.post("/v1/transit/decrypt/default", json={"ciphertext": "vault:v1:AAAA"})
        assert denied.status_code == 403


def test_httpx_logs_in_without_a_role_name_and_encrypts(tls: Tls) -> None:
    """Without a name, the first role by name that trusts the certificate and whose rules it
    matches (here before every other test's role, by its name)."""
    role(tls, "a-first", allowed_common_names="orders-*", token_ttl=60)
    with tls.client(tls.orders) as c:
        login = c.post("/v1/auth/cert/login")
        assert login.status_code == 200, login.text
        auth = login.json()["auth"]
        assert auth["metadata"]["cert_name"] == "a-first"
        assert auth["metadata"]["common_name"] == "orders-app"
        assert auth["lease_duration"] == 60
        sealed = c.post(
            "/v1/transit/encrypt/default",
            json={"plaintext": "aGVsbG8="},
            headers={"X-Vault-Token": auth["client_token"]},
        )
        assert sealed.status_code == 200, sealed.text


def test_a_certificate_of_another_ca_is_refused(tls: Tls) -> None:
    """The handshake lets it in (the server's client CA bundle holds its CA); no role trusts it."""
    role(tls, "only-ours")
    with tls.client(tls.stranger) as c:
        assert c.get("/readyz").status_code == 200  # past the handshake
        for body in ({}, {"name": "only-ours"}):
            refused = c.post("/v1/auth/cert/login", json=body)
            assert (refused.status_code, refused.json()) == (400, {"errors": [UNTRUSTED]})


def test_a_rule_refuses_a_certificate_of_the_right_ca_with_the_wrong_common_name(
    tls: Tls,
) -> None:
    role(tls, "orders-only", allowed_common_names=["orders-*"], allowed_uri_sans="spiffe://*")
    with tls.client(tls.billing) as c:
        refused = c.post("/v1/auth/cert/login", json={"name": "orders-only"})
        assert (refused.status_code, refused.json()) == (400, {"errors": [NO_MATCH]})
    with tls.client(tls.orders) as c:
        assert c.post("/v1/auth/cert/login", json={"name": "orders-only"}).status_code == 200
    # Every rule must match: an OU rule the certificate fails refuses it too.
    role(tls, "orders-ou", allowed_common_names="orders-app", allowed_organizational_units="ops")
    with tls.client(tls.orders) as c:
        refused = c.post("/v1/auth/cert/login", json={"name": "orders-ou"})
        assert (refused.status_code, refused.json()) == (400, {"errors": [NO_MATCH]})


def test_the_certificate_comes_from_the_connection_only(tls: Tls) -> None:
    role(tls, "from-tls")
    pem = tls.orders.cert_path.read_text()
    with tls.client(None) as c:
        for headers in ({}, {"X-SSL-Client-Cert": quote(pem)}):
            refused = c.post(
                "/v1/auth/cert/login",
                json={"name": "from-tls", "certificate": pem},
                headers=headers,
            )
            assert (refused.status_code, refused.json()) == (400, {"errors": [NO_CERT]})
    # Plain HTTP has no certificate at all (a server without TLS answers the same).


def test_a_role_name_that_is_no_role_trusts_nothing(tls: Tls) -> None:
    with tls.client(tls.orders) as c:
        refused = c.post("/v1/auth/cert/login", json={"name": "no-such-role"})
        assert (refused.status_code, refused.json()) == (400, {"errors": [UNTRUSTED]})


def test_hvac_auth_cert_login(tls: Tls) -> None:
    role(tls, "hvac-web", token_ttl=600)
    client = hvac.Client(url=tls.srv.https_url, verify=str(tls.ca.cert_path))
    answer = client.auth.cert.login(
        name="hvac-web", cert_pem=str(tls.orders.cert_path), key_pem=str(tls.orders.key_path)
    )
    assert answer["auth"]["lease_duration"] == 600
    assert client.token == answer["auth"]["client_token"]
    sealed = client.secrets.transit.encrypt_data("default", "aGVsbG8=")
    assert sealed["data"]["ciphertext"].startswith("vault:v1:")
    # A certificate the role's rule refuses: hvac raises Vault's 400 with its words.
    role(tls, "hvac-narrow", allowed_common_names="orders-app")
    other = hvac.Client(url=tls.srv.https_url, verify=str(tls.ca.cert_path))
    with pytest.raises(hvac.exceptions.InvalidRequest, match="no chain matching"):
        other.auth.cert.login(
            name="hvac-narrow",
            cert_pem=str(tls.billing.cert_path),
            key_pem=str(tls.billing.key_path),
        )


def test_managing_roles_needs_admin_and_the_scopes_the_role_grants(tls: Tls) -> None:
    admin_only = new_token(tls.srv, "admin")
    data = new_token(tls.srv, "encrypt:default")
    body = {"certificate": tls.ca.cert_path.read_text(), "token_policies": "encrypt:default"}
    with tls.client(None, admin_only) as c:
        # admin without encrypt:default cannot make a role that logs in to it
        assert c.post("/v1/auth/cert/certs/grab", json=body).status_code == 403
        assert (
            c.post("/v1/auth/cert/certs/grab", json={**body, "token_policies": "admin"}).status_code
            == 204
        )
        assert c.get("/v1/auth/cert/certs/grab").status_code == 200
        assert c.delete("/v1/auth/cert/certs/grab").status_code == 204
    with tls.client(None, data) as c:
        assert c.get("/v1/auth/cert/certs", params={"list": "true"}).status_code == 403
        assert c.post("/v1/auth/cert/certs/grab", json=body).status_code == 403


def test_vault_fields_sealflow_lacks_are_refused_by_name(tls: Tls) -> None:
    body = {"certificate": tls.ca.cert_path.read_text(), "token_policies": "encrypt:default"}
    with tls.admin() as admin:
        for field, value in (("required_extensions", "1.2.3:*"), ("ocsp_enabled", True)):
            refused = admin.post("/v1/auth/cert/certs/x", json={**body, field: value})
            assert refused.status_code == 400
            assert field in refused.json()["errors"][0]
        bad = admin.post("/v1/auth/cert/certs/x", json={**body, "certificate": "junk"})
        assert (bad.status_code, bad.json()) == (400, {"errors": ["failed to parse certificate"]})
        assert admin.get("/v1/auth/cert/certs/x").status_code == 404


def test_logins_are_on_the_audit_trail_with_the_fingerprint(tmp_path: Path) -> None:
    tls = start(tmp_path)
    try:
        role(tls, "audited")
        with tls.client(tls.orders) as c:
            login = c.post("/v1/auth/cert/login", json={"name": "audited"})
            accessor = login.json()["auth"]["accessor"]
        with tls.client(tls.stranger) as c:
            assert c.post("/v1/auth/cert/login", json={"name": "audited"}).status_code == 400
    finally:
        tls.srv.stop()
    audit = tls.dir / "audit.log"
    records = [line.record for line in lines(files_of(audit))]  # each checked by the schema
    logins = [
        r for r in records if r.get("operation") == "login" and r.get("auth_method") == "cert"
    ]
    ok = next(r for r in logins if r.get("accessor") == accessor)
    assert (ok["type"], ok["status"], ok["role"]) == ("request", 200, "audited")
    assert ok["cert_fingerprint"] == tls.orders.fingerprint
    failed = [r for r in logins if r.get("cert_fingerprint") == tls.stranger.fingerprint]
    assert [(r["type"], r["status"], r["error"]) for r in failed] == [
        ("auth_failure", 400, "login_refused")
    ]
    made = [r for r in records if r.get("operation") == "cert_role_create"]
    assert "audited" in {r["role"] for r in made}
    text = audit.read_text()
    assert "PRIVATE KEY" not in text
    assert "BEGIN CERTIFICATE" not in text


# -- the role routes' shapes, against a real OpenBao


@pytest.fixture(scope="module")
def bao_cert(bao: Bao) -> Bao:
    admin = hvac.Client(url=bao.url, token=bao.token)
    if "cert/" not in admin.sys.list_auth_methods()["data"]:
        admin.sys.enable_auth_method("cert")
    return bao


def test_role_routes_answer_as_openbao(tls: Tls, bao_cert: Bao, tmp_path: Path) -> None:
    ca = pki.ca(tmp_path, "shape-ca")
    name = unique("shape")
    body = {
        "certificate": ca.cert_path.read_text(),
        "allowed_common_names": "orders-*,billing",
        "allowed_dns_sans": ["*.internal"],
        "token_policies": "encrypt:default",
        "token_ttl": "1h",
        "token_max_ttl": 7200,
        "display_name": "shape",
    }
    answers: dict[str, tuple[httpx.Response, ...]] = {}
    for target, url, token, verify in (
        ("bao", bao_cert.url, bao_cert.token, True),
        (
            "sealflow",
            tls.srv.https_url,
            tls.srv.token,
            ssl.create_default_context(cafile=tls.ca.cert_path),
        ),
    ):
        with httpx.Client(
            base_url=url, headers={"X-Vault-Token": token}, verify=verify, timeout=30
        ) as c:
            wrote = c.post(f"/v1/auth/cert/certs/{name}", json=body)
            read = c.get(f"/v1/auth/cert/certs/{name}")
            listed = c.request("LIST", "/v1/auth/cert/certs")
            gone = c.delete(f"/v1/auth/cert/certs/{name}")
            missing = c.get(f"/v1/auth/cert/certs/{name}")
            answers[target] = (wrote, read, listed, gone, missing)
    bao_, ours = answers["bao"], answers["sealflow"]
    assert (
        [r.status_code for r in ours] == [r.status_code for r in bao_] == [204, 200, 200, 204, 404]
    )
    theirs, mine = bao_[1].json()["data"], ours[1].json()["data"]
    assert mine == theirs
    assert name in ours[2].json()["data"]["keys"]
    assert set(ours[2].json()) == set(bao_[2].json())


# -- the login's shapes and refusals, against a real OpenBao over TLS (``-dev-tls``)


@dataclass
class BaoTls:
    url: str
    token: str
    ca: Path  # the CA of its server certificate


@pytest.fixture(scope="module")
def bao_tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BaoTls]:
    """``bao server -dev -dev-tls``: its listener asks every client for a certificate (and
    takes a connection without one), as Vault's does by default."""
    d = tmp_path_factory.mktemp("bao-tls")
    token, port = secrets.token_urlsafe(24), free_port()
    with (d / "bao.log").open("wb") as out:
        proc = subprocess.Popen(  # noqa: S603
            [
                bao_binary(),
                "server",
                "-dev",
                "-dev-tls",
                f"-dev-tls-cert-dir={d}",
                f"-dev-root-token-id={token}",
                f"-dev-listen-address=127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"https://127.0.0.1:{port}"
        deadline = time.monotonic() + 60  # a bound against a hang, not a timing check
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"bao -dev-tls did not start: {(d / 'bao.log').read_text()[-2000:]}")
            try:
                ctx = ssl.create_default_context(cafile=d / "vault-ca.pem")
                if httpx.get(f"{url}/v1/sys/health", verify=ctx).status_code == 200:
                    break
            except (httpx.TransportError, OSError):
                pass
            time.sleep(0.1)
        yield BaoTls(url, token, d / "vault-ca.pem")
    finally:
        proc.terminate()
        proc.wait(30)


def test_logins_answer_as_openbaos_over_tls(tls: Tls, bao_tls: BaoTls) -> None:
    pem = tls.ca.cert_path.read_text()
    body = {
        "certificate": pem,
        "token_policies": "encrypt:default",
        "allowed_common_names": "orders-*",
        "token_ttl": "1h",
    }
    name = unique("same")
    answers: dict[str, list[httpx.Response]] = {}
    targets = (
        ("bao", bao_tls.url, bao_tls.token, bao_tls.ca),
        ("sealflow", tls.srv.https_url, tls.srv.token, tls.ca.cert_path),
    )
    for target, url, token, server_ca in targets:

        def client(cert: pki.Issued | None, url: str = url, server_ca: Path = server_ca) -> Any:
            ctx = ssl.create_default_context(cafile=server_ca)
            if cert is not None:
                ctx.load_cert_chain(cert.cert_path, cert.key_path)
            return httpx.Client(base_url=url, verify=ctx, timeout=30)

        with client(None) as admin:
            headers = {"X-Vault-Token": token}
            if target == "bao":
                admin.post("/v1/sys/auth/cert", json={"type": "cert"}, headers=headers)
            made = admin.post(f"/v1/auth/cert/certs/{name}", json=body, headers=headers)
            assert made.status_code == 204, made.text
        answers[target] = []
        for cert, login in (
            (tls.orders, {"name": name}),
            (tls.billing, {"name": name}),  # the right CA, a CN the rule refuses
            (tls.stranger, {"name": name}),  # another CA
            (None, {"name": name}),  # no certificate
            (tls.orders, {"name": "no-such-role"}),
        ):
            with client(cert) as c:
                answers[target].append(c.post("/v1/auth/cert/login", json=login))
    theirs, ours = answers["bao"], answers["sealflow"]
    assert [r.status_code for r in ours] == [r.status_code for r in theirs] == [200, *[400] * 4]
    assert [r.json() for r in ours[1:]] == [r.json() for r in theirs[1:]]
    their_auth, our_auth = theirs[0].json()["auth"], ours[0].json()["auth"]
    assert set(our_auth) == set(their_auth)
    assert our_auth["metadata"] == their_auth["metadata"]  # same certificate, same role name
    for field in ("lease_duration", "renewable", "orphan", "token_type", "num_uses"):
        assert our_auth[field] == their_auth[field], field
    # OpenBao adds its "default" policy; sealflow has none (docs/TRANSIT.md, Cert).
    assert their_auth["policies"] == ["default", *our_auth["policies"]]
    assert set(ours[0].json()) == set(theirs[0].json())


def test_a_role_from_the_cli_logs_in_over_tls(tls: Tls) -> None:
    made = tls.srv.cli(
        "cert", "role", "create", "Cli-Web", "--certificate", str(tls.ca.cert_path),
        "--scope", "encrypt:default", "--allowed-common-name", "orders-*", "--token-ttl", "10m",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    shown = json.loads(made.stdout)
    assert (shown["name"], shown["allowed_common_names"], shown["token_ttl"]) == (
        "cli-web",
        ["orders-*"],
        600,
    )
    with tls.client(tls.orders) as c:
        auth = c.post("/v1/auth/cert/login", json={"name": "cli-web"}).json()["auth"]
        assert (auth["metadata"]["cert_name"], auth["lease_duration"]) == ("cli-web", 600)
    with tls.client(tls.billing) as c:
        refused = c.post("/v1/auth/cert/login", json={"name": "cli-web"})
        assert refused.json() == {"errors": [NO_MATCH]}
    assert "cli-web" in [r["name"] for r in json.loads(tls.srv.cli("cert", "role", "list").stdout)]
    assert json.loads(tls.srv.cli("cert", "role", "show", "cli-web").stdout) == shown
    assert tls.srv.cli("cert", "role", "delete", "cli-web").returncode == 0
    gone = tls.srv.cli("cert", "role", "show", "cli-web")
    assert (gone.returncode, b"does not exist" in gone.stderr) == (1, True)
    no_ca = tls.srv.cli("cert", "role", "create", "x", "--scope", "encrypt:default")
    assert (no_ca.returncode, b"missing certificate" in no_ca.stderr) == (1, True)


def test_cert_paths_sealflow_does_not_serve_are_vaults_404(tls: Tls) -> None:
    role(tls, "listed")
    with tls.admin() as admin:
        for path in ("/crls/x", "/config", "/certs/x/extra"):
            missing = admin.post(f"/v1/auth/cert{path}", json={})
            assert missing.status_code == 404, path
            assert "unsupported path" in missing.json()["errors"][0]
        assert "listed" in admin.get("/v1/auth/cert/certs?list=true").json()["data"]["keys"]
        assert admin.get("/v1/auth/cert/certs").status_code == 405  # a read is not a listing
