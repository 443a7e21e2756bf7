"""Vault's AppRole ``login``: the one route without a token. The credential (role id and
secret id) is in the body, read with a small limit (``_login.LOGIN_MAX``). A refused login is
Vault's 400 (``invalid role or secret ID``; a CIDR refusal names the source address), counted
as a failed authentication and put on the audit trail as one (never the secret id). A login's
token is an orphan whose scopes are the role's ``token_policies`` and whose lifetime is the
role's; its audit record names the role, the new token's accessor and the client's address
(the peer, or the client a trusted proxy names); ``_login`` does what every login does.
"""

from __future__ import annotations

import asyncio

import orjson

from sealflow.service.keystore import LoginRefused

from .._logging import AccessRecord
from .._state import Services
from . import _login, _wire
from ._approle import PREFIX
from ._wire import Body

_LOGIN_ROUTE = PREFIX + "login"


async def login(svc: Services, body: Body, log: AccessRecord) -> tuple[int, bytes]:
    """A login: the token, in Vault's ``auth`` envelope; refusals recorded as failed logins."""
    _login.check_trail(svc)
    role_id = _wire.as_str(body, "role_id").strip()
    secret = _wire.as_str(body, "secret_id").strip()
    try:
        if not role_id:
            raise LoginRefused("missing role_id")
        role, used = await asyncio.to_thread(
            svc.store.approle_login, role_id, secret, log.remote_addr
        )
    except LoginRefused as exc:
        _login.refused(svc, log, _LOGIN_ROUTE, {"auth_method": "approle"})
        raise _wire.user_error(str(exc)) from None
    grant = _login.Grant(
        role.token_policies,
        f"approle-{role.name}",
        role.token_ttl,
        role.token_max_ttl,
        role.token_num_uses,
    )
    who = {"auth_method": "approle", "role": role.name}
    token, client_token = await _login.issue(svc, log, _LOGIN_ROUTE, grant, who)
    metadata: dict[str, str] = {} if used is None else orjson.loads(used.metadata)
    metadata["role_name"] = role.name
    return 200, _login.auth_envelope(token, client_token, metadata)
