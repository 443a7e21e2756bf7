"""Vault's AppRole ``login``: the one route without a token. The credential (role id and
secret id) is in the body, read with a small limit (``LOGIN_MAX``). A refused login is Vault's
400 (``invalid role or secret ID``; a CIDR refusal names the source address), counted as a
failed authentication and put on the audit trail as one (never the secret id). A login's token
is an orphan whose scopes are the role's ``token_policies`` and whose lifetime is the role's;
its audit record names the role, the new token's accessor and the client's address (the peer,
or the client a trusted proxy names). Policies are shown as the scopes alone: sealflow has no
``default`` policy to add, as OpenBao does (docs/TRANSIT.md, AppRole).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import orjson

from sealflow.service.keystore import LoginRefused, RoleInfo, SecretIdInfo, TokenInfo

from .. import _audit, _metrics, errors
from .._logging import AccessRecord
from .._state import Services
from . import _wire
from ._approle import PREFIX
from ._wire import Body

LOGIN_MAX = 4096  # a role id and a secret id, and room for Vault Agent's extra fields


async def login(svc: Services, body: Body, log: AccessRecord) -> tuple[int, bytes]:
    """A login: the token, in Vault's ``auth`` envelope; refusals recorded as failed logins."""
    trail = svc.audit
    if trail is not None and trail.failing:
        _metrics.AUTH_FAILURES.labels("audit_unavailable").inc()
        raise errors.audit_unavailable()
    role_id = _wire.as_str(body, "role_id").strip()
    secret = _wire.as_str(body, "secret_id").strip()
    try:
        if not role_id:
            raise LoginRefused("missing role_id")
        role, used = await asyncio.to_thread(
            svc.store.approle_login, role_id, secret, log.remote_addr
        )
    except LoginRefused as exc:
        _metrics.AUTH_FAILURES.labels("invalid").inc()
        if trail is not None:
            trail.record(_login_fields(log, "auth_failure", 400, _REFUSED))
        raise _wire.user_error(str(exc)) from None
    # Who asks, for the token_create change the login makes: the role, from the client.
    who = _login_fields(log, "", 0, {"auth_method": "approle", "role": role.name})
    del who["operation"]
    asked = _audit.asking.set(who)
    try:
        token, client_token = await asyncio.to_thread(_issue, svc, role)
    finally:
        _audit.asking.reset(asked)
    log.target_accessor = token.id
    if trail is not None:
        fields = {"auth_method": "approle", "role": role.name, "accessor": token.id}
        ticket = trail.record(_login_fields(log, "request", 200, fields))
        if not await trail.confirmed(ticket):  # mode required: no token leaves unrecorded
            await asyncio.to_thread(svc.store.revoke_token, token.id)
            raise errors.audit_unavailable()
    return 200, _auth_envelope(role, used, token, client_token)


def _issue(svc: Services, role: RoleInfo) -> tuple[TokenInfo, str]:
    return svc.store.create_token(
        list(role.token_policies),
        f"approle-{role.name}",
        ttl=role.token_ttl or None,
        explicit_max_ttl=role.token_max_ttl,
        num_uses=role.token_num_uses,
        orphan=True,
    )


def _login_fields(
    log: AccessRecord, kind_: str, status: int, extra: Mapping[str, object]
) -> dict[str, object]:
    fields: dict[str, object] = {"operation": "login", "method": "POST", "route": _LOGIN_ROUTE}
    if kind_:
        fields["type"], fields["status"] = kind_, status
    if log.request_id is not None:
        fields["request_id"] = log.request_id
    if log.remote_addr is not None:
        fields["remote_addr"] = log.remote_addr
    fields.update(extra)
    return fields


_LOGIN_ROUTE = PREFIX + "login"
_REFUSED = {"auth_method": "approle", "error": "login_refused"}


def _auth_envelope(
    role: RoleInfo, used: SecretIdInfo | None, token: TokenInfo, client_token: str
) -> bytes:
    metadata: dict[str, str] = {} if used is None else orjson.loads(used.metadata)
    metadata["role_name"] = role.name
    policies = sorted(token.scopes)
    auth = {
        "client_token": client_token,
        "accessor": token.id,
        "policies": policies,
        "token_policies": policies,
        "metadata": metadata,
        "lease_duration": token.ttl,
        "renewable": token.renewable and token.expire_time is not None,
        "entity_id": "",
        "token_type": "service",
        "orphan": True,
        "mfa_requirement": None,
        "num_uses": token.num_uses,
    }
    return orjson.dumps(
        {
            "request_id": _wire.request_id(),
            "lease_id": "",
            "renewable": False,
            "lease_duration": 0,
            "data": None,
            "wrap_info": None,
            "warnings": None,
            "auth": auth,
        }
    )
