"""Transit's signatures, RSA-OAEP and public/signing key export, against a real OpenBao dev
server: the same bad requests give the same status codes and words; under the same key
material (an exportable OpenBao key, exported and imported into sealflow through the BYOK
import) ed25519 signatures are identical, and ECDSA and RSA signatures and RSA-OAEP ciphertexts
made by either side verify or decrypt on the other; hvac's ``sign_data``,
``verify_signed_data`` and ``export_key`` work unchanged; and the scopes each route needs."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from typing import Any

import httpx
import hvac
import pytest
from cryptography.hazmat.primitives import serialization

from tests.service.byok import wrap
from tests.service.conftest import Server
from tests.service.server.test_auth import new_token
from tests.service.transit.conftest import Bao, unique

SIGNING_TYPES = ("ed25519", "ecdsa-p256", "ecdsa-p384", "ecdsa-p521", "rsa-2048")
INPUT = base64.b64encode(b"the message").decode()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class Side:
    """One server's Transit over raw HTTP, for requests hvac would not send as they are."""

    def __init__(self, url: str, token: str) -> None:
        self.http = httpx.Client(base_url=url + "/v1/transit/", timeout=120)
        self.token = token

    def post(self, path: str, body: Any, token: str | None = None) -> httpx.Response:
        return self.http.post(path, json=body, headers={"X-Vault-Token": token or self.token})

    def get(self, path: str, token: str | None = None) -> httpx.Response:
        return self.http.get(path, headers={"X-Vault-Token": token or self.token})

    def data(self, path: str, body: Any = None) -> Any:
        answer = self.get(path) if body is None else self.post(path, body)
        assert answer.status_code == 200, (path, answer.text)
        return answer.json()["data"]


@pytest.fixture(scope="module")
def sides(server: Server, bao: Bao) -> Iterator[tuple[Side, Side]]:
    both = Side(bao.url, bao.token), Side(server.url, server.token)
    yield both
    for side in both:
        side.http.close()


@pytest.fixture(scope="module")
def keys(sides: tuple[Side, Side]) -> dict[str, str]:
    """One key per type on both sides, under the same name; and an AES key."""
    names = {kind: unique(f"sig-{kind}") for kind in (*SIGNING_TYPES, "aes256-gcm96")}
    for side in sides:
        for kind, name in names.items():
            assert side.post(f"keys/{name}", {"type": kind}).status_code in (200, 204)
    return names


def shared(sides: tuple[Side, Side], kind: str) -> str:
    """A key of ``kind`` made exportable in OpenBao, its signing key exported as PKCS#8 and
    imported into sealflow under the same name: the same material on both sides."""
    theirs, ours = sides
    name = unique(f"shared-{kind}")
    theirs.data(f"keys/{name}", {"type": kind, "exportable": True})
    exported = theirs.data(f"export/signing-key/{name}/1?format=der")["keys"]["1"]
    pkcs8 = base64.b64decode(exported)
    pem = ours.data("wrapping_key")["public_key"]
    body = {"type": kind, "ciphertext": wrap(pem, pkcs8), "exportable": True}
    answer = ours.post(f"keys/{name}/import", body)
    assert answer.status_code == 204, answer.text
    return name


