"""Vault's token routes over the keystore's tokens: ``auth/token/lookup-self``,
``lookup-accessor`` and ``revoke-accessor``, in Vault's shapes and words.

A token's accessor is its public id (``tok_...``: what ``sealflow tokens create`` prints on
stderr, ``tokens list`` shows and ``tokens revoke`` takes). Every token may look itself up
(``lookup-self``, as Vault's default policy allows); the accessor routes name any token, so
they are token management, for ``admin`` only (``_routes``): Vault's default policy grants
neither, not even for a token's own accessor.

Vault forgets a revoked or expired token, so its accessor then names nothing:
``lookup-accessor`` answers 400 ``invalid accessor`` and ``revoke-accessor`` 200 with the
warning ``No token found with this accessor``, as for an accessor never made. sealflow keeps the
revoked row (``tokens list`` shows it; an expired one until it is swept) and answers the same.

A revocation is the keystore's ``revoke_token``, the CLI's write: one transaction, after which
this process's token cache is dropped (its next request with that token is refused, on every
path), other processes see it as they see a CLI revocation (SQLite: their next read,
PostgreSQL: its notification), and the keystore's ``on_change`` puts the ``token_revoke``
change on the audit trail with the caller the front door names (``_audit.asking``).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

from sealflow.service.keystore import KeyStore, TokenInfo, TokenNotFound, valid_accessor

from . import _wire
from ._wire import Body

NOT_FOUND = "No token found with this accessor"


def lookup_self(token: TokenInfo, secret: str) -> bytes:
    """The caller's token. ``id`` echoes the caller's own secret, as Vault does: Vault Agent's
    ``token_file`` auto-auth takes ``data.id`` as the token it then uses, and the caller sent
    that secret in this very request (docs/TRANSIT.md)."""
    return _wire.envelope(describe(token, secret))


def lookup_accessor(store: KeyStore, accessor: str) -> bytes:
    """The token of ``accessor`` as ``lookup-self`` shows it, with ``id`` empty, as Vault
    blanks it: the secret never leaves."""
    token = live(store, accessor)
    if token is None:
        raise _wire.user_error(_wire.framework_error("invalid accessor"))
    return _wire.envelope(describe(token, ""))


async def revoke_accessor(store: KeyStore, accessor: str) -> tuple[int, bytes]:
    """204 once the token of ``accessor`` is revoked; Vault's 200 and warning if there is none
    (never made, or revoked already: then nothing is written, and no change recorded)."""
    if await asyncio.to_thread(live, store, accessor) is None:  # a read: off the loop too
        return 200, _wire.envelope(None, [NOT_FOUND])
    try:
        await asyncio.to_thread(store.revoke_token, accessor)  # an fsynced write: off the loop
    except TokenNotFound:  # swept, or revoked by another process, meanwhile
        return 200, _wire.envelope(None, [NOT_FOUND])
    return 204, b""


def accessor(body: Body) -> str:
    """The body's ``accessor`` as Vault's framework reads a string field: an array or object is
    a field error; a number or boolean becomes text (which names no token); absent, ``null`` or
    empty is 400 ``missing accessor``."""
    value = body.get("accessor")
    if isinstance(value, list | dict):
        raise _wire.user_error(
            'Field validation failed: error converting input for field "accessor": '
            f"'' expected type 'string', got unconvertible type '{_wire.go_type(value)}'"
        )
    if value is None or value == "":
        raise _wire.user_error(_wire.framework_error("missing accessor"))
    return value if isinstance(value, str) else str(value)


def live(store: KeyStore, accessor: str) -> TokenInfo | None:
    """The token of ``accessor`` unless it is revoked, expired or used up (Vault has forgotten
    such a token), unknown, or its row fails its check; read from the keystore itself."""
    if not valid_accessor(accessor):
        return None  # names no token: not even a read
    try:
        token = store.get_token(accessor)
    except TokenNotFound:
        return None
    return None if token.revoked or token.expired(time.time()) else token


def describe(token: TokenInfo, secret: str) -> dict[str, Any]:
    """A token as Vault's lookup shows a service token; its ``policies`` are its scopes. A
    token without an expiry (the first-start root token, tokens made before lifetimes, and
    tokens made while no default TTL is set) shows as Vault's root token does: ``ttl`` 0,
    ``expire_time`` null, not renewable. ``num_uses``: the uses left after this request, -1
    once the last is made, as Vault counts them."""
    end = token.expire_time
    left = token.num_uses - token.uses if token.num_uses else 0
    return {
        "accessor": token.id,
        "creation_time": int(token.created_at),
        "creation_ttl": token.ttl,
        "display_name": token.label or "token",
        "entity_id": "",
        "expire_time": None if end is None else _rfc3339(end),
        "explicit_max_ttl": token.explicit_max_ttl,
        "id": secret,
        "issue_time": _rfc3339(token.created_at),
        "meta": None,
        "num_uses": -1 if token.num_uses and left <= 0 else left,
        "orphan": token.orphan,
        "path": "auth/token/create",
        "policies": list(token.scopes),
        "renewable": token.renewable,
        "ttl": token.ttl_left(time.time()),
        "type": "service",
    }


def _rfc3339(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).isoformat().replace("+00:00", "Z")
