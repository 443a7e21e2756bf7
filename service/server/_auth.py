"""Bearer tokens and scopes.

A token's secret is looked up by its SHA-256 digest and confirmed with a
constant-time comparison (in the keystore). Scopes are ``admin``,
``encrypt:<glob>`` and ``decrypt:<glob>``, globs matching key names
(``decrypt:orders*``). ``admin`` manages keys and tokens only: it does not
grant encryption or decryption, so an operator token cannot read data.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Literal

from sealflow.service.keystore import KeyStore, TokenInfo

from . import _metrics, errors

Action = Literal["encrypt", "decrypt"]


def authenticate(store: KeyStore, authorization: str | None) -> TokenInfo:
    """The live token named by an ``Authorization: Bearer`` header, else 401."""
    if authorization is None:
        _metrics.AUTH_FAILURES.labels("missing").inc()
        raise errors.unauthorized()
    scheme, _, secret = authorization.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        _metrics.AUTH_FAILURES.labels("malformed").inc()
        raise errors.unauthorized()
    token = store.find_token(secret.strip())
    if token is None:
        _metrics.AUTH_FAILURES.labels("invalid").inc()
        raise errors.unauthorized()
    return token


# Answers of ``allows`` by (scopes, action, key name): a token's scopes never change, and
# matching them against a name (fnmatch per scope) cost a microsecond or two per request.
_ALLOWED: dict[tuple[tuple[str, ...], str, str], bool] = {}
_ALLOWED_MAX = 4096  # then start over: names come from requests


def allows(token: TokenInfo, action: Action, name: str) -> bool:
    key = (token.scopes, action, name)
    answer = _ALLOWED.get(key)
    if answer is None:
        prefix = action + ":"
        answer = any(
            s.startswith(prefix) and fnmatchcase(name, s[len(prefix) :]) for s in token.scopes
        )
        if len(_ALLOWED) >= _ALLOWED_MAX:
            _ALLOWED.clear()
        _ALLOWED[key] = answer
    return answer


def require(token: TokenInfo, action: Action, name: str) -> None:
    if not allows(token, action, name):
        _metrics.AUTH_FAILURES.labels("forbidden").inc()
        raise errors.forbidden(f"{action}:{name}")


def require_admin(token: TokenInfo) -> None:
    if "admin" not in token.scopes:
        _metrics.AUTH_FAILURES.labels("forbidden").inc()
        raise errors.forbidden("admin")
