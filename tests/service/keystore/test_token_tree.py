"""Issue 26, item 2, in the keystore (SQLite and a real PostgreSQL): a token's children are
revoked with it, recursively, in one transaction, unless created orphan; a child lives within
its parent (refused once the parent is gone, never past the parent's expiry); each revocation
is a change of its own."""

from __future__ import annotations

import pytest

from sealflow.service.keystore import KeyStore, TokenNotFound


def test_revoking_a_parent_revokes_its_tree_but_not_its_orphans(store: KeyStore) -> None:
    parent, parent_secret = store.create_token(["admin", "encrypt:*"])
    child, child_secret = store.create_token(["encrypt:a"], parent=parent.id, orphan=False)
    grandchild, grand_secret = store.create_token(["encrypt:a"], parent=child.id, orphan=False)
    orphan, orphan_secret = store.create_token(["encrypt:a"], parent=parent.id, orphan=True)
    assert (child.parent, child.orphan, orphan.orphan) == (parent.id, False, True)
    changes: list[tuple[str, dict[str, object]]] = []
    store.on_change = lambda operation, fields: changes.append((operation, fields))
    store.revoke_token(parent.id)
    for secret in (parent_secret, child_secret, grand_secret):
        assert store.find_token(secret) is None
    assert store.get_token(grandchild.id).revoked
    assert store.find_token(orphan_secret) == orphan  # an orphan outlives its parent
    assert [(op, f["target_accessor"], f.get("revoked_with")) for op, f in changes] == [
        ("token_revoke", parent.id, None),
        ("token_revoke", child.id, parent.id),
        ("token_revoke", grandchild.id, parent.id),
    ]


def test_a_child_never_outlives_its_parent(store: KeyStore) -> None:
    parent, _ = store.create_token(["admin", "encrypt:*"], ttl=100, explicit_max_ttl=100)
    child, _ = store.create_token(["encrypt:a"], ttl=3600, parent=parent.id, orphan=False)
    assert parent.expire_time is not None
    assert child.expire_time is not None
    assert child.expire_time <= parent.expire_time
    assert child.explicit_max_ttl <= 100
    renewed = store.renew_token(child.id, 7200)
    assert renewed.token.expire_time is not None
    assert renewed.token.expire_time <= parent.expire_time
    assert renewed.warnings  # capped, with Vault's warning
    orphan, _ = store.create_token(["encrypt:a"], ttl=3600, parent=parent.id, orphan=True)
    assert orphan.ttl == 3600  # an orphan is not bound to its parent's life


def test_a_revoked_parent_has_no_more_children(store: KeyStore) -> None:
    parent, _ = store.create_token(["admin"])
    store.revoke_token(parent.id)
    with pytest.raises(TokenNotFound):
        store.create_token(["admin"], parent=parent.id, orphan=False)
