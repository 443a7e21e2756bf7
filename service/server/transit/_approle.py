"""Vault's AppRole auth method under ``/v1/auth/approle/``, over the keystore's roles and secret
ids (``KeyStore.write_role`` and friends), in Vault's request and response shapes: the routes
(``kind``) and the management of roles and secret ids; the login is ``_approle_login``'s.

Managing roles and secret ids needs ``admin`` (``_routes``), and every write that shapes what a
login yields (a role, its role id, a secret id) needs the role's scopes too, by the rule of
token creation (``_token_rules.missing``): an ``admin`` token can neither make a role that
yields data scopes it lacks nor mint a secret id for one, so it cannot log in to scopes it
does not hold.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import orjson

from sealflow.service.durations import parse_duration
from sealflow.service.keystore import (
    RoleInfo,
    RoleNotFound,
    SecretIdInfo,
    TokenInfo,
)

from .. import _metrics
from .._state import Services
from .._token_rules import missing
from ..errors import ApiError
from ..http import LIST_METHOD as LIST
from . import _wire
from ._wire import Body

PREFIX = "/v1/auth/approle/"
_NO_TIME = "0001-01-01T00:00:00Z"  # Go's zero time, as Vault shows "no expiry"
# Vault's role fields that sealflow has no counterpart for: refused unless left at their zero
# value, rather than ignored (a client that sets one expects it enforced).
_UNSUPPORTED = ("token_explicit_max_ttl", "token_period", "token_bound_cidrs")
_DURATIONS = ("token_ttl", "token_max_ttl", "secret_id_ttl")
_COUNTS = ("token_num_uses", "secret_id_num_uses")

_BY_SECRET = ("secret-id", "secret-id-accessor")  # .../lookup and .../destroy under each

Reader = Callable[[], Awaitable[Body]]


def kind(parts: list[str]) -> str | None:
    """The route of a path under ``PREFIX``, split at its slashes; None: no such route."""
    n = len(parts)
    if parts == ["login"]:
        return "approle_login"
    if parts[0] != "role":
        return None
    if n == 1 or parts == ["role", ""]:
        return "approle_roles"
    if n == 4 and parts[1] and parts[2:] == ["secret-id", ""]:
        return "approle_secret_id"  # LIST with the slash Vault's CLI appends
    if not all(parts[1:]):
        return None
    if n == 2:
        return "approle_role"
    if n == 3 and parts[2] in ("role-id", "secret-id", "custom-secret-id"):
        return "approle_" + parts[2].replace("-", "_")
    if n == 4 and parts[2] in _BY_SECRET and parts[3] in ("lookup", "destroy"):
        return "approle_" + parts[2].replace("-", "_") + "_" + parts[3]
    return None


# -- management (``admin``, checked by ``_routes`` before the body is read)


async def manage(
    svc: Services, route: str, method: str, path: str, caller: TokenInfo, read: Reader
) -> tuple[int, bytes]:
    store = svc.store
    parts = path[len(PREFIX) :].split("/")
    if route == "approle_roles":
        names = [r.name for r in await asyncio.to_thread(store.list_roles)]
        if not names:
            raise _wire.not_found()
        return 200, _wire.envelope({"keys": names})
    name = parts[1]
    if route == "approle_role":
        if method == "GET":
            return 200, _wire.envelope(_describe(await _role(svc, name)))
        if method == "DELETE":
            await asyncio.to_thread(store.delete_role, name)
            return 204, b""
        fields = _role_fields(await read())
        await _may_grant(svc, caller, name, fields.get("token_policies"))
        await keystore(store.write_role, name, fields)
        return 204, b""
    if route == "approle_role_id":
        if method == "GET":
            return 200, _wire.envelope({"role_id": (await _role(svc, name)).role_id})
        role_id = _wire.as_str(await read(), "role_id")
        if not role_id:
            raise _wire.user_error("missing role_id")
        await _may_grant(svc, caller, name)
        await keystore(store.set_role_id, name, role_id)
        return 204, b""
    if route == "approle_secret_id" and method == LIST:
        try:
            held = await asyncio.to_thread(store.list_secret_ids, name)
        except RoleNotFound as exc:
            raise _wire.user_error(str(exc)) from None
        if not held:
            raise _wire.not_found()
        return 200, _wire.envelope({"keys": [info.accessor for info in held]})
    body = await read()
    if route.startswith("approle_secret_id_accessor_"):
        return await _by_accessor(svc, route, name, body)
    if route in ("approle_secret_id", "approle_custom_secret_id"):
        await _may_grant(svc, caller, name)
        return 200, await _generate(svc, name, body, route == "approle_custom_secret_id")
    secret = _wire.as_str(body, "secret_id")
    if not secret:
        raise _wire.user_error("missing secret_id")
    if route == "approle_secret_id_lookup":
        info = await keystore(store.lookup_secret_id, name, secret)
        return (204, b"") if info is None else (200, _wire.envelope(_secret_id(info)))
    await keystore(store.destroy_secret_id, name, secret)
    return 204, b""


async def _by_accessor(svc: Services, route: str, name: str, body: Body) -> tuple[int, bytes]:
    """``secret-id-accessor/lookup`` and ``/destroy``: a secret id named by its accessor (what
    ``LIST role/:name/secret-id`` shows), never by the secret. An unknown accessor is OpenBao's
    words, as a 404 for the lookup (OpenBao's status) and a 400 for the destroy (OpenBao's
    500)."""
    accessor = _wire.as_str(body, "secret_id_accessor")
    if not accessor:
        raise _wire.user_error("missing secret_id_accessor")
    unknown = f'failed to find accessor entry for secret_id_accessor: "{accessor}"'
    if route == "approle_secret_id_accessor_lookup":
        info = await keystore(svc.store.lookup_secret_id, name, accessor=accessor)
        if info is None:
            raise ApiError(404, "not_found", unknown)
        return 200, _wire.envelope(_secret_id(info))
    if not await keystore(svc.store.destroy_secret_id, name, accessor=accessor):
        raise _wire.user_error(unknown)
    return 204, b""


async def _may_grant(
    svc: Services, caller: TokenInfo, name: str, policies: tuple[str, ...] | None = None
) -> None:
    """Refuse (403) a change that would let the caller obtain a token with scopes it does not
    hold: a role's scopes (``policies``, or the role's own when the change keeps them), for
    every write that shapes what a login yields (role, role id, secret id). A role that does
    not exist yet grants nothing."""
    if policies is None:
        try:
            policies = (await asyncio.to_thread(svc.store.get_role, name)).token_policies
        except RoleNotFound:
            return
    if missing(caller, policies):
        _metrics.AUTH_FAILURES.labels("forbidden").inc()
        raise _wire.permission_denied()


async def _generate(svc: Services, name: str, body: Body, custom: bool) -> bytes:
    given = _wire.as_str(body, "secret_id") if custom else None
    if custom and not given:
        raise _wire.user_error("missing secret_id")
    if string_list(body, "token_bound_cidrs"):
        raise _wire.user_error("token_bound_cidrs is not supported: bind the secret ids instead")
    meta_text = _wire.as_str(body, "metadata")
    try:
        metadata = orjson.loads(meta_text) if meta_text else {}
    except orjson.JSONDecodeError:
        raise _wire.user_error("failed to parse metadata: not a JSON object") from None
    if not isinstance(metadata, dict):
        raise _wire.user_error("failed to parse metadata: not a JSON object")
    ttl = duration(body, "ttl") if body.get("ttl") is not None else None
    uses = _wire.as_int(body, "num_uses") if body.get("num_uses") is not None else None
    info, secret = await keystore(
        svc.store.create_secret_id,
        name,
        metadata=metadata,
        cidrs=list(string_list(body, "cidr_list")),
        ttl=ttl,
        num_uses=uses,
        secret=given,
    )
    return _wire.envelope(
        {
            "secret_id": secret,
            "secret_id_accessor": info.accessor,
            "secret_id_num_uses": info.num_uses,
            "secret_id_ttl": _ttl(info),
        }
    )


async def _role(svc: Services, name: str) -> RoleInfo:
    try:
        return await asyncio.to_thread(svc.store.get_role, name)
    except RoleNotFound:
        raise _wire.not_found() from None


async def keystore(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A keystore write off the event loop; a missing role is Vault's 404 with its message."""
    try:
        return await asyncio.to_thread(call, *args, **kwargs)
    except RoleNotFound as exc:
        raise ApiError(404, "not_found", str(exc)) from None