# The bad requests (path under the mount with {name} for the key of the type named, and body).
BAD_SIGNS = [
    ("ed25519", "sign/{name}", {"input": INPUT, "hash_algorithm": "nope"}),
    ("ed25519", "sign/{name}", {"input": INPUT, "marshaling_algorithm": "der"}),
    ("ed25519", "sign/{name}", {"input": INPUT, "salt_length": "x"}),
    ("ed25519", "sign/{name}", {"input": INPUT, "salt_length": "-2"}),
    ("ed25519", "sign/{name}", {"input": "***"}),
    ("ed25519", "sign/{name}", {"input": INPUT, "context": "**"}),
    ("ecdsa-p256", "sign/{name}", {"input": INPUT, "hash_algorithm": "none"}),
    ("rsa-2048", "sign/{name}", {"input": INPUT, "hash_algorithm": "none", "prehashed": True}),
    ("ed25519", "sign/{name}", {"batch_input": []}),
    ("ed25519", "sign/{name}", {"input": INPUT, "key_version": 2}),
    ("ed25519", "sign/{name}", {"input": INPUT, "key_version": -1}),
    ("ed25519", "sign/{name}", {"input": INPUT, "prehashed": "maybe"}),
    ("ed25519", "sign/missing-key", {"input": INPUT}),
    ("aes256-gcm96", "sign/{name}", {"input": INPUT}),
    ("rsa-2048", "sign/{name}", {"input": INPUT, "prehashed": True}),
    ("rsa-2048", "sign/{name}", {"input": INPUT, "salt_length": "1000"}),
    ("rsa-2048", "sign/{name}", {"input": INPUT, "signature_algorithm": "PSS"}),
    ("rsa-2048", "sign/{name}/nope", {"input": INPUT, "hash_algorithm": "sha2-512"}),
]
BAD_VERIFIES = [
    ("ed25519", "verify/{name}", {"input": INPUT}),
    ("ed25519", "verify/{name}", {"input": INPUT, "signature": "x"}),
    ("ed25519", "verify/{name}", {"input": INPUT, "signature": "vault:v1"}),
    ("ed25519", "verify/{name}", {"input": INPUT, "signature": "vault:vx:AAAA"}),
    ("ed25519", "verify/{name}", {"input": INPUT, "signature": "vault:v9:AAAA"}),
    ("ed25519", "verify/{name}", {"input": INPUT, "signature": "vault:v0:AAAA"}),
    ("ed25519", "verify/{name}", {"input": INPUT, "signature": "vault:v1:***"}),
    ("ed25519", "verify/{name}", {"input": "**", "signature": "vault:v1:AAAA"}),
    ("ed25519", "verify/{name}", {"input": INPUT, "signature": "vault:v1:AAAA", "context": "*"}),
    (
        "ed25519",
        "verify/{name}",
        {"input": INPUT, "signature": "vault:v1:AAAA=", "marshaling_algorithm": "jws"},
    ),
    ("ed25519", "verify/{name}", {"batch_input": []}),
    ("ed25519", "verify/{name}", {"batch_input": [{"input": INPUT}]}),
    (
        "ed25519",
        "verify/{name}",
        {"batch_input": [{"input": INPUT, "signature": "vault:v1:AAAA"}, {"input": INPUT}]},
    ),
    ("ed25519", "verify/missing-key", {"input": INPUT, "signature": "vault:v1:AAAA"}),
    ("aes256-gcm96", "verify/{name}", {"input": INPUT, "signature": "vault:v1:AAAA"}),
    ("ecdsa-p256", "verify/{name}", {"input": INPUT, "signature": "vault:v1:AAAA"}),
    ("ecdsa-p256", "verify/{name}", {"input": INPUT, "signature": "vault:v1:MAYCAQECAQEA"}),
    (
        "rsa-2048",
        "verify/{name}",
        {"input": INPUT, "signature": "vault:v1:AAAA", "salt_length": "9999"},
    ),
    (
        "rsa-2048",
        "verify/{name}",
        {"input": INPUT, "signature": "vault:v1:AAAA", "signature_algorithm": "x"},
    ),
    (
        "ecdsa-p256",
        "verify/{name}",
        {"input": INPUT, "signature": "vault:v1:AAAA", "hash_algorithm": "none"},
    ),
]
# Requests both answer 200 without the key material deciding the answer.
SAME_ANSWERS = [
    ("ed25519", "verify/{name}", {"input": INPUT, "signature": "vault:v1:AAAA"}),
    ("rsa-2048", "verify/{name}", {"input": INPUT, "signature": "vault:v1:AAAA"}),
    (
        "rsa-2048",
        "verify/{name}",
        {"input": INPUT, "signature": "vault:v+1:AAAA", "prehashed": True},
    ),
    (
        "ecdsa-p256",
        "verify/{name}",
        {"input": INPUT, "signature": "vault:v1:AAAA", "marshaling_algorithm": "jws"},
    ),
    (
        "ed25519",
        "verify/{name}",
        {
            "batch_input": [
                {"input": INPUT, "signature": "vault:v1:AAAA", "reference": "r"},
                {"signature": "vault:v1:AAAA"},
                {"input": INPUT, "signature": "zz"},
            ]
        },
    ),
    ("ed25519", "sign/{name}", {"batch_input": [{"input": "**", "reference": "a"}, {}]}),
    ("ed25519", "sign/{name}", {"batch_input": [{"input": INPUT}], "key_version": 3}),
    ("rsa-2048", "sign/{name}", {"batch_input": [{"input": INPUT}], "salt_length": "1000"}),
]


