"""Transit's key lifecycle through hvac 2.4 (``trim_key``; soft delete through its generic
calls), the same code against a real OpenBao dev server and against sealflow: trim's refusals
and success alike, trimmed versions' ciphertexts refused, a soft-deleted key refusing encrypt
and decrypt until restored; then what only sealflow has: its native API and the fast answer
refuse a soft-deleted key too, and every lifecycle route needs ``admin``."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import hvac
import hvac.exceptions
import jsonschema_rs

from sealflow.service.audit import SCHEMA
from sealflow.service.keystore import SOFT_DELETED
from tests.service.conftest import Server, start_server
from tests.service.server.test_audit_trail import records
from tests.service.server.test_auth import new_token
from tests.service.server.test_fast_answer import lane_count
from tests.service.transit.conftest import unique

Outcome = tuple[str, list[str]]


def outcome(call: Callable[[], object]) -> Outcome:
    """What a call came to: ``ok``, or hvac's exception (its status) and Vault's errors."""
    try:
        call()
    except hvac.exceptions.VaultError as exc:
        return type(exc).__name__, list(exc.errors or [])
    return "ok", []


def four_versions(client: hvac.Client, name: str) -> list[str]:
    """A key of four versions, and a ciphertext of b"hi" under each."""
    transit = client.secrets.transit
    transit.create_key(name)
    for _ in range(3):
        transit.rotate_key(name)
    return [
        transit.encrypt_data(name, "aGk=", key_version=v)["data"]["ciphertext"] for v in range(1, 5)
    ]


def decrypts(client: hvac.Client, name: str, ciphertext: str) -> Outcome:
    return outcome(lambda: client.secrets.transit.decrypt_data(name, ciphertext))


def trim_flow(client: hvac.Client) -> tuple[list[Outcome], dict[str, Any], list[Outcome]]:
    """Every refusal of a trim in OpenBao's order, then a trim to 3: the outcomes, the key as
    read after, and what each version's ciphertext decrypts to."""
    name = unique("trim")
    ciphertexts = four_versions(client, name)
    transit = client.secrets.transit

    def trim(version: int) -> Outcome:
        return outcome(lambda: transit.trim_key(name, version))

    outcomes = [
        outcome(lambda: client.write_data(f"transit/keys/{name}/trim", data={})),
        outcome(lambda: transit.trim_key(unique("absent"), 1)),
        trim(2),  # min_encryption_version not set
    ]
    transit.update_key_configuration(name, min_encryption_version=3)
    outcomes.append(trim(2))  # above min_decryption_version
    transit.update_key_configuration(name, min_decryption_version=3)
    outcomes += [trim(0), trim(4), trim(3), trim(2)]  # decremented, after the 3
    # The minimum versions cannot go below it any more.
    outcomes.append(
        outcome(lambda: transit.update_key_configuration(name, min_decryption_version=2))
    )
    outcomes.append(
        outcome(lambda: transit.update_key_configuration(name, min_encryption_version=0))
    )
    key = transit.read_key(name)["data"]
    opened = [decrypts(client, name, c) for c in ciphertexts]
    return outcomes, key, opened


def test_trim_refuses_and_trims_as_openbao_does(openbao: hvac.Client, vault: hvac.Client) -> None:
    bao, ours = trim_flow(openbao), trim_flow(vault)
    assert ours[0] == bao[0]
    words = [errors[0] if errors else "" for _, errors in ours[0]]
    assert words == [
        "missing min_available_version",
        "invalid key name",
        "minimum available version cannot be set when minimum encryption version is not set",
        "minimum available version cannot be greater than minimum decryption version",
        "minimum available version should be positive",
        "minimum available version cannot be greater than minmum encryption version",
        "",
        "minimum available version cannot be decremented",
        "min decryption version should not be less then min available version",
        "min encryption version should not be less than min available version",
    ]
    for key in (bao[1], ours[1]):
        assert key["min_available_version"] == 3
        assert sorted(key["keys"]) == ["3", "4"]
        assert key["latest_version"] == 4
    too_old = (
        "InvalidRequest",
        ["ciphertext or signature version is disallowed by policy (too old)"],
    )
    assert ours[2] == bao[2] == [too_old, too_old, ("ok", []), ("ok", [])]


