"""An import is an audited change: ``key_import`` and ``key_import_version`` on record, by key
and version, with the request that asked; never the material, nor the ciphertext that held it."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import httpx
import jsonschema_rs

from sealflow.service.audit import SCHEMA
from tests.service.byok import wrap
from tests.service.conftest import start_server
from tests.service.server.test_audit_trail import records


def test_imports_are_on_record_without_material(tmp_path: Path) -> None:
    audit = tmp_path / "audit.log"
    srv = start_server(tmp_path / "data", audit_file=audit)
    material = [os.urandom(32), os.urandom(32)]
    try:
        headers = {"X-Vault-Token": srv.token}
        with httpx.Client(base_url=srv.url, headers=headers, timeout=60) as vault:
            pem = vault.get("/v1/transit/wrapping_key").json()["data"]["public_key"]
            sent = [wrap(pem, m) for m in material]
            assert vault.post(
                "/v1/transit/keys/imp/import", json={"ciphertext": sent[0]}
            ).is_success
            r = vault.post("/v1/transit/keys/imp/import_version", json={"ciphertext": sent[1]})
            assert r.status_code == 204
    finally:
        srv.stop()
    lines = records(audit)
    validator = jsonschema_rs.validator_for(json.loads(SCHEMA.read_text()))
    for line in lines:
        validator.validate(line)
    changes = {(r["type"], r.get("operation"), r.get("key"), r.get("version")) for r in lines}
    assert ("change", "key_import", "imp", 1) in changes
    assert ("change", "key_import_version", "imp", 2) in changes
    requests = {(r["operation"], r["status"]) for r in lines if r["type"] == "request"}
    assert {
        ("wrapping_key_read", 200),
        ("key_import", 204),
        ("key_import_version", 204),
    } <= requests
    text = b"".join(f.read_bytes() for f in tmp_path.glob("audit.log*"))
    for secret in [*material, *(c.encode() for c in sent)]:
        assert secret not in text
        assert base64.b64encode(secret) not in text


def test_a_byok_export_is_on_record_as_one_by_its_versions_without_material(
    tmp_path: Path,
) -> None:
    audit = tmp_path / "audit.log"
    srv = start_server(tmp_path / "data", audit_file=audit)
    try:
        headers = {"X-Vault-Token": srv.token}
        with httpx.Client(base_url=srv.url, headers=headers, timeout=60) as vault:
            assert vault.post("/v1/transit/keys/src", json={"exportable": True}).is_success
            assert vault.post("/v1/transit/keys/src/rotate").is_success
            pem = vault.get("/v1/transit/wrapping_key").json()["data"]["public_key"]
            body = {"type": "rsa-4096", "public_key": pem}
            assert vault.post("/v1/transit/keys/dst/import", json=body).status_code == 204
            r = vault.get("/v1/transit/byok-export/dst/src")
            assert r.status_code == 200, r.text
            wrapped = list(r.json()["data"]["keys"].values())
            exported = vault.get("/v1/transit/export/encryption-key/src").json()["data"]["keys"]
    finally:
        srv.stop()
    lines = records(audit)
    validator = jsonschema_rs.validator_for(json.loads(SCHEMA.read_text()))
    for line in lines:
        validator.validate(line)
    found = [r for r in lines if r.get("operation") == "byok_export"]
    assert len(found) == 1
    assert (found[0]["type"], found[0]["key"], found[0]["versions"], found[0]["status"]) == (
        "request",
        "src",
        [1, 2],
        200,
    )
    text = b"".join(f.read_bytes() for f in tmp_path.glob("audit.log*"))
    for secret in [*(w.encode() for w in wrapped), *(m.encode() for m in exported.values())]:
        assert secret not in text
