"""Every committed change of a keystore is told once to its ``on_change`` hook (the audit
trail's source for changes), after the commit, naming what changed and never a secret; a write
that is refused tells nothing."""

from __future__ import annotations

import pytest

from sealflow.engine import Algorithm
from sealflow.service.keystore import DeletionNotAllowed, KeyExists, KeyStore


def test_each_change_is_told_once_after_it_is_committed(store: KeyStore) -> None:
    told: list[tuple[str, dict[str, object]]] = []
    store.on_change = lambda operation, fields: told.append((operation, fields))
    store.create_key("k", Algorithm.AES_256_GCM)
    with pytest.raises(KeyExists):
        store.create_key("k", Algorithm.AES_256_GCM)
    store.rotate_key("k")
    store.rotate_if_latest("k", 1)  # not the latest: nothing changes
    store.rotate_if_latest("k", 2)
    store.set_limits("k", max_encryptions=1000)
    with pytest.raises(DeletionNotAllowed):
        store.delete_key("k")
    store.configure("k", deletion_allowed=True)
    info, secret = store.create_token(["encrypt:k"], label="billing")
    store.revoke_token(info.id)
    store.delete_key("k")
    assert told == [
        ("key_create", {"key": "k", "version": 1}),
        ("key_rotate", {"key": "k", "version": 2}),
        ("key_rotate", {"key": "k", "version": 3, "mode": "automatic"}),
        ("key_config", {"key": "k"}),
        ("key_config", {"key": "k"}),
        ("token_create", {"target_accessor": info.id, "target_label": "billing"}),
        ("token_revoke", {"target_accessor": info.id, "target_label": "billing"}),
        ("key_delete", {"key": "k", "version": 3}),
    ]
    assert secret not in repr(told)
