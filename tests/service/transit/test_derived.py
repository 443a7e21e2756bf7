"""Derived keys and convergent encryption, against a real OpenBao dev server, through hvac.

The same key material in both: a key made ``exportable`` and ``derived`` in OpenBao, exported
(``export/encryption-key``) and imported into sealflow through Transit's BYOK import with the
same ``derived`` and ``convergent_encryption``. Then convergent ciphertexts are the same bytes
on both, derived ciphertexts open on the other side, item by item with each item's own context,
and every refusal (no context, a context that is not base64, contexts on some items only) is
the same status in the same words on both.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from typing import Any

import httpx
import hvac
import hvac.exceptions
import pytest

from tests.service.byok import wrap
from tests.service.conftest import Server
from tests.service.server.test_fast_answer import lane_count
from tests.service.transit.conftest import Bao, unique

TYPES = ("aes128-gcm96", "aes256-gcm96", "chacha20-poly1305")
MISSING = (
    "missing 'context' for key derivation; the key was created using a derived key, which means"
    " additional, per-request information must be included in order to perform operations with"
    " the key"
)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def shared_key(openbao: hvac.Client, vault: hvac.Client, kind: str, convergent: bool) -> str:
    """A derived key made in OpenBao, and its material imported into sealflow."""
    name = unique("derived")
    flags = {"type": kind, "derived": True, "convergent_encryption": convergent}
    # hvac 2.4's create_key knows no aes128-gcm96: its generic write.
    openbao.write_data(f"transit/keys/{name}", data={**flags, "exportable": True})
    exported = openbao.secrets.transit.export_key(name, "encryption-key", version=1)
    material = base64.b64decode(exported["data"]["keys"]["1"])
    pem = vault.read("transit/wrapping_key")["data"]["public_key"]
    vault.write_data(
        f"transit/keys/{name}/import", data={**flags, "ciphertext": wrap(pem, material)}
    )
    return name


def batch(items: list[tuple[bytes, bytes]]) -> list[dict[str, str]]:
    return [{"plaintext": b64(p), "context": b64(c)} for p, c in items]


ITEMS = [
    (b"alice@example.com", b"tenant-1"),
    (b"alice@example.com", b"tenant-2"),  # the same plaintext, another context
    (b"", b"tenant-1"),
    (b"bob" * 100, b"\x00\xff" * 40),
]


@pytest.mark.parametrize("kind", TYPES)
def test_convergent_ciphertexts_are_the_same_bytes_on_both(
    openbao: hvac.Client, vault: hvac.Client, kind: str
) -> None:
    name = shared_key(openbao, vault, kind, convergent=True)
    sealed = {}
    for server, client in (("openbao", openbao), ("sealflow", vault)):
        answer = client.secrets.transit.encrypt_data(name, "", batch_input=batch(ITEMS))
        sealed[server] = [r["ciphertext"] for r in answer["data"]["batch_results"]]
    assert sealed["sealflow"] == sealed["openbao"]
    assert sealed["sealflow"][0] != sealed["sealflow"][1]  # the context makes the key
    one = vault.secrets.transit.encrypt_data(name, b64(ITEMS[0][0]), context=b64(ITEMS[0][1]))
    assert one["data"]["ciphertext"] == sealed["openbao"][0]
    again = vault.secrets.transit.encrypt_data(name, b64(ITEMS[0][0]), context=b64(ITEMS[0][1]))
    assert again["data"]["ciphertext"] == one["data"]["ciphertext"]
    rewrapped = vault.secrets.transit.rewrap_data(
        name, sealed["openbao"][3], context=b64(ITEMS[3][1])
    )
    assert rewrapped["data"]["ciphertext"] == sealed["openbao"][3]


@pytest.mark.parametrize("kind", TYPES)
def test_derived_ciphertexts_open_on_the_other_side_with_each_items_context(
    openbao: hvac.Client, vault: hvac.Client, kind: str
) -> None:
    name = shared_key(openbao, vault, kind, convergent=False)
    clients = {"openbao": openbao, "sealflow": vault}
    for maker, opener in (("openbao", "sealflow"), ("sealflow", "openbao")):
        answer = clients[maker].secrets.transit.encrypt_data(name, "", batch_input=batch(ITEMS))
        ciphertexts = [r["ciphertext"] for r in answer["data"]["batch_results"]]
        items = [
            {"ciphertext": c, "context": b64(context), "reference": str(i)}
            for i, (c, (_, context)) in enumerate(zip(ciphertexts, ITEMS, strict=True))
        ]
        opened = clients[opener].secrets.transit.decrypt_data(name, "", batch_input=items)
        results = opened["data"]["batch_results"]
        assert [base64.b64decode(r["plaintext"]) for r in results] == [p for p, _ in ITEMS]
        assert [r["reference"] for r in results] == ["0", "1", "2", "3"]
    # Another item's context opens nothing, in the same words on both.
    made = vault.secrets.transit.encrypt_data(name, b64(b"x"), context=b64(b"tenant-1"))
    words = set()
    for client in clients.values():
        with pytest.raises(hvac.exceptions.InvalidRequest) as refused:
            client.secrets.transit.decrypt_data(
                name, made["data"]["ciphertext"], context=b64(b"tenant-2")
            )
        words.add(tuple(refused.value.errors))
    assert len(words) == 1
    # rewrap and datakey seal under the context's key: OpenBao opens them.
    rewrapped = vault.secrets.transit.rewrap_data(
        name, made["data"]["ciphertext"], context=b64(b"tenant-1")
    )["data"]["ciphertext"]
    opened = openbao.secrets.transit.decrypt_data(name, rewrapped, context=b64(b"tenant-1"))
    assert base64.b64decode(opened["data"]["plaintext"]) == b"x"
    datakey = vault.secrets.transit.generate_data_key(name, "plaintext", context=b64(b"t-9"))
    opened = openbao.secrets.transit.decrypt_data(
        name, datakey["data"]["ciphertext"], context=b64(b"t-9")
    )
    assert opened["data"]["plaintext"] == datakey["data"]["plaintext"]


def _post(url: str, token: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    r = httpx.post(
        f"{url}/v1/transit/{path}", json=body, headers={"X-Vault-Token": token}, timeout=60
    )
    data = r.json()
    if "errors" in data:
        return r.status_code, data["errors"]
    if "batch_results" in data["data"]:
        return r.status_code, [item.get("error") for item in data["data"]["batch_results"]]
    return r.status_code, sorted(data["data"])


def test_refusals_are_openbaos_status_and_words(
    openbao: hvac.Client, vault: hvac.Client, bao: Bao, server: Server
) -> None:
    derived, convergent, plain = unique("d"), unique("c"), unique("p")
    for client in (openbao, vault):
        client.secrets.transit.create_key(derived, derived=True)
        client.secrets.transit.create_key(convergent, derived=True, convergent_encryption=True)
        client.secrets.transit.create_key(plain)
    x, ctx = b64(b"x"), b64(b"tenant")
    # Each server's own ciphertexts (the keys differ), put where the cases say SEALED-name.
    made: dict[str, dict[str, str]] = {"sealflow": {}, "openbao": {}}
    for side, client in (("sealflow", vault), ("openbao", openbao)):
        for name in (derived, convergent):
            answer = client.secrets.transit.encrypt_data(name, x, context=ctx)
            made[side][f"SEALED-{name}"] = answer["data"]["ciphertext"]
        made[side][f"SEALED-{plain}"] = client.secrets.transit.encrypt_data(plain, x)["data"][
            "ciphertext"
        ]
    ciphertext = f"SEALED-{plain}"
    cases: list[tuple[str, dict[str, Any]]] = []
    for name in (derived, convergent):
        sealed = f"SEALED-{name}"
        cases += [
            (f"encrypt/{name}", {"plaintext": x}),
            (f"encrypt/{name}", {"plaintext": x, "context": ""}),
            (f"encrypt/{name}", {"plaintext": x, "context": "\n"}),  # empty once decoded
            (f"encrypt/{name}", {"plaintext": x, "context": "!!"}),
            (f"encrypt/{name}", {"plaintext": "@@", "context": "!!"}),
            (f"encrypt/{name}", {"plaintext": x, "context": ctx, "key_version": 2}),
            (f"encrypt/{name}", {"batch_input": [{"plaintext": x}, {"plaintext": x}]}),
            (
                f"encrypt/{name}",
                {"batch_input": [{"plaintext": x, "context": ctx}, {"plaintext": x}]},
            ),
            (
                f"encrypt/{name}",
                {
                    "batch_input": [
                        {"plaintext": x, "context": "!!"},
                        {"plaintext": "@@", "context": ctx},
                        {"plaintext": x, "context": ctx},
                    ]
                },
            ),
            (f"decrypt/{name}", {"ciphertext": sealed}),
            (f"decrypt/{name}", {"ciphertext": sealed, "context": "!!"}),
            (f"decrypt/{name}", {"ciphertext": "nope", "context": "!!"}),
            (f"decrypt/{name}", {"batch_input": [{"ciphertext": sealed}]}),
            (
                f"decrypt/{name}",
                {"batch_input": [{"ciphertext": sealed, "context": ctx}, {"ciphertext": sealed}]},
            ),
            (
                f"decrypt/{name}",
                {
                    "batch_input": [
                        {"ciphertext": "", "context": "!!"},
                        {"ciphertext": "nope", "context": ctx},
                        {"ciphertext": sealed, "context": "!!"},
                        {"ciphertext": sealed, "context": ctx},
                    ]
                },
            ),
            (f"rewrap/{name}", {"ciphertext": sealed}),
            (f"datakey/plaintext/{name}", {}),
            (f"datakey/wrapped/{name}", {"context": "!!"}),
            (f"datakey/wrapped/{name}", {"context": ctx, "bits": 7}),
        ]
    cases += [
        (f"encrypt/{plain}", {"plaintext": x, "context": ctx}),  # ignored on such a key
        (f"encrypt/{plain}", {"plaintext": x, "context": "!!"}),  # but checked
        (f"decrypt/{plain}", {"ciphertext": ciphertext, "context": ctx}),
        (f"encrypt/{plain}", {"batch_input": [{"plaintext": x, "context": ctx}] * 3}),
        (
            f"encrypt/{plain}",
            {"batch_input": [{"plaintext": x, "context": ctx}, {"plaintext": x}]},
        ),
        (f"keys/{unique('k')}", {"convergent_encryption": True}),
    ]
    for path, body in cases:
        theirs = _post(bao.url, bao.token, path, _sealed(body, made["openbao"]))
        ours = _post(server.url, server.token, path, _sealed(body, made["sealflow"]))
        assert ours == theirs, (path, body)


def _sealed(body: dict[str, Any], made: dict[str, str]) -> dict[str, Any]:
    """The body with each SEALED-name marker replaced by that server's ciphertext."""
    if "batch_input" in body:
        return {"batch_input": [_sealed(item, made) for item in body["batch_input"]]}
    return {k: made.get(v, v) if isinstance(v, str) else v for k, v in body.items()}