def _role_fields(body: Body) -> dict[str, Any]:
    for field in _UNSUPPORTED:
        value = body.get(field)
        if value not in (None, "", 0, "0", [], "0s"):
            raise _wire.user_error(f"{field} is not supported by sealflow")
    if body.get("token_type") not in (None, "", "default", "service"):
        raise _wire.user_error("token_type: sealflow makes service tokens only")
    fields: dict[str, Any] = {}
    policies = body.get("token_policies", body.get("policies"))
    if policies is not None:
        fields["token_policies"] = string_list(
            body, "token_policies" if "token_policies" in body else "policies"
        )
    for name in _DURATIONS:
        if body.get(name) is not None:
            fields[name] = duration(body, name)
    for name in _COUNTS:
        if body.get(name) is not None:
            fields[name] = _wire.as_int(body, name)
    if body.get("secret_id_bound_cidrs") is not None:
        fields["secret_id_bound_cidrs"] = string_list(body, "secret_id_bound_cidrs")
    if body.get("bind_secret_id") is not None:
        fields["bind_secret_id"] = _wire.as_bool(body, "bind_secret_id")
    return fields


def string_list(body: Body, name: str) -> tuple[str, ...]:
    """A list of strings as Vault's ``TypeCommaStringSlice``: a list, or comma-separated text."""
    value = body.get(name)
    if value is None:
        return ()
    items = value if isinstance(value, list) else str(value).split(",")
    return tuple(str(item).strip() for item in items if str(item).strip())