@pytest.mark.parametrize(("kind", "path", "body"), BAD_SIGNS + BAD_VERIFIES)
def test_bad_requests_get_openbaos_status_and_words(
    sides: tuple[Side, Side], keys: dict[str, str], kind: str, path: str, body: Any
) -> None:
    answers = [side.post(path.format(name=keys[kind]), body) for side in sides]
    theirs, ours = answers
    assert theirs.status_code >= 400, theirs.text
    assert (ours.status_code, ours.json()) == (theirs.status_code, theirs.json())


@pytest.mark.parametrize(("kind", "path", "body"), SAME_ANSWERS)
def test_answers_the_material_does_not_decide_are_openbaos(
    sides: tuple[Side, Side], keys: dict[str, str], kind: str, path: str, body: Any
) -> None:
    theirs, ours = (side.data(path.format(name=keys[kind]), body) for side in sides)
    assert ours == theirs


@pytest.mark.parametrize("marshaling", ["asn1", "jws"])
def test_ed25519_signatures_are_identical_under_shared_material(
    sides: tuple[Side, Side], marshaling: str
) -> None:
    name = shared(sides, "ed25519")
    body: dict[str, Any] = {"batch_input": [{"input": INPUT}, {"input": b64(os.urandom(100))}]}
    body["marshaling_algorithm"] = marshaling
    theirs, ours = (side.data(f"sign/{name}", body)["batch_results"] for side in sides)
    assert ours == theirs
    single = {"input": INPUT, "marshaling_algorithm": marshaling}
    assert sides[1].data(f"sign/{name}", single) == sides[0].data(f"sign/{name}", single)


@pytest.mark.parametrize("kind", ["ecdsa-p256", "ecdsa-p384", "ecdsa-p521", "rsa-2048"])
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"hash_algorithm": "sha3-384"},
        {"marshaling_algorithm": "jws"},
        {"prehashed": True, "input": b64(os.urandom(32))},
        {"signature_algorithm": "pkcs1v15", "hash_algorithm": "sha2-512"},
        {"salt_length": "hash"},
        {"salt_length": "20"},
    ],
)
def test_signatures_verify_on_the_other_side(
    sides: tuple[Side, Side], kind: str, options: dict[str, Any]
) -> None:
    name = _shared_once(sides, kind)
    body = {"input": INPUT, **options}
    for signer, verifier in (sides, sides[::-1]):
        signature = signer.data(f"sign/{name}", body)["signature"]
        assert verifier.data(f"verify/{name}", {**body, "signature": signature}) == {"valid": True}
        another = os.urandom(32) if body.get("prehashed") else b"another message"
        other = {**body, "input": b64(another)}
        wrong = verifier.data(f"verify/{name}", {**other, "signature": signature})
        assert wrong == {"valid": False}