def test_key_read_shows_derivation_as_openbao_does(
    openbao: hvac.Client, vault: hvac.Client
) -> None:
    fields = ("derived", "kdf", "convergent_encryption", "convergent_encryption_version")
    for flags in ({"derived": True}, {"derived": True, "convergent_encryption": True}, {}):
        name = unique("read")
        shown = []
        for client in (openbao, vault):
            client.secrets.transit.create_key(name, **flags)
            data = client.secrets.transit.read_key(name)["data"]
            shown.append({f: data.get(f, "absent") for f in (*fields, "supports_derivation")})
        assert shown[0] == shown[1], flags


def test_the_native_api_refuses_a_derived_key(server: Server, vault: hvac.Client) -> None:
    name = unique("derived").lower()
    vault.secrets.transit.create_key(name, derived=True)
    headers = {"Authorization": f"Bearer {server.token}"}
    for query in ("", "?mode=single", "?mode=records"):
        r = httpx.post(f"{server.url}/v1/keys/{name}/encrypt{query}", content=b"x", headers=headers)
        assert r.status_code == 400, (query, r.text)
        assert "derived" in r.json()["error"]["message"]


def test_the_fast_answer_keeps_the_context_rule(make_server: Callable[..., Server]) -> None:
    """A small encrypt is answered by the protocol's fast answer (``SEALFLOW_SMALL_LANE``)
    through the same plan: a derived key's refusals and convergent ciphertexts are the same
    with the lane on and off, and the lane took them."""
    lane, usual = make_server(small_lane=True), make_server(small_lane=False)
    material, name, ctx = os.urandom(32), "conv", b64(b"tenant")
    seen = []
    for srv in (lane, usual):
        client = hvac.Client(url=srv.url, token=srv.token, strict_http=True)
        pem = client.read("transit/wrapping_key")["data"]["public_key"]
        flags = {"derived": True, "convergent_encryption": True}
        client.write_data(
            f"transit/keys/{name}/import", data={**flags, "ciphertext": wrap(pem, material)}
        )
        client.secrets.transit.encrypt_data(name, b64(b"warm"), context=ctx)  # leased: ASGI
        before = lane_count(srv)
        bodies: list[dict[str, Any]] = [
            {"plaintext": b64(b"x"), "context": ctx},
            {"plaintext": b64(b"x")},
            {"plaintext": b64(b"x"), "context": "!!"},
            {"plaintext": b64(b"x"), "context": "\n"},
        ]
        answers = []
        for body in bodies:
            r = httpx.post(
                f"{srv.url}/v1/transit/encrypt/{name}",
                json=body,
                headers={"X-Vault-Token": srv.token},
                timeout=60,
            )
            found = r.json()
            answers.append((r.status_code, found.get("errors") or found["data"]))
        assert lane_count(srv) - before == (len(bodies) if srv is lane else 0)
        seen.append(answers)
    assert seen[0] == seen[1]  # the convergent ciphertext too, byte for byte
    assert seen[0][1] == (400, [MISSING])


