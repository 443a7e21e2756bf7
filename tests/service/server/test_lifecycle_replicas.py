"""Two ``sealflow serve`` replicas on one real PostgreSQL keystore: a soft deletion, a restore
and a trim made through one are seen by the other through the keystore's change feed, without
a restart, on its warm caches (held sealings, cached material) and its fast answer alike."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import httpx

from sealflow.service.keystore import SOFT_DELETED
from tests.postgres import Cluster
from tests.service.server.test_replicas import ROOT_TOKEN, eventually, start_replicas


def test_a_soft_delete_and_a_trim_reach_another_replica_without_a_restart(
    postgres: Cluster, tmp_path: Path
) -> None:
    master = base64.b64encode(os.urandom(32)).decode()
    a, b = start_replicas(tmp_path, postgres.new_database(), master, n=2)
    vault = {"X-Vault-Token": ROOT_TOKEN}
    try:
        with (
            httpx.Client(base_url=a.url + "/v1/transit", headers=vault) as on_a,
            httpx.Client(base_url=b.url + "/v1/transit", headers=vault) as on_b,
            b.client() as native_b,
        ):
            assert on_a.post("/keys/shared", json={}).status_code == 200
            for _ in range(2):
                assert on_a.post("/keys/shared/rotate").status_code == 200
            eventually(lambda: on_b.get("/keys/shared").json()["data"]["latest_version"] == 3)
            # Warm on b: a ciphertext per version, sealings held, material cached.
            old = [
                on_b.post("/encrypt/shared", json={"plaintext": "aGk=", "key_version": v}).json()[
                    "data"
                ]["ciphertext"]
                for v in (1, 2, 3)
            ]
            envelope = native_b.post("/v1/keys/shared/encrypt?mode=single", content=b"x")
            assert envelope.status_code == 200

            assert on_a.delete("/keys/shared/soft-delete").json()["data"]["soft_deleted"]
            refused = {"errors": [SOFT_DELETED]}
            eventually(
                lambda: on_b.post("/encrypt/shared", json={"plaintext": "aGk="}).json() == refused,
                within=5,
            )
            assert on_b.post("/decrypt/shared", json={"ciphertext": old[0]}).json() == refused
            sealed = native_b.post("/v1/keys/shared/encrypt?mode=single", content=b"x")
            assert sealed.json()["error"]["code"] == "key_soft_deleted"
            opened = native_b.post("/v1/keys/shared/decrypt", content=envelope.content)
            assert opened.json()["error"]["code"] == "key_soft_deleted"
            assert on_b.get("/keys/shared").json()["data"]["soft_deleted"] is True

            assert on_a.post("/keys/shared/soft-delete-restore").status_code == 200
            eventually(
                lambda: on_b.get("/keys/shared").json()["data"]["soft_deleted"] is False, within=5
            )
            for ciphertext in old:
                back = on_b.post("/decrypt/shared", json={"ciphertext": ciphertext})
                assert back.json()["data"]["plaintext"] == "aGk="
            assert (
                native_b.post("/v1/keys/shared/decrypt", content=envelope.content).content == b"x"
            )

            rules = {"min_decryption_version": 3, "min_encryption_version": 3}
            assert on_a.post("/keys/shared/config", json=rules).status_code == 200
            assert (
                on_a.post("/keys/shared/trim", json={"min_available_version": 3}).status_code == 200
            )
            eventually(
                lambda: on_b.get("/keys/shared").json()["data"]["min_available_version"] == 3,
                within=5,
            )
            assert sorted(on_b.get("/keys/shared").json()["data"]["keys"]) == ["3"]
            assert on_b.post("/decrypt/shared", json={"ciphertext": old[2]}).status_code == 200
            too_old = on_b.post("/decrypt/shared", json={"ciphertext": old[0]})
            assert too_old.status_code == 400
    finally:
        for srv in (a, b):
            srv.stop()