def soft_delete_flow(client: hvac.Client) -> dict[str, Any]:
    name = unique("soft")
    ciphertexts = four_versions(client, name)
    transit = client.secrets.transit
    first = client.adapter.delete(f"/v1/transit/keys/{name}/soft-delete")
    again = client.adapter.delete(f"/v1/transit/keys/{name}/soft-delete")
    refused = [
        outcome(lambda: transit.encrypt_data(name, "aGk=")),
        decrypts(client, name, ciphertexts[0]),
        outcome(lambda: transit.rewrap_data(name, ciphertexts[1])),
        outcome(lambda: transit.generate_data_key(name, "plaintext")),
    ]
    read = transit.read_key(name)["data"]
    restored = client.write_data(f"transit/keys/{name}/soft-delete-restore")
    restored_again = client.write_data(f"transit/keys/{name}/soft-delete-restore")
    opened = [transit.decrypt_data(name, c)["data"]["plaintext"] for c in ciphertexts]
    return {
        "first": (first["data"]["soft_deleted"], first["warnings"]),
        "again": (again["data"]["soft_deleted"], again["warnings"]),
        "refused": refused,
        "read": (read["soft_deleted"], read["latest_version"]),
        "restored": (restored["data"]["soft_deleted"], restored["warnings"]),
        "restored_again": restored_again["warnings"],
        "opened": opened,
        "absent": client.adapter.delete(
            f"/v1/transit/keys/{unique('absent')}/soft-delete"
        ).status_code,
    }


def test_a_soft_deleted_key_refuses_until_restored_as_on_openbao(
    openbao: hvac.Client, vault: hvac.Client
) -> None:
    bao, ours = soft_delete_flow(openbao), soft_delete_flow(vault)
    assert ours == bao
    assert ours["first"] == (True, None)
    assert ours["again"] == (True, ["key was already marked as soft deleted"])
    assert ours["refused"] == [("InvalidRequest", [SOFT_DELETED])] * 4
    assert ours["restored_again"] == ["key was already restored"]
    assert ours["opened"] == ["aGk="] * 4
    assert ours["absent"] == 204


def test_openbao_500s_are_400s_with_its_words(openbao: hvac.Client, vault: hvac.Client) -> None:
    """OpenBao answers a rotation or export of a soft-deleted key with a 500; sealflow with a
    400 of the same words."""
    for client in (openbao, vault):
        name = unique("frozen")
        client.secrets.transit.create_key(name, exportable=True)
        client.adapter.delete(f"/v1/transit/keys/{name}/soft-delete")
        transit = client.secrets.transit
        calls = [
            functools.partial(transit.rotate_key, name),
            functools.partial(transit.export_key, name, "encryption-key"),
        ]
        for call in calls:
            status, errors = outcome(call)
            assert SOFT_DELETED in errors[0]
            wanted = "InternalServerError" if client is openbao else "InvalidRequest"
            assert status == wanted
            if client is vault:
                assert errors == [SOFT_DELETED]


# -- sealflow only


def test_the_native_api_and_the_fast_answer_refuse_a_soft_deleted_key(server: Server) -> None:
    name = unique("native")
    vault = {"X-Vault-Token": server.token}
    with server.client() as native, httpx.Client(base_url=server.url, headers=vault) as transit:
        created = native.post("/v1/keys", json={"name": name, "exportable": True})
        assert created.status_code == 201
        envelope = native.post(f"/v1/keys/{name}/encrypt?mode=single", content=b"hello")
        assert envelope.status_code == 200
        sealed = transit.post(f"/v1/transit/encrypt/{name}", json={"plaintext": "aGk="})
        ciphertext = sealed.json()["data"]["ciphertext"]
        deleted = native.post(f"/v1/keys/{name}/soft-delete")
        assert deleted.status_code == 200
        assert deleted.json()["key"]["soft_deleted"] is True
        assert deleted.json()["warnings"] == []
        again = native.post(f"/v1/keys/{name}/soft-delete").json()
        assert again["warnings"] == ["the key was soft-deleted already"]
        # The small-request lane answers these two itself (the key is warm in this process).
        before = lane_count(server)
        fast = transit.post(f"/v1/transit/encrypt/{name}", json={"plaintext": "aGk="})
        assert (fast.status_code, fast.json()) == (400, {"errors": [SOFT_DELETED]})
        single = native.post(f"/v1/keys/{name}/encrypt?mode=single", content=b"hello")
        assert lane_count(server) - before == 2
        refusals = [
            single,
            native.post(f"/v1/keys/{name}/encrypt", content=b"hello"),  # the stream
            native.post(f"/v1/keys/{name}/encrypt?mode=records", content=b"\0\0\0\2hi"),
            native.post(f"/v1/keys/{name}/decrypt", content=envelope.content),
            native.post("/v1/decrypt", content=envelope.content),
            native.get(f"/v1/keys/{name}/export"),
            native.post(f"/v1/keys/{name}/rotate"),
            native.patch(f"/v1/keys/{name}", json={"deletion_allowed": True}),
        ]
        for refused in refusals:
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"] == {"code": "key_soft_deleted", "message": SOFT_DELETED}
        batch = transit.post(
            f"/v1/transit/encrypt/{name}", json={"batch_input": [{"plaintext": "aGk="}] * 3}
        )
        assert batch.status_code == 400
        assert SOFT_DELETED in batch.text
        shown = native.get(f"/v1/keys/{name}").json()
        assert (shown["soft_deleted"], shown["min_available_version"]) == (True, 0)
        restored = native.post(f"/v1/keys/{name}/restore")
        assert restored.json()["key"]["soft_deleted"] is False
        opened = native.post(f"/v1/keys/{name}/decrypt", content=envelope.content)
        assert opened.content == b"hello"
        back = transit.post(f"/v1/transit/decrypt/{name}", json={"ciphertext": ciphertext})
        assert back.json()["data"]["plaintext"] == "aGk="
        assert native.post(f"/v1/keys/{name}/restore").json()["warnings"] == [
            "the key was not soft-deleted"
        ]


