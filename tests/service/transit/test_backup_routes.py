"""Transit's ``backup/:name`` and ``restore[/:name]`` through hvac: a key backed up and made
again under its version numbers (its ciphertexts decrypt on the copy), Vault's rules on
``exportable`` and ``allow_plaintext_backup`` in OpenBao's words (against a real OpenBao dev
server), the ``export`` scope, and audit records without material."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import hvac
import hvac.exceptions
import pytest

from tests.service.conftest import Server
from tests.service.transit.conftest import unique


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def errors(call: Any) -> list[str]:
    """The messages of a refused hvac call: a 400 on sealflow; OpenBao answers most of these
    with a 500 whose message it wraps as ``1 error occurred:\n\t* <message>``."""
    with pytest.raises(hvac.exceptions.VaultError) as refused:
        call()
    if not isinstance(refused.value, (hvac.exceptions.InternalServerError)):
        assert isinstance(refused.value, hvac.exceptions.InvalidRequest)
    messages: list[str] = refused.value.errors or []
    return [m.removeprefix("1 error occurred:\n\t* ").strip() for m in messages]


def three_versions(client: hvac.Client, name: str) -> list[tuple[str, str]]:
    """An exportable key that allows plaintext backup, three versions, a ciphertext under each
    (with and without associated_data); its rules set after."""
    transit = client.secrets.transit
    transit.create_key(name, key_type="chacha20-poly1305", exportable=True)
    transit.update_key_configuration(name, allow_plaintext_backup=True)
    sealed = []
    for version in (1, 2, 3):
        text = b64(f"{name} v{version}".encode())
        aad = b64(b"aad") if version % 2 else None
        extra = {} if aad is None else {"associated_data": aad}
        answer = client.write_data(f"transit/encrypt/{name}", data={"plaintext": text, **extra})
        sealed.append((text, answer["data"]["ciphertext"]))
        if version < 3:
            transit.rotate_key(name)
    transit.update_key_configuration(
        name, min_decryption_version=2, min_encryption_version=3, deletion_allowed=True
    )
    return sealed


def decrypts(client: hvac.Client, name: str, ciphertext: str, version: int) -> str | None:
    extra = {"associated_data": b64(b"aad")} if version % 2 else {}
    try:
        answer = client.write_data(
            f"transit/decrypt/{name}", data={"ciphertext": ciphertext, **extra}
        )
    except hvac.exceptions.InvalidRequest:
        return None
    plaintext: str = answer["data"]["plaintext"]
    return plaintext


def test_a_key_backed_up_and_restored_under_another_name_decrypts_everything(
    vault: hvac.Client,
) -> None:
    name, copy = unique("bk"), unique("bk-copy")
    sealed = three_versions(vault, name)
    backup = vault.secrets.transit.backup_key(name)["data"]["backup"]
    vault.secrets.transit.restore_key(backup, name=copy)
    old = vault.secrets.transit.read_key(name)["data"]
    new = vault.secrets.transit.read_key(copy)["data"]
    for field in (
        "type",
        "latest_version",
        "min_decryption_version",
        "min_encryption_version",
        "deletion_allowed",
        "exportable",
        "allow_plaintext_backup",
    ):
        assert new[field] == old[field], field
    assert new["allow_plaintext_backup"] is True
    # Version 1 is retired on both (min_decryption_version 2), and came along all the same.
    for version, (text, ciphertext) in enumerate(sealed, start=1):
        expected = text if version >= 2 else None
        assert decrypts(vault, name, ciphertext, version) == expected
        assert decrypts(vault, copy, ciphertext, version) == expected
    vault.secrets.transit.update_key_configuration(copy, min_decryption_version=1)
    assert decrypts(vault, copy, sealed[0][1], 1) == sealed[0][0]
    # The copy's material is the key's, version by version.
    exported = [
        vault.secrets.transit.export_key(key, "encryption-key")["data"]["keys"]
        for key in (name, copy)
    ]
    assert sorted(exported[0]) == ["2", "3"]  # the copy's version 1 is usable again
    assert exported[1] == exported[0] | {"1": exported[1]["1"]}


def test_the_payload_is_sealflows_documented_record(vault: hvac.Client) -> None:
    name = unique("bk")
    three_versions(vault, name)
    record = json.loads(base64.b64decode(vault.secrets.transit.backup_key(name)["data"]["backup"]))
    assert record["format"] == "sealflow-transit-backup-v1"
    assert (record["name"], record["type"], record["latest_version"]) == (
        name,
        "chacha20-poly1305",
        3,
    )
    assert sorted(record["keys"]) == ["1", "2", "3"]
    material = vault.secrets.transit.export_key(name, "encryption-key", version=3)["data"]["keys"]
    assert record["keys"]["3"]["key"] == material["3"]


def test_restore_over_a_key_needs_force_and_deletion_allowed(vault: hvac.Client) -> None:
    name = unique("bk")
    sealed = three_versions(vault, name)
    backup = vault.secrets.transit.backup_key(name)["data"]["backup"]
    assert errors(lambda: vault.secrets.transit.restore_key(backup)) == [
        f'key "{name}" already exists'
    ]
    vault.secrets.transit.rotate_key(name)
    vault.secrets.transit.restore_key(backup, force=True)  # deletion_allowed is set
    assert vault.secrets.transit.read_key(name)["data"]["latest_version"] == 3
    assert decrypts(vault, name, sealed[2][1], 3) == sealed[2][0]
    # A key whose deletion is not allowed is not replaced, force or not.
    other = unique("bk-kept")
    vault.secrets.transit.create_key(other)
    assert errors(lambda: vault.secrets.transit.restore_key(backup, name=other, force=True)) == [
        f'key "{other}" exists and deletion is not allowed for it: force replaces only a key'
        " that may be deleted"
    ]
    assert vault.secrets.transit.read_key(other)["data"]["type"] == "aes256-gcm96"


@pytest.mark.parametrize(
    ("backup", "words"),
    [
        ("", "'backup' must be supplied"),
        ("not base64!", "invalid backup: not base64 of a sealflow key backup"),
        (b64(b'{"format": "other"}'), "invalid backup: not a key backup of format"),
        (b64(b'{"format": "sealflow-transit-backup-v1"}'), "invalid backup: a field is"),
    ],
)
def test_a_bad_backup_is_a_400_and_writes_nothing(
    vault: hvac.Client, backup: str, words: str
) -> None:
    name = unique("bad")
    refused = errors(lambda: vault.secrets.transit.restore_key(backup, name=name))
    assert refused[0].startswith(words)
    with pytest.raises(hvac.exceptions.InvalidPath):
        vault.secrets.transit.read_key(name)


def test_material_of_the_wrong_length_is_refused(vault: hvac.Client) -> None:
    name = unique("bk")
    three_versions(vault, name)
    record = json.loads(base64.b64decode(vault.secrets.transit.backup_key(name)["data"]["backup"]))
    record["keys"]["2"]["key"] = b64(os.urandom(16))
    copy = unique("bk-short")
    refused = errors(
        lambda: vault.secrets.transit.restore_key(b64(json.dumps(record).encode()), name=copy)
    )
    assert refused == [
        "invalid backup: the backup holds material of the wrong length for chacha20-poly1305"
    ]
    with pytest.raises(hvac.exceptions.InvalidPath):
        vault.secrets.transit.read_key(copy)


def refusals(client: hvac.Client) -> list[list[str]]:
    """The same refusals on either server, in order."""
    transit = client.secrets.transit
    plain, sealed, flagged = unique("plain"), unique("sealed"), unique("flagged")
    transit.create_key(plain)
    transit.create_key(sealed, exportable=True)
    transit.create_key(flagged, exportable=True, allow_plaintext_backup=True)
    out = [
        errors(lambda: transit.backup_key(plain)),  # not exportable
        errors(lambda: transit.backup_key(sealed)),  # no plaintext backup
    ]
    # false -> true only: false after true is ignored, as for exportable.
    transit.update_key_configuration(flagged, allow_plaintext_backup=False)
    assert transit.read_key(flagged)["data"]["allow_plaintext_backup"] is True
    backup = transit.backup_key(flagged)["data"]["backup"]
    out.append(errors(lambda: transit.restore_key(backup)))  # the name is taken
    out.append(errors(lambda: transit.restore_key(backup, name=plain)))
    out.append(errors(lambda: transit.restore_key("")))
    return out


def test_refusals_are_openbaos_words(vault: hvac.Client, openbao: hvac.Client) -> None:
    ours, theirs = refusals(vault), refusals(openbao)
    assert (
        ours[:2]
        == theirs[:2]
        == [
            ["exporting is disallowed on the policy"],
            ["plaintext backup is disallowed on the policy"],
        ]
    )
    for mine, its in zip(ours[2:4], theirs[2:4], strict=True):
        assert mine[0].startswith("key ")
        assert mine[0].endswith(" already exists")
        assert its[0].startswith("key ")
        assert its[0].endswith(" already exists")
    assert ours[4] == theirs[4] == ["'backup' must be supplied"]


def test_backup_and_restore_need_export_on_the_key_besides_admin(server: Server) -> None:
    root = hvac.Client(url=server.url, token=server.token)
    name = unique("bk")
    three_versions(root, name)
    backup = root.secrets.transit.backup_key(name)["data"]["backup"]

    def token(*scopes: str) -> hvac.Client:
        made = server.cli("tokens", "create", *(f"--scope={s}" for s in scopes))
        assert made.returncode == 0, made.stderr
        return hvac.Client(url=server.url, token=made.stdout.decode().strip())

    copy = unique("bk-copy")
    for scopes in (["admin"], ["admin", "export:other"], [f"export:{name}", f"export:{copy}"]):
        client = token(*scopes)
        with pytest.raises(hvac.exceptions.Forbidden):
            client.secrets.transit.backup_key(name)
        with pytest.raises(hvac.exceptions.Forbidden):
            client.secrets.transit.restore_key(backup, name=copy)
        with pytest.raises(hvac.exceptions.Forbidden):
            client.secrets.transit.create_key(unique("flag"), allow_plaintext_backup=True)
    allowed = token("admin", f"export:{name}", f"export:{copy}")
    assert allowed.secrets.transit.backup_key(name)["data"]["backup"]
    allowed.secrets.transit.restore_key(backup, name=copy)
    assert allowed.secrets.transit.read_key(copy)["data"]["latest_version"] == 3
    # Without a name in the path the backup's own name is the one checked.
    with pytest.raises(hvac.exceptions.Forbidden):
        token("admin", f"export:{copy}").secrets.transit.restore_key(backup, force=True)


def test_audited_as_key_backup_and_key_restore_without_material(
    make_server: Any, tmp_path: Path
) -> None:
    audit = tmp_path / "audit.log"
    srv = make_server(audit_file=audit)
    client = hvac.Client(url=srv.url, token=srv.token)
    name, copy = unique("bk"), unique("bk-copy")
    three_versions(client, name)
    backup = client.secrets.transit.backup_key(name)["data"]["backup"]
    client.secrets.transit.restore_key(backup, name=copy)
    material = client.secrets.transit.export_key(name, "encryption-key")["data"]["keys"]
    srv.stop()  # the trail flushed and closed
    text = audit.read_text()
    records = [json.loads(line) for line in text.splitlines()]
    requests = {(r["type"], r.get("operation"), r.get("key"), r.get("status")) for r in records}
    assert ("request", "key_backup", name, 200) in requests
    assert ("request", "key_restore", copy, 204) in requests
    restored = [r for r in records if (r["type"], r.get("operation")) == ("change", "key_restore")]
    assert [(r["key"], r["version"]) for r in restored] == [(copy, 3)]
    assert backup not in text
    for key in material.values():
        assert key not in text
