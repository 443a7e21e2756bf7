"""Public-key-only keys (byok-export destinations) in the keystore, on every backend: held as
MAC'd meta rows, one name space with the keys, refused if changed without the master key,
deleted only once ``deletion_allowed`` is set."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from sealflow.engine import Algorithm
from sealflow.service.keystore import (
    DeletionNotAllowed,
    InvalidRequest,
    KeyExists,
    KeyStore,
    KeyStoreCorrupt,
)
from tests.service.byok import other_public_pem


def test_a_public_key_is_kept_and_listed_and_deleted_once_allowed(store: KeyStore) -> None:
    pem = other_public_pem()
    made = store.import_public_key("bao-wrap", "rsa-4096", pem)
    assert (made.name, made.type, made.public_key, made.deletion_allowed) == (
        "bao-wrap",
        "rsa-4096",
        pem,
        False,
    )
    assert store.public_key("bao-wrap") == made
    assert [k.name for k in store.public_keys()] == ["bao-wrap"]
    assert store.public_key("other") is None
    with pytest.raises(DeletionNotAllowed):
        store.delete_public_key("bao-wrap")
    assert store.configure_public_key("bao-wrap", True).deletion_allowed
    store.delete_public_key("bao-wrap")
    assert store.public_key("bao-wrap") is None
    assert store.public_keys() == []


def test_keys_and_public_keys_share_one_name_space(store: KeyStore) -> None:
    store.create_key("taken", Algorithm.AES_256_GCM)
    with pytest.raises(InvalidRequest, match="cannot be used with an existing key"):
        store.import_public_key("taken", "rsa-4096", other_public_pem())
    store.import_public_key("public", "rsa-4096", other_public_pem())
    with pytest.raises(KeyExists):
        store.create_key("public", Algorithm.AES_256_GCM)
    with pytest.raises(InvalidRequest, match="cannot be used with an existing key"):
        store.import_public_key("public", "rsa-4096", other_public_pem())
    assert [k.name for k in store.list_keys()] == ["taken"]


def test_bad_public_keys_are_refused_in_openbaos_words(store: KeyStore) -> None:
    ec_pem = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    cases = [
        ("rsa-4096", "not a key", "error parsing public key: not in PEM format"),
        ("rsa-2048", other_public_pem(), "invalid key size: expected 256 bytes, got 512 bytes"),
        ("rsa-4096", ec_pem, "invalid key type: expected rsa-4096"),
        ("aes256-gcm96", other_public_pem(), "provided type does not support public_key import"),
    ]
    for kind, pem, words in cases:
        with pytest.raises(InvalidRequest, match=words):
            store.import_public_key("bad", kind, pem)
    assert store.public_keys() == []


def test_a_public_key_changed_without_the_master_key_is_refused(
    open_store: Callable[[bytes], KeyStore], master_key: bytes, backend: str
) -> None:
    store = open_store(master_key)
    store.import_public_key("dst", "rsa-4096", other_public_pem())
    table, mark = {"sqlite": ("meta", "?"), "postgresql": ("sealflow_meta", "%s")}[backend]
    read = f"SELECT value FROM {table} WHERE key = 'public-key/dst'"  # noqa: S608
    write = f"UPDATE {table} SET value = {mark} WHERE key = 'public-key/dst'"  # noqa: S608
    with store._transaction() as db:  # type: ignore[attr-defined]
        value = bytes(db.execute(read).fetchone()[0])
        fields = json.loads(value[32:])
        fields["public_key"] = other_public_pem()  # someone else's key, to receive exports
        db.execute(write, (value[:32] + json.dumps(fields).encode(),))
    reopened = open_store(master_key)
    with pytest.raises(KeyStoreCorrupt):
        reopened.public_key("dst")
    assert reopened.public_keys() == []
