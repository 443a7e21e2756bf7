"""KEK generations (``_generations``, ``Integrity``): each value says which KEK it is under, a
reader uses that one key and never tries another, values written before rotations existed
read as they always did, and a process that missed a rotation refuses to write."""

from __future__ import annotations

import base64
import os
from contextlib import closing
from pathlib import Path

import pytest
from pydantic import SecretStr

from sealflow.engine import Algorithm
from sealflow.service.config import Settings
from sealflow.service.keystore import (
    KeyStoreUnavailable,
    SQLiteKeyStore,
    keystore_keys,
    prepare,
    rotate_master,
)
from sealflow.service.keystore._integrity import KEY_ROW, Integrity

OLD, NEW = os.urandom(32), os.urandom(32)
ROW = ("orders", "aes-256-gcm", 0, 1, 1700000000.5)


def _rotating() -> Integrity:
    integrity = Integrity(OLD)
    integrity.label(0)
    integrity.adopt(NEW, 1)
    return integrity


def test_values_of_generation_0_are_stored_as_before_rotations() -> None:
    integrity = Integrity(OLD)
    mac = integrity.mac(KEY_ROW, ROW)
    assert len(mac) == 32
    blob = integrity.wrap("orders", 1, Algorithm.AES_256_GCM, False, b"k" * 32)
    assert len(blob) == 12 + 32 + 16


def test_each_value_is_read_under_the_generation_it_names() -> None:
    before = Integrity(OLD)
    old_mac = before.mac(KEY_ROW, ROW)
    old_blob = before.wrap("orders", 1, Algorithm.AES_256_GCM, False, b"k" * 32)
    rotating = _rotating()
    new_mac = rotating.mac(KEY_ROW, ROW)
    assert new_mac.startswith(b"sfk\x00\x00\x00\x01")
    assert rotating.verify(KEY_ROW, ROW, old_mac)
    assert rotating.verify(KEY_ROW, ROW, new_mac)
    assert rotating.unwrap("orders", 1, Algorithm.AES_256_GCM, False, old_blob) == b"k" * 32
    # A reader holding only the old KEK does not read a value of generation 1.
    assert not before.verify(KEY_ROW, ROW, new_mac)
    # Once the rotation is done, the new KEK alone: old values are refused.
    rotating.retire(1)
    assert rotating.verify(KEY_ROW, ROW, new_mac)
    assert not rotating.verify(KEY_ROW, ROW, old_mac)


def test_a_generation_head_put_on_an_old_mac_is_not_tried_with_the_other_key() -> None:
    """The head decides the key: an old MAC relabelled as generation 1 is checked under the new
    KEK only, and fails; a value naming a generation nobody holds reads as generation 0."""
    old_mac = Integrity(OLD).mac(KEY_ROW, ROW)
    rotating = _rotating()
    assert not rotating.verify(KEY_ROW, ROW, b"sfk\x00\x00\x00\x01" + old_mac)
    assert not rotating.verify(KEY_ROW, ROW, b"sfk\x00\x00\x00\x07" + old_mac)
    assert rotating.verify(KEY_ROW, ROW, old_mac)


def test_a_store_that_missed_a_whole_rotation_refuses_to_write(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path, master_key=SecretStr(base64.b64encode(os.urandom(32)).decode())
    )
    prepare(settings)
    with closing(SQLiteKeyStore(settings.keystore_path, keystore_keys(settings).kek)) as idle:
        idle.create_key("before", Algorithm.AES_256_GCM)
        # Another process rotates while this store makes no call at all.
        rotate_master(settings, None, 100, lambda done: None)
        with pytest.raises(KeyStoreUnavailable, match="was not following; restart it"):
            idle.create_key("after", Algorithm.AES_256_GCM)
    with closing(SQLiteKeyStore(settings.keystore_path, keystore_keys(settings).kek)) as fresh:
        assert [k.name for k in fresh.list_keys()] == ["before", "default"]
