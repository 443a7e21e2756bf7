"""Bearer tokens and scopes.

A token's secret is looked up by its SHA-256 digest and confirmed with a
constant-time comparison (in the keystore). Scopes are ``admin``,
``encrypt:<glob>``, ``decrypt:<glob>`` and ``export:<glob>``, globs matching key names
(``decrypt:orders*``). ``admin`` manages keys and tokens only: it does not
grant encryption or decryption, so an operator token cannot read data, nor
``export``: a key's material leaves (or is made able to leave) only for a token
that has ``admin`` and ``export`` on that key (docs/API.md, Authentication).
"""

from __future__ import annotations

import functools
import time
from fnmatch import fnmatchcase
from typing import Literal

from sealflow.service.keystore import KeyStore, TokenInfo

from . import _metrics, errors

Action = Literal["encrypt", "decrypt", "export", "hmac", "sign", "verify"]


def authenticate(store: KeyStore, authorization: str | None) -> TokenInfo:
    """The live token named by an ``Authorization: Bearer`` header, else 401 (``token_expired``
    for one past its expiry or with no use left: ``usable``)."""
    if authorization is None:
        _metrics.AUTH_FAILURES.labels("missing").inc()
        raise errors.unauthorized()
    secret = bearer(authorization)
    if secret is None:
        _metrics.AUTH_FAILURES.labels("malformed").inc()
        raise errors.unauthorized()
    token = store.find_token(secret)
    if token is None:
        _metrics.AUTH_FAILURES.labels("invalid").inc()
        raise errors.unauthorized()
    if not usable(token):
        raise errors.token_expired()
    return token


def usable(token: TokenInfo) -> bool:
    """Whether a known token is within its lifetime and uses, against the clock and the cached
    row: no keystore round trip (a renewal elsewhere reaches the cache as any change does:
    ``KeyStore.find_token``). Counted in the metrics when it is not."""
    if token.expire_time is None and not token.num_uses:
        return True  # never expires, no use limit: every token made before lifetimes
    if token.expired(time.time()):
        _metrics.AUTH_FAILURES.labels("expired").inc()
        return False
    return True


def bearer(authorization: str) -> str | None:
    """The secret of an ``Authorization: Bearer <secret>`` header, or None (no side effect:
    the Transit routes ask too, and leave failures to ``authenticate``)."""
    scheme, _, secret = authorization.partition(" ")
    secret = secret.strip()
    return secret if scheme.lower() == "bearer" and secret else None


def allows(token: TokenInfo, action: Action, name: str) -> bool:
    return _allowed(token.scopes, action, name)


# A token's scopes never change, and matching them against a name (fnmatch per scope) cost a
# microsecond or two per request: the answers are kept, for the most recent (scopes, action,
# name) triples (names come from requests, hence the bound).
@functools.lru_cache(maxsize=4096)
def _allowed(scopes: tuple[str, ...], action: str, name: str) -> bool:
    prefix = action + ":"
    return any(s.startswith(prefix) and fnmatchcase(name, s[len(prefix) :]) for s in scopes)


def require(token: TokenInfo, action: Action, name: str) -> None:
    if not allows(token, action, name):
        _metrics.AUTH_FAILURES.labels("forbidden").inc()
        raise errors.forbidden(f"{action}:{name}")


def is_admin(token: TokenInfo) -> bool:
    """Whether the token has ``admin``: the scope of the key and token routes, both APIs'."""
    return "admin" in token.scopes


def require_admin(token: TokenInfo) -> None:
    if not is_admin(token):
        _metrics.AUTH_FAILURES.labels("forbidden").inc()
        raise errors.forbidden("admin")