@pytest.mark.parametrize("kind", ["aes256-gcm96", "chacha20-poly1305"])
def test_a_key_imported_derived_into_both_derives_as_openbaos_import_does(
    openbao: hvac.Client, vault: hvac.Client, kind: str
) -> None:
    """OpenBao's import gives a derived key its legacy ``hmac-sha256-counter`` KDF; sealflow's
    import takes that ``kdf``: the same material then opens both ways and reads alike."""
    name, material = unique("legacy"), os.urandom(32)
    fields = ("derived", "kdf", "kdf_mode", "convergent_encryption", "supports_derivation")
    shown, sealed = [], {}
    for client, extra in ((openbao, {}), (vault, {"kdf": "hmac-sha256-counter"})):
        pem = client.read("transit/wrapping_key")["data"]["public_key"]
        body = {"ciphertext": wrap(pem, material), "type": kind, "derived": True, **extra}
        client.write_data(f"transit/keys/{name}/import", data=body)
        data = client.secrets.transit.read_key(name)["data"]
        shown.append({f: data.get(f, "absent") for f in fields})
        answer = client.secrets.transit.encrypt_data(name, "", batch_input=batch(ITEMS))
        sealed[client] = [r["ciphertext"] for r in answer["data"]["batch_results"]]
    assert shown[0] == shown[1]
    assert shown[0]["kdf"] == "hmac-sha256-counter"
    for maker, opener in ((openbao, vault), (vault, openbao)):
        items = [
            {"ciphertext": c, "context": b64(context)}
            for c, (_, context) in zip(sealed[maker], ITEMS, strict=True)
        ]
        opened = opener.secrets.transit.decrypt_data(name, "", batch_input=items)
        results = opened["data"]["batch_results"]
        assert [base64.b64decode(r["plaintext"]) for r in results] == [p for p, _ in ITEMS]


def test_import_refuses_a_kdf_that_cannot_make_the_key(server: Server, vault: hvac.Client) -> None:
    pem = vault.read("transit/wrapping_key")["data"]["public_key"]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"kdf": "legacy"}, "unknown kdf legacy: hkdf_sha256 or hmac-sha256-counter"),
        ({"kdf": "hmac-sha256-counter", "convergent_encryption": True}, "only for derived"),
        ({"kdf": "hmac-sha256-counter", "type": "aes128-gcm96"}, "only for derived"),
    ]
    for fields, words in cases:
        name = unique("bad")
        size = 16 if fields.get("type") == "aes128-gcm96" else 32
        body = {"ciphertext": wrap(pem, os.urandom(size)), "derived": True, **fields}
        r = httpx.post(
            f"{server.url}/v1/transit/keys/{name}/import",
            json=body,
            headers={"X-Vault-Token": server.token},
            timeout=60,
        )
        assert r.status_code == 400, (fields, r.text)
        assert words in r.json()["errors"][0]
        absent = httpx.get(
            f"{server.url}/v1/transit/keys/{name}", headers={"X-Vault-Token": server.token}
        )
        assert absent.status_code == 404