@pytest.mark.parametrize("kind", ["ecdsa-p256", "ecdsa-p384", "ecdsa-p521"])
@pytest.mark.parametrize("size", [5, 33, 64])
def test_prehashed_ecdsa_inputs_of_any_length_verify_on_the_other_side(
    sides: tuple[Side, Side], kind: str, size: int
) -> None:
    """Go signs a digest of any length (truncated to the curve's order); so does sealflow."""
    name = _shared_once(sides, kind)
    body = {"input": b64(os.urandom(size)), "prehashed": True}
    for signer, verifier in (sides, sides[::-1]):
        signature = signer.data(f"sign/{name}", body)["signature"]
        assert verifier.data(f"verify/{name}", {**body, "signature": signature})["valid"]


_SHARED: dict[str, str] = {}


def _shared_once(sides: tuple[Side, Side], kind: str) -> str:
    if kind not in _SHARED:
        _SHARED[kind] = shared(sides, kind)
    return _SHARED[kind]


def test_rsa_oaep_ciphertexts_decrypt_on_the_other_side(sides: tuple[Side, Side]) -> None:
    name = _shared_once(sides, "rsa-2048")
    plaintext = b64(os.urandom(190))
    for sealer, opener in (sides, sides[::-1]):
        ciphertext = sealer.data(f"encrypt/{name}", {"plaintext": plaintext})["ciphertext"]
        assert ciphertext.startswith("vault:v1:")
        assert opener.data(f"decrypt/{name}", {"ciphertext": ciphertext}) == {
            "plaintext": plaintext
        }
        batch = {"batch_input": [{"ciphertext": ciphertext, "reference": "x"}]}
        assert opener.data(f"decrypt/{name}", batch)["batch_results"] == [
            {"plaintext": plaintext, "reference": "x"}
        ]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("encrypt/{name}", {"plaintext": INPUT, "associated_data": "AAAA"}),
        ("encrypt/{name}", {"plaintext": b64(b"x" * 300)}),
        ("encrypt/{name}", {"plaintext": INPUT, "key_version": 5}),
        ("decrypt/{name}", {"ciphertext": "vault:v1:AAAA"}),
        ("decrypt/{name}", {"ciphertext": "vault:v1:***"}),
        ("decrypt/{name}", {"ciphertext": "vault:v2:AAAA"}),
    ],
)
def test_rsa_oaep_refusals_are_openbaos(
    sides: tuple[Side, Side], keys: dict[str, str], path: str, body: Any
) -> None:
    theirs, ours = (side.post(path.format(name=keys["rsa-2048"]), body) for side in sides)
    assert (ours.status_code, ours.json()) == (theirs.status_code, theirs.json())


def test_rsa_encryptions_are_leased(server: Server, sides: tuple[Side, Side]) -> None:
    """Each RSA encryption counts against the version, as every sealing does."""
    ours = sides[1]
    name = unique("oaep-usage")
    ours.data(f"keys/{name}", {"type": "rsa-2048"})
    batch = {"batch_input": [{"plaintext": INPUT} for _ in range(3)]}
    assert len(ours.data(f"encrypt/{name}", batch)["batch_results"]) == 3
    ours.data(f"encrypt/{name}", {"plaintext": INPUT})
    usage = ours.data(f"keys/{name}")["sealflow_usage"]
    assert usage["versions"]["1"]["encryptions"] >= 4
    assert usage["encryptions_left"] <= usage["max_encryptions"] - 4


@pytest.mark.parametrize("kind", SIGNING_TYPES)
@pytest.mark.parametrize("form", ["", "der", "pem"])
def test_exported_keys_match_openbaos(sides: tuple[Side, Side], kind: str, form: str) -> None:
    name = _shared_once(sides, kind)
    query = f"?format={form}" if form else ""
    for export in ("public-key", "signing-key"):
        theirs, ours = (side.data(f"export/{export}/{name}{query}") for side in sides)
        assert ours["type"] == theirs["type"] == kind
        if export == "public-key" or (kind == "ed25519" and form in ("", "raw")):
            assert ours["keys"] == theirs["keys"]
        else:  # the same key, encoded by another library
            assert _private_numbers(ours["keys"]["1"], form) == _private_numbers(
                theirs["keys"]["1"], form
            )


