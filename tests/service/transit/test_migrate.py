"""``sealflow migrate from-transit`` (the real CLI, in a subprocess) from a real OpenBao dev
server into a real sealflow: every value OpenBao encrypted still decrypts on sealflow through
hvac, under the same version numbers and minimum versions; OpenBao's key list ends as it began;
keys that cannot come are left out whole, with a non-zero exit."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import hvac
import hvac.exceptions
import pytest

from tests.service.byok import wrap
from tests.service.conftest import Server
from tests.service.transit.conftest import Bao, unique

# Transit types, and sealflow's names for them.
TYPES = {
    "aes256-gcm96": "aes-256-gcm",
    "aes128-gcm96": "aes-128-gcm",
    "chacha20-poly1305": "chacha20-poly1305",
}
VALUES = 1000


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def bao_keys(openbao: hvac.Client) -> list[str]:
    return sorted(openbao.secrets.transit.list_keys()["data"]["keys"])


def source_key(openbao: hvac.Client, kind: str, exportable: bool = True) -> str:
    """A key of ``kind`` with three versions on OpenBao."""
    name = unique("mig")
    # hvac's create_key knows no aes128-gcm96: its generic write.
    openbao.write_data(f"transit/keys/{name}", data={"type": kind, "exportable": exportable})
    openbao.secrets.transit.rotate_key(name)
    openbao.secrets.transit.rotate_key(name)
    return name


def batches(items: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Batches of 100: OpenBao refuses a JSON body of more than 1,000 strings."""
    return [items[i : i + 100] for i in range(0, len(items), 100)]


def encrypt_many(openbao: hvac.Client, name: str, count: int) -> list[dict[str, Any]]:
    """``count`` values over versions 1-3, every other one with associated data: one batch."""
    items = []
    for i in range(count):
        item = {"plaintext": b64(os.urandom(1 + i % 40)), "key_version": 1 + i % 3}
        if i % 2:
            item["associated_data"] = b64(f"row {i}".encode())
        items.append(item)
    results = []
    for batch in batches(items):
        answer = openbao.secrets.transit.encrypt_data(name, plaintext="", batch_input=batch)
        results += answer["data"]["batch_results"]
    for item, result in zip(items, results, strict=True):
        assert "error" not in result or not result["error"], result
        assert result["ciphertext"].startswith(f"vault:v{item['key_version']}:")
        item["ciphertext"] = result["ciphertext"]
    return items


def decrypt_all(client: hvac.Client, name: str, items: list[dict[str, Any]]) -> list[Any]:
    """Each item's plaintext (base64) on ``client``, or its batch error."""
    batch = [
        {k: v for k, v in item.items() if k in ("ciphertext", "associated_data")} for item in items
    ]
    results = []
    for part in batches(batch):
        answer = client.secrets.transit.decrypt_data(name, ciphertext="", batch_input=part)
        results += answer["data"]["batch_results"]
    return [r.get("plaintext") if not r.get("error") else r["error"] for r in results]


def decrypt_refused(client: hvac.Client, name: str, items: list[dict[str, Any]]) -> list[str]:
    """The batch errors of ``items`` that each fail to decrypt (the batch's answer is a 400)."""
    errors = []
    for part in batches(items):
        batch = [{"ciphertext": i["ciphertext"], **_aad(i)} for i in part]
        with pytest.raises(hvac.exceptions.InvalidRequest) as refused:
            client.secrets.transit.decrypt_data(name, ciphertext="", batch_input=batch)
        errors += [r["error"] for r in refused.value.json["data"]["batch_results"]]
    return errors


def _aad(item: dict[str, Any]) -> dict[str, str]:
    return {"associated_data": item["associated_data"]} if "associated_data" in item else {}


def migrate(server: Server, bao: Bao, tmp_path: Path, *args: str) -> tuple[int, str, str]:
    token_file = tmp_path / "bao-token"
    token_file.write_text(bao.token + "\n")
    done = server.cli(
        "migrate", "from-transit", "--addr", bao.url, "--token-file", str(token_file), *args
    )
    out, err = done.stdout.decode(), done.stderr.decode()
    assert bao.token not in out + err
    assert server.token not in out + err
    return done.returncode, out, err


