"""What every login of an auth method does once it knows who logs in (AppRole's
``_approle_login``, cert's ``_cert_login``): refuse while the audit trail cannot record, put a
refusal on the trail as a failed authentication, issue the orphan token the role grants, record
the login (method, role, the new token's accessor, the client's address, and what the method
adds, never a credential) and answer with Vault's ``auth`` block. Policies are shown as the
scopes alone: sealflow has no ``default`` policy to add, as OpenBao does (docs/TRANSIT.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from sealflow.service.keystore import TokenInfo

from .. import _audit, _metrics, errors
from .._logging import AccessRecord
from .._state import Services
from . import _wire

LOGIN_MAX = 4096  # a login's body: a role id and a secret id, or a role name, and room to spare


@dataclass(frozen=True, slots=True)
class Grant:
    """What a role grants a login: the token's scopes, label and lifetime."""

    scopes: tuple[str, ...]
    label: str
    ttl: int
    max_ttl: int
    num_uses: int = 0


def check_trail(svc: Services) -> None:
    """Before anything: a login with the audit trail failing (mode required) is refused."""
    trail = svc.audit
    if trail is not None and trail.failing:
        _metrics.AUTH_FAILURES.labels("audit_unavailable").inc()
        raise errors.audit_unavailable()


def refused(svc: Services, log: AccessRecord, route: str, fields: Mapping[str, object]) -> None:
    """A refused login: counted, and on the trail as a failed authentication."""
    _metrics.AUTH_FAILURES.labels("invalid").inc()
    if svc.audit is not None:
        extra = {**fields, "error": "login_refused"}
        svc.audit.record(_fields(log, route, "auth_failure", 400, extra))


async def issue(
    svc: Services, log: AccessRecord, route: str, grant: Grant, who: Mapping[str, object]
) -> tuple[TokenInfo, str]:
    """The login's token, recorded (``who``: auth_method, role and what the method adds);
    revoked again, and 503, if the trail must confirm the record and cannot."""
    asking = _fields(log, route, "", 0, who)
    del asking["operation"]
    asked = _audit.asking.set(asking)  # who asks, for the token_create change the login makes
    try:
        token, client_token = await asyncio.to_thread(
            svc.store.create_token,
            list(grant.scopes),
            grant.label,
            ttl=grant.ttl or None,
            explicit_max_ttl=grant.max_ttl,
            num_uses=grant.num_uses,
            orphan=True,
        )
    finally:
        _audit.asking.reset(asked)
    log.target_accessor = token.id
    trail = svc.audit
    if trail is not None:
        ticket = trail.record(_fields(log, route, "request", 200, {**who, "accessor": token.id}))
        if not await trail.confirmed(ticket):  # mode required: no token leaves unrecorded
            await asyncio.to_thread(svc.store.revoke_token, token.id)
            raise errors.audit_unavailable()
    return token, client_token


def auth_envelope(token: TokenInfo, client_token: str, metadata: Mapping[str, str]) -> bytes:
    """Vault's answer to a login: its ``auth`` block, the token orphan."""
    policies = sorted(token.scopes)
    auth = {
        "client_token": client_token,
        "accessor": token.id,
        "policies": policies,
        "token_policies": policies,
        "metadata": dict(metadata),
        "lease_duration": token.ttl,
        "renewable": token.renewable and token.expire_time is not None,
        "entity_id": "",
        "token_type": "service",
        "orphan": True,
        "mfa_requirement": None,
        "num_uses": token.num_uses,
    }
    return _wire.envelope(None, auth=auth)


def _fields(
    log: AccessRecord, route: str, kind: str, status: int, extra: Mapping[str, object]
) -> dict[str, object]:
    fields: dict[str, object] = {"operation": "login", "method": "POST", "route": route}
    if kind:
        fields["type"], fields["status"] = kind, status
    if log.request_id is not None:
        fields["request_id"] = log.request_id
    if log.remote_addr is not None:
        fields["remote_addr"] = log.remote_addr
    fields.update(extra)
    return fields