def _private_numbers(text: str, form: str) -> Any:
    raw = base64.b64decode(text) if form == "der" else None
    key = (
        serialization.load_der_private_key(raw, None)
        if raw is not None
        else serialization.load_pem_private_key(text.encode(), None)
    )
    return key.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@pytest.mark.parametrize("form", ["", "der", "pem"])
def test_an_rsa_keys_encryption_key_is_its_private_key_as_openbao_exports_it(
    sides: tuple[Side, Side], form: str
) -> None:
    name = _shared_once(sides, "rsa-2048")
    query = f"?format={form}" if form else ""
    theirs, ours = (side.data(f"export/encryption-key/{name}{query}") for side in sides)
    assert ours["type"] == theirs["type"] == "rsa-2048"
    assert _private_numbers(ours["keys"]["1"], form) == _private_numbers(theirs["keys"]["1"], form)


@pytest.mark.parametrize(
    "path",
    [
        "export/signing-key/{name}",
        "export/public-key/{name}?format=bad",
        "export/public-key/{aes}",
        "export/signing-key/{name}/7",
        "export/signing-key/{name}/x",
        "export/nothing/{name}",
    ],
)
def test_export_refusals_are_openbaos(
    sides: tuple[Side, Side], keys: dict[str, str], path: str
) -> None:
    url = path.format(name=keys["ed25519"], aes=keys["aes256-gcm96"])
    theirs, ours = (side.get(url) for side in sides)
    assert (ours.status_code, ours.json()) == (theirs.status_code, theirs.json())


def test_hvac_sign_verify_and_export(vault: hvac.Client, sides: tuple[Side, Side]) -> None:
    name = unique("hvac-sign")
    vault.secrets.transit.create_key(name, key_type="ecdsa-p256", exportable=True)
    signed = vault.secrets.transit.sign_data(name, hash_input=INPUT, hash_algorithm="sha2-384")
    signature = signed["data"]["signature"]
    verified = vault.secrets.transit.verify_signed_data(
        name, hash_input=INPUT, signature=signature, hash_algorithm="sha2-384"
    )
    assert verified["data"]["valid"] is True
    exported = vault.secrets.transit.export_key(name, key_type="signing-key", version="latest")
    assert exported["data"]["keys"]["1"].startswith("-----BEGIN EC PRIVATE KEY-----")
    # hvac 2.4's export_key knows no public-key: its generic read does.
    public = vault.read(f"transit/export/public-key/{name}")
    assert public["data"]["keys"]["1"].startswith("-----BEGIN PUBLIC KEY-----")


def test_scopes(server: Server, sides: tuple[Side, Side]) -> None:
    """sign:<name> signs, verify:<name> verifies and reads the public key; neither implies the
    other, nor does admin; the signing key needs admin and export:<name>."""
    ours = sides[1]
    name = unique("scoped-sign")
    ours.data(f"keys/{name}", {"type": "ed25519", "exportable": True})
    signer = new_token(server, f"sign:{name}")
    verifier = new_token(server, f"verify:{name}")
    admin = new_token(server, "admin")
    exporter = new_token(server, "admin", f"export:{name}")
    signature = ours.post(f"sign/{name}", {"input": INPUT}, signer).json()["data"]["signature"]
    for token in (verifier, admin):
        assert ours.post(f"sign/{name}", {"input": INPUT}, token).status_code == 403
    body = {"input": INPUT, "signature": signature}
    assert ours.post(f"verify/{name}", body, verifier).json()["data"] == {"valid": True}
    for token in (signer, admin):
        assert ours.post(f"verify/{name}", body, token).status_code == 403
    for token in (verifier, admin):
        assert ours.get(f"export/public-key/{name}", token).status_code == 200
    assert ours.get(f"export/public-key/{name}", signer).status_code == 403
    for token in (signer, verifier, admin):
        assert ours.get(f"export/signing-key/{name}", token).status_code == 403
    assert ours.get(f"export/signing-key/{name}", exporter).status_code == 200