def test_native_trim(server: Server) -> None:
    name = unique("ntrim")
    with server.client() as native:
        native.post("/v1/keys", json={"name": name}).raise_for_status()
        envelopes = []
        for _ in range(3):
            sealed = native.post(f"/v1/keys/{name}/encrypt?mode=single", content=b"old")
            envelopes.append(sealed.content)
            native.post(f"/v1/keys/{name}/rotate").raise_for_status()
        refused = native.post(f"/v1/keys/{name}/trim", json={"min_available_version": 3})
        assert refused.status_code == 400
        assert refused.json()["error"]["message"] == (
            "minimum available version cannot be set when minimum encryption version is not set"
        )
        rules = {"min_decryption_version": 3, "min_encryption_version": 3}
        native.patch(f"/v1/keys/{name}", json=rules).raise_for_status()
        trimmed = native.post(f"/v1/keys/{name}/trim", json={"min_available_version": 3})
        assert trimmed.status_code == 200
        key = trimmed.json()
        assert key["min_available_version"] == 3
        assert [v["version"] for v in key["versions"]] == [3, 4]
        for envelope, status in zip(envelopes, (404, 404, 200), strict=True):
            assert native.post(f"/v1/keys/{name}/decrypt", content=envelope).status_code == status
        bad = native.post(f"/v1/keys/{name}/trim", json={"min_available_version": "3"})
        assert bad.status_code == 400


def test_the_lifecycle_routes_need_admin(server: Server) -> None:
    name = unique("guarded")
    user = new_token(server, f"encrypt:{name}", f"decrypt:{name}", f"export:{name}")
    with server.client() as admin:
        admin.post("/v1/keys", json={"name": name}).raise_for_status()
    with server.client(user) as native:
        for path, body in (("trim", {"min_available_version": 1}), ("soft-delete", None)):
            refused = native.post(f"/v1/keys/{name}/{path}", json=body)
            assert refused.status_code == 403
        assert native.post(f"/v1/keys/{name}/restore").status_code == 403
    with httpx.Client(base_url=server.url + "/v1/transit", headers={"X-Vault-Token": user}) as t:
        calls = [
            t.post(f"/keys/{name}/trim", json={"min_available_version": 1}),
            t.delete(f"/keys/{name}/soft-delete"),
            t.post(f"/keys/{name}/soft-delete-restore"),
        ]
        for refused in calls:
            assert (refused.status_code, refused.json()) == (403, {"errors": ["permission denied"]})
    with server.client() as admin:
        assert admin.get(f"/v1/keys/{name}").json()["soft_deleted"] is False


def test_a_trim_and_a_soft_delete_are_audited_as_changes(tmp_path: Path) -> None:
    audit = tmp_path / "audit.log"
    srv = start_server(tmp_path / "data", audit_file=audit)
    try:
        with srv.client() as native:
            native.post("/v1/keys", json={"name": "audited"}).raise_for_status()
            for _ in range(2):
                native.post("/v1/keys/audited/rotate").raise_for_status()
            rules = {"min_decryption_version": 3, "min_encryption_version": 3}
            native.patch("/v1/keys/audited", json=rules).raise_for_status()
            trim = native.post("/v1/keys/audited/trim", json={"min_available_version": 3})
            trim.raise_for_status()
            native.post("/v1/keys/audited/soft-delete").raise_for_status()
            native.post("/v1/keys/audited/restore").raise_for_status()
    finally:
        srv.stop()
    lines = records(audit)
    validator = jsonschema_rs.validator_for(json.loads(SCHEMA.read_text()))
    for line in lines:
        validator.validate(line)
    changes = [(r["operation"], r.get("versions")) for r in lines if r["type"] == "change"]
    assert ("key_trim", [1, 2]) in changes
    assert ("key_soft_delete", None) in changes
    assert ("key_soft_delete_restore", None) in changes
    requests = {(r["operation"], r["status"]) for r in lines if r["type"] == "request"}
    wanted = {("key_trim", 200), ("key_soft_delete", 200), ("key_soft_delete_restore", 200)}
    assert wanted <= requests
