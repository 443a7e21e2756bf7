"""Vault's token routes (``auth/token/...``): who may call which, decided before a byte of the
body is read, then the route's answer (``_tokens`` for lookups and ``revoke-accessor``,
``_token_writes`` for the rest).

Every token looks itself up, renews and revokes itself (``lookup-self``, ``renew-self``,
``revoke-self``, as Vault's default policy allows). The other routes create tokens or name
another token (by its secret in ``token``, or by its ``accessor``): token management, for
``admin`` only (docs/TRANSIT.md), refused with Vault's 403 from the head. The accessor a route
acts on goes into the access log and the audit record (``target_accessor``), never a secret.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from sealflow.service.keystore import KeyStore, TokenInfo, valid_accessor

from .. import _auth, _metrics
from .._logging import AccessRecord
from ..errors import ApiError
from . import _token_writes, _tokens, _wire
from ._wire import Body, Reply

SELF = frozenset(("lookup-self", "renew-self", "revoke-self"))
# Every token route: those not in SELF need ``admin``.
KINDS = SELF | {
    "create",
    "create-orphan",
    "lookup",
    "lookup-accessor",
    "renew",
    "renew-accessor",
    "revoke",
    "revoke-accessor",
}


async def answer(
    store: KeyStore,
    kind: str,
    token: TokenInfo,
    secret: str,
    read: Callable[[], Awaitable[Body]],
    log: AccessRecord,
) -> tuple[int, Reply]:
    """The answer of token route ``kind`` to ``token`` (whose ``secret`` the request carries);
    ``read`` reads and parses the body, called only once the caller may use the route."""
    if kind not in SELF and not _auth.is_admin(token):  # before the body is read
        _metrics.AUTH_FAILURES.labels("forbidden").inc()
        raise _wire.policy_denied()
    if kind == "lookup-self":
        return 200, _tokens.lookup_self(token, secret)
    body = await read()
    if kind == "revoke-self":
        return await _token_writes.revoke(store, token)
    if kind == "renew-self":
        return 200, await _token_writes.renew(store, token, body, secret)
    if kind in ("create", "create-orphan"):
        orphan = kind == "create-orphan"
        return 200, await _token_writes.create(store, token, body, orphan, log)
    if kind == "lookup" and body.get("token") in (None, ""):
        return 200, _tokens.lookup_self(token, secret)  # Vault: no token named is the caller
    if kind in ("lookup", "renew", "revoke"):
        return await _by_secret(store, kind, body, log)
    accessor = _tokens.accessor(body)
    if valid_accessor(accessor):  # never what a caller made up, of any length
        log.target_accessor = accessor
    if kind == "lookup-accessor":
        # A read of the keystore: off the event loop, as every wait on the database.
        return 200, await asyncio.to_thread(_tokens.lookup_accessor, store, accessor)
    if kind == "revoke-accessor":
        return await _tokens.revoke_accessor(store, accessor)
    target = await asyncio.to_thread(_token_writes.by_accessor, store, body)
    return 200, await _token_writes.renew(store, target, body, "")


async def _by_secret(
    store: KeyStore, kind: str, body: Body, log: AccessRecord
) -> tuple[int, Reply]:
    """``lookup``, ``renew`` and ``revoke`` of the token whose secret is the body's ``token``,
    answered as Vault answers for one it does not know: 403 ``bad token``, 400 ``token not
    found``, and 204 (nothing to revoke)."""
    target = _token_writes.named(store, body)
    if target is None:
        if kind == "lookup":
            raise ApiError(403, "forbidden", "bad token")
        if kind == "renew":
            raise _wire.user_error("token not found")
        return 204, b""
    log.target_accessor = target.id
    secret = _wire.as_str(body, "token").strip()
    if kind == "lookup":
        return 200, _tokens.lookup_self(target, secret)
    if kind == "renew":
        return 200, await _token_writes.renew(store, target, body, secret)
    return await _token_writes.revoke(store, target)