def test_rsa_without_digest_info_verifies_and_is_not_signed(sides: tuple[Side, Side]) -> None:
    """``hash_algorithm=none`` (PKCS#1 v1.5 without a DigestInfo): OpenBao's signature
    verifies here; signing one is a 400 naming it (cryptography cannot)."""
    theirs, ours = sides
    name = _shared_once(sides, "rsa-2048")
    body = {
        "input": b64(os.urandom(48)),
        "hash_algorithm": "none",
        "prehashed": True,
        "signature_algorithm": "pkcs1v15",
    }
    signature = theirs.data(f"sign/{name}", body)["signature"]
    assert ours.data(f"verify/{name}", {**body, "signature": signature}) == {"valid": True}
    tampered = {**body, "input": b64(os.urandom(48)), "signature": signature}
    assert ours.data(f"verify/{name}", tampered) == {"valid": False}
    refused = ours.post(f"sign/{name}", body)
    assert refused.status_code == 400
    assert "not supported by sealflow" in refused.json()["errors"][0]


def test_a_sign_batch_is_bounded_as_every_transit_batch(make_server: Any) -> None:
    srv = make_server(max_batch_items=2)
    side = Side(srv.url, srv.token)
    try:
        name = unique("bounded")
        side.data(f"keys/{name}", {"type": "ed25519"})
        two = {"batch_input": [{"input": INPUT}] * 2}
        assert len(side.data(f"sign/{name}", two)["batch_results"]) == 2
        refused = side.post(f"sign/{name}", {"batch_input": [{"input": INPUT}] * 3})
        assert refused.status_code == 400
        assert refused.json() == {
            "errors": ["failed to parse batch input: more than 2 items in one request"]
        }
    finally:
        side.http.close()


def test_derived_ed25519_signatures_are_identical_under_shared_material(
    sides: tuple[Side, Side],
) -> None:
    """A derived ed25519 key signs with a key derived from each context, as OpenBao derives it
    (HKDF-SHA256 of Go's 64-byte private key): the same signature and public key on both."""
    theirs, ours = sides
    name = unique("derived-ed25519")
    theirs.data(f"keys/{name}", {"type": "ed25519", "exportable": True, "derived": True})
    pkcs8 = base64.b64decode(theirs.data(f"export/signing-key/{name}/1?format=der")["keys"]["1"])
    pem = ours.data("wrapping_key")["public_key"]
    body = {"type": "ed25519", "ciphertext": wrap(pem, pkcs8), "derived": True}
    answer = ours.post(f"keys/{name}/import", {**body, "kdf": "hkdf_sha256"})
    assert answer.status_code == 204, answer.text
    for context in (b"tenant-1", b"tenant-2"):
        request = {"input": INPUT, "context": b64(context)}
        signed = [side.data(f"sign/{name}", request) for side in sides]
        assert signed[1] == signed[0]
        assert signed[0]["public_key"]
        for side in sides:
            valid = side.data(f"verify/{name}", {**request, "signature": signed[0]["signature"]})
            assert valid == {"valid": True}
    batch = {"batch_input": [{"input": INPUT, "context": b64(b"t"), "reference": "r"}]}
    assert ours.data(f"sign/{name}", batch) == theirs.data(f"sign/{name}", batch)
    for path, extra in (("sign", {}), ("verify", {"signature": "vault:v1:AAAA"})):
        refused = [side.post(f"{path}/{name}", {"input": INPUT, **extra}) for side in sides]
        assert (refused[1].status_code, refused[1].json()) == (
            refused[0].status_code,
            refused[0].json(),
        )
