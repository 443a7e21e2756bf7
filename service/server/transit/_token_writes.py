"""Vault's token routes that write: ``auth/token/create``, ``create-orphan``, ``renew``,
``renew-self``, ``renew-accessor``, ``revoke`` and ``revoke-self``, in Vault's fields, shapes
and words (checked against OpenBao by tests/service/transit/test_token_routes.py).

A token's Vault ``policies`` are its sealflow scopes (``encrypt:orders``, ``admin``...);
Vault's ``default`` policy, which Vault adds to every token, is dropped from a request and never
shown. ``display_name`` (else ``meta``, as ``k=v`` pairs) becomes the token's label. What
sealflow has no counterpart for is refused with a 400 saying so (``period``, batch tokens,
roles, entity aliases, a chosen token id) rather than ignored. Who may call which route is
decided before the body is read (``_token_routes``); which scopes a token may grant is
``_token_rules``'. Every write is a keystore transaction, off the event loop, recorded on the
audit trail as the keystore's change (``token_create``, ``token_renew``, ``token_revoke``:
the accessor acted on, never a secret) with the caller the front door names.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from sealflow.service.durations import parse_duration
from sealflow.service.keystore import (
    KeyStore,
    NotRenewable,
    Renewal,
    TokenExpired,
    TokenInfo,
    TokenNotFound,
)

from .. import _token_rules
from .._logging import AccessRecord
from . import _tokens, _wire
from ._wire import Body

_UNSUPPORTED = {
    "period": "periodic tokens",
    "role_name": "token roles",
    "entity_alias": "entity aliases",
    "id": "tokens with a chosen id",
}
MAX_LABEL = 256


async def create(
    store: KeyStore, parent: TokenInfo, body: Body, orphan: bool, log: AccessRecord
) -> bytes:
    """``create`` (``orphan``: ``create-orphan``): a token with a subset of the caller's scopes
    (none named: all of them, as Vault gives a child its parent's policies); its accessor in
    ``log.target_accessor``."""
    for field, what in _UNSUPPORTED.items():
        if body.get(field) not in (None, "", 0, "0", "0s"):
            raise _wire.user_error(f"{field}: sealflow does not support {what}")
    if _wire.as_str(body, "type", "service") not in ("service", "default", ""):
        raise _wire.user_error("type: sealflow does not support batch tokens")
    scopes = _policies(body) or list(parent.scopes)
    if _token_rules.missing(parent, scopes):
        raise _wire.user_error("child policies must be subset of parent")
    num_uses = _wire.as_int(body, "num_uses")
    if num_uses < 0:
        raise _wire.user_error("number of uses cannot be negative")
    minted = await asyncio.to_thread(
        _token_rules.mint,
        store,
        parent,
        scopes,
        _label(body),
        ttl=duration(body, "ttl") or None,
        explicit_max_ttl=duration(body, "explicit_max_ttl"),
        renewable=_wire.as_bool(body, "renewable", True),
        num_uses=num_uses,
        orphan=orphan or _wire.as_bool(body, "no_parent"),
    )
    log.target_accessor = minted.token.id
    warnings = list(minted.warnings)
    return _wire.envelope(None, warnings, auth(minted.token, minted.secret, minted.token.ttl))


async def renew(store: KeyStore, token: TokenInfo, body: Body, secret: str) -> bytes:
    """``renew``/``renew-self``/``renew-accessor`` of ``token`` by ``increment`` (Vault's
    duration, or seconds; none: the token's own TTL), capped with Vault's warning. ``secret``:
    what ``client_token`` shows (empty for ``renew-accessor``, as Vault blanks it)."""
    increment = duration(body, "increment", field=True)
    try:
        renewal: Renewal = await asyncio.to_thread(store.renew_token, token.id, increment or None)
    except NotRenewable as exc:
        raise _wire.user_error(str(exc)) from None
    except (TokenNotFound, TokenExpired):
        raise _wire.user_error("token not found") from None
    end = renewal.token.expire_time
    granted = 0 if end is None else round(end - time.time())
    return _wire.envelope(None, list(renewal.warnings), auth(renewal.token, secret, granted))


async def revoke(store: KeyStore, token: TokenInfo) -> tuple[int, bytes]:
    """204 once ``token`` and its children (all but orphans) are revoked; as Vault, 204 too if
    it went meanwhile."""
    with contextlib.suppress(TokenNotFound):
        await asyncio.to_thread(store.revoke_token, token.id)
    return 204, b""


def named(store: KeyStore, body: Body) -> TokenInfo | None:
    """The live token whose secret is the body's ``token`` (Vault's ``missing token ID`` for
    none), or None for one unknown, revoked, expired or used up. From the cache, as the front
    door finds tokens: a read of memory."""
    secret = _wire.as_str(body, "token").strip()
    if not secret:
        raise _wire.user_error("missing token ID")
    token = store.find_token(secret)
    return None if token is None or token.expired(time.time()) else token


def by_accessor(store: KeyStore, body: Body) -> TokenInfo:
    """The live token of the body's ``accessor``; Vault's ``invalid accessor`` for none."""
    token = _tokens.live(store, _tokens.accessor(body))
    if token is None:
        raise _wire.user_error(_wire.framework_error("invalid accessor"))
    return token


def auth(token: TokenInfo, secret: str, lease: int) -> dict[str, Any]:
    """Vault's ``auth`` block for a token just made or renewed."""
    policies = list(token.scopes)
    return {
        "client_token": secret,
        "accessor": token.id,
        "policies": policies,
        "token_policies": policies,
        "metadata": None,
        "lease_duration": lease,
        "renewable": token.renewable,
        "entity_id": "",
        "token_type": "service",
        "orphan": token.orphan,
        "mfa_requirement": None,
        "num_uses": token.num_uses,
    }


def duration(body: Body, name: str, field: bool = False) -> int:
    """A lifetime field: Vault's duration text (``1h30m``) or whole seconds; 0 if absent.
    ``field``: worded as Vault's framework words a field it cannot convert (``increment``)."""
    value = body.get(name)
    if value is None or value == "":
        return 0
    if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
        raise _wire.user_error(f"{name} must be positive")
    try:
        return parse_duration(int(value) if isinstance(value, float) else value)
    except ValueError:
        message = f'time: invalid duration "{value}"'
        if field:
            message = (
                f'Field validation failed: error converting input for field "{name}": {message}'
            )
        raise _wire.user_error(message) from None


def _policies(body: Body) -> list[str]:
    """``policies`` as Vault takes it (a list, or text separated by commas), ``default`` left
    out; duplicates once, in the order given."""
    value = body.get("policies")
    if value is None:
        return []
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _wire.user_error("policies must be a list of strings")
    names = (v.strip() for v in value)
    return list(dict.fromkeys(n for n in names if n and n != "default"))


def _label(body: Body) -> str:
    label = _wire.as_str(body, "display_name").strip()
    meta = body.get("meta")
    if not label and isinstance(meta, dict) and meta:
        label = ",".join(f"{k}={v}" for k, v in sorted(meta.items()))
    elif meta is not None and not isinstance(meta, dict):
        raise _wire.user_error("meta must be an object of strings")
    if len(label) > MAX_LABEL:
        raise _wire.user_error(f"display_name must be at most {MAX_LABEL} characters")
    return label