def table_row(out: str, name: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(name + " "))


def test_three_keys_move_with_their_versions_and_every_value_decrypts_on_sealflow(
    server: Server, bao: Bao, openbao: hvac.Client, vault: hvac.Client, tmp_path: Path
) -> None:
    names = {kind: source_key(openbao, kind) for kind in TYPES}
    retired = names["chacha20-poly1305"]
    values = {
        name: encrypt_many(openbao, name, VALUES // 3 + (kind == "aes256-gcm96"))
        for kind, name in names.items()
    }
    assert sum(map(len, values.values())) == VALUES
    openbao.secrets.transit.update_key_configuration(retired, min_decryption_version=2)
    openbao.secrets.transit.update_key_configuration(names["aes128-gcm96"], deletion_allowed=True)
    before = bao_keys(openbao)

    code, out, err = migrate(server, bao, tmp_path, "--keys", ",".join(names.values()))

    assert code == 0, out + err
    assert bao_keys(openbao) == before  # the temporary wrapping key is gone again
    for kind, name in names.items():
        assert f"{name}: imported (byok-export)" in err
        row = table_row(out, name).split()
        assert row[1:4] == [kind, "1-3", "2" if name == retired else "1"]
        key = vault.secrets.transit.read_key(name)["data"]
        assert key["type"] == kind
        assert key["latest_version"] == 3
        assert key["min_decryption_version"] == (2 if name == retired else 1)
        assert key["deletion_allowed"] is (kind == "aes128-gcm96")
        gone = [i for i in values[name] if name == retired and i["key_version"] == 1]
        live = [i for i in values[name] if i not in gone]
        assert len(live) > 200
        plaintexts = [item["plaintext"] for item in live]
        assert decrypt_all(openbao, name, live) == plaintexts
        assert decrypt_all(vault, name, live) == plaintexts
        if gone:  # retired on the source before the move: they decrypt nowhere
            for client in (openbao, vault):
                errors = decrypt_refused(client, name, gone)
                assert len(errors) == len(gone)
                assert all("disallowed by policy" in e for e in errors), errors
        fresh = vault.secrets.transit.encrypt_data(name, b64(b"after"))["data"]["ciphertext"]
        assert fresh.startswith("vault:v3:")
        assert openbao.secrets.transit.decrypt_data(name, fresh)["data"]["plaintext"] == b64(
            b"after"
        )
    with server.client() as admin:
        native = admin.get(f"/v1/keys/{retired}").json()
    assert native["algorithm"] == "chacha20-poly1305"
    assert [v["version"] for v in native["versions"]] == [1, 2, 3]


def test_a_key_that_is_not_exportable_is_skipped_and_nothing_is_written(
    server: Server, bao: Bao, openbao: hvac.Client, tmp_path: Path
) -> None:
    closed = source_key(openbao, "aes256-gcm96", exportable=False)
    before = bao_keys(openbao)

    code, out, _err = migrate(server, bao, tmp_path, "--keys", closed)

    assert code == 1
    assert "skipped: not exportable on the source" in table_row(out, closed)
    assert bao_keys(openbao) == before
    with server.client() as admin:
        assert admin.get(f"/v1/keys/{closed}").status_code == 404


def test_a_key_already_on_sealflow_is_refused_and_left_untouched(
    server: Server, bao: Bao, openbao: hvac.Client, tmp_path: Path
) -> None:
    taken, other = source_key(openbao, "aes256-gcm96"), source_key(openbao, "aes128-gcm96")
    with server.client() as admin:
        admin.post("/v1/keys", json={"name": taken, "algorithm": "aes-256-gcm"})
        made = admin.get(f"/v1/keys/{taken}").json()
        before = bao_keys(openbao)

        code, out, _err = migrate(server, bao, tmp_path, "--keys", f"{taken},{other}")

        assert code == 1
        assert "exists on sealflow (left untouched)" in table_row(out, taken)
        assert "imported" in table_row(out, other)
        assert admin.get(f"/v1/keys/{taken}").json() == made
    assert bao_keys(openbao) == before


def test_without_byok_export_rights_it_exports_and_wraps_locally(
    server: Server, bao: Bao, openbao: hvac.Client, vault: hvac.Client, tmp_path: Path
) -> None:
    """A source token that may not write the temporary key (as on a Vault without byok-export):
    the versions are exported and wrapped here, and the key still comes whole."""
    name = source_key(openbao, "aes256-gcm96")
    items = encrypt_many(openbao, name, 30)
    policy = unique("no-byok")
    openbao.sys.create_or_update_policy(
        policy,
        f"""
        path "transit/keys/{name}" {{ capabilities = ["read"] }}
        path "transit/export/encryption-key/{name}/*" {{ capabilities = ["read"] }}
        path "transit/encrypt/{name}" {{ capabilities = ["update"] }}
        """,
    )
    limited = openbao.auth.token.create(policies=[policy])["auth"]["client_token"]
    before = bao_keys(openbao)

    code, out, err = migrate(server, Bao(bao.url, limited, bao.proc), tmp_path, "--keys", name)

    assert code == 0, out + err
    assert "exporting each version and wrapping it here" in err
    assert "imported (exported and wrapped locally)" in table_row(out, name)
    assert bao_keys(openbao) == before
    assert decrypt_all(vault, name, items) == [item["plaintext"] for item in items]


def test_a_whole_key_import_is_all_or_nothing(server: Server) -> None:
    """The native whole-key call: one bad version, or a placeholder at or above
    min_decryption_version, refuses the key and writes nothing; a good one writes it whole."""
    name = unique("whole")
    with server.client() as admin:
        pem = admin.get("/v1/wrapping-key").json()["public_key"]
        good = [{"ciphertext": wrap(pem, os.urandom(16))} for _ in range(2)]
        for body in (
            {"versions": [*good, {"ciphertext": wrap(pem, os.urandom(15))}]},
            {"versions": [*good, {"ciphertext": "AAAA"}]},
            {"versions": [{"placeholder": True}, *good], "min_decryption_version": 1},
            {"versions": good, "ciphertext": good[0]["ciphertext"]},
        ):
            refused = admin.post(
                f"/v1/keys/{name}/import", json={"algorithm": "aes-128-gcm", **body}
            )
            assert refused.status_code == 400, refused.text
            assert admin.get(f"/v1/keys/{name}").status_code == 404
        body = {
            "algorithm": "aes-128-gcm",
            "versions": [{"placeholder": True}, *good],
            "min_decryption_version": 2,
            "min_encryption_version": 3,
            "deletion_allowed": True,
        }
        made = admin.post(f"/v1/keys/{name}/import", json=body)
        assert made.status_code == 201, made.text
        key = made.json()
        assert [v["version"] for v in key["versions"]] == [1, 2, 3]
        assert (key["min_decryption_version"], key["min_encryption_version"]) == (2, 3)
        assert key["deletion_allowed"] is True
        again = admin.post(f"/v1/keys/{name}/import", json=body)
        assert again.status_code == 400
        assert admin.get(f"/v1/keys/{name}").json() == key


def test_a_failed_proof_removes_the_key_from_sealflow(
    server: Server, bao: Bao, openbao: hvac.Client, tmp_path: Path
) -> None:
    """The probes go to a Transit mount sealflow does not serve: the key was written, cannot be
    proved, and is removed again, whole; the source is left as it was."""
    name = source_key(openbao, "aes128-gcm96")
    before = bao_keys(openbao)

    code, out, _err = migrate(server, bao, tmp_path, "--keys", name, "--to-mount", "elsewhere")

    assert code == 1
    assert "proof failed" in table_row(out, name)
    assert "removed from sealflow" in table_row(out, name)
    assert bao_keys(openbao) == before
    with server.client() as admin:
        assert admin.get(f"/v1/keys/{name}").status_code == 404