def duration(body: Body, name: str) -> int:
    try:
        return parse_duration(body.get(name))
    except ValueError:
        raise _wire.user_error(
            f'Field validation failed: error converting input for field "{name}":'
            f" invalid duration {body.get(name)!r}"
        ) from None


def _describe(role: RoleInfo) -> dict[str, Any]:
    """A role as OpenBao's ``role/:name`` read shows it."""
    return {
        "bind_secret_id": role.bind_secret_id,
        "local_secret_ids": False,
        "secret_id_bound_cidrs": list(role.secret_id_bound_cidrs),
        "secret_id_num_uses": role.secret_id_num_uses,
        "secret_id_ttl": role.secret_id_ttl,
        "token_bound_cidrs": [],
        "token_explicit_max_ttl": 0,
        "token_max_ttl": role.token_max_ttl,
        "token_no_default_policy": False,
        "token_num_uses": role.token_num_uses,
        "token_period": 0,
        "token_policies": list(role.token_policies),
        "token_strictly_bind_ip": False,
        "token_ttl": role.token_ttl,
        "token_type": "default",
    }


def _secret_id(info: SecretIdInfo) -> dict[str, Any]:
    created = _rfc3339(info.created_at)
    return {
        "cidr_list": list(info.cidrs),
        "creation_time": created,
        "expiration_time": _NO_TIME if info.expire_time is None else _rfc3339(info.expire_time),
        "last_updated_time": created,
        "metadata": orjson.loads(info.metadata),
        "secret_id_accessor": info.accessor,
        "secret_id_num_uses": info.uses_left,
        "secret_id_ttl": _ttl(info),
        "token_bound_cidrs": [],
    }


def _ttl(info: SecretIdInfo) -> int:
    return 0 if info.expire_time is None else round(info.expire_time - info.created_at)


def _rfc3339(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).isoformat().replace("+00:00", "Z")
