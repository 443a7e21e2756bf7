"""Vault's cert auth method under ``/v1/auth/cert/``: the routes (``kind``) and the management
of certificate roles (``certs/:name``) over the keystore's (``KeyStore.write_cert_role`` and
friends), in OpenBao's request and response shapes; the login is ``_cert_login``'s.

Managing roles needs ``admin`` (``_routes``), and a write needs the role's scopes too, by the
rule of token creation (``_token_rules.missing``), as AppRole's: an ``admin`` token cannot make
a role that would let a certificate it holds log in to data scopes it lacks. Vault's fields
sealflow has no counterpart for are refused unless left at their zero value (docs/TRANSIT.md,
Cert).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from sealflow.service.keystore import CertRoleInfo, RoleNotFound, TokenInfo

from .. import _metrics
from .._state import Services
from .._token_rules import missing
from . import _wire
from ._approle import duration, keystore, string_list
from ._wire import Body

PREFIX = "/v1/auth/cert/"
_UNSUPPORTED = (
    "allowed_names",
    "required_extensions",
    "allowed_metadata_extensions",
    "ocsp_enabled",
    "ocsp_ca_certificates",
    "ocsp_servers_override",
    "ocsp_fail_open",
    "ocsp_query_all_servers",
    "token_bound_cidrs",
    "bound_cidrs",
    "token_explicit_max_ttl",
    "token_period",
    "period",
    "token_num_uses",
    "token_no_default_policy",
)
_RULES = (
    "allowed_common_names",
    "allowed_dns_sans",
    "allowed_email_sans",
    "allowed_uri_sans",
    "allowed_organizational_units",
)
# Vault's names for a field, the current one first (older ones still accepted, as Vault does).
_ALIASES = {
    "token_policies": ("token_policies", "policies"),
    "token_ttl": ("token_ttl", "ttl", "lease"),
    "token_max_ttl": ("token_max_ttl", "max_ttl"),
}

Reader = Callable[[], Awaitable[Body]]


def kind(parts: list[str]) -> str | None:
    """The route of a path under ``PREFIX``, split at its slashes; None: no such route."""
    if parts == ["login"]:
        return "cert_login"
    if parts[0] != "certs":
        return None
    if len(parts) == 1 or parts == ["certs", ""]:
        return "cert_roles"
    if len(parts) == 2 and parts[1]:
        return "cert_role"
    return None


async def manage(
    svc: Services, route: str, method: str, path: str, caller: TokenInfo, read: Reader
) -> tuple[int, bytes]:
    """A management route (``admin``, checked by ``_routes`` before the body is read)."""
    store = svc.store
    if route == "cert_roles":
        names = [r.name for r in await asyncio.to_thread(store.list_cert_roles)]
        if not names:
            raise _wire.not_found()
        return 200, _wire.envelope({"keys": names})
    name = path[len(PREFIX) :].split("/")[1]
    if method == "GET":
        try:
            role = await asyncio.to_thread(store.get_cert_role, name)
        except RoleNotFound:
            raise _wire.not_found() from None
        return 200, _wire.envelope(describe(role))
    if method == "DELETE":
        await asyncio.to_thread(store.delete_cert_role, name)
        return 204, b""
    fields = _role_fields(await read())
    await _may_grant(svc, caller, name, fields.get("token_policies"))
    await keystore(store.write_cert_role, name, fields)
    return 204, b""


async def _may_grant(
    svc: Services, caller: TokenInfo, name: str, policies: tuple[str, ...] | None
) -> None:
    """Refuse (403) a write to a role whose scopes (given, or kept) the caller lacks."""
    if policies is None:
        try:
            policies = (await asyncio.to_thread(svc.store.get_cert_role, name)).token_policies
        except RoleNotFound:
            return
    if missing(caller, policies):
        _metrics.AUTH_FAILURES.labels("forbidden").inc()
        raise _wire.permission_denied()


def _role_fields(body: Body) -> dict[str, Any]:
    given = sorted(
        f for f in _UNSUPPORTED if body.get(f) not in (None, "", 0, "0", [], "0s", False)
    )
    if given:
        raise _wire.user_error(f"not supported by sealflow: {', '.join(given)}")
    if body.get("token_type") not in (None, "", "default", "service"):
        raise _wire.user_error("token_type: sealflow makes service tokens only")
    fields: dict[str, Any] = {}
    if body.get("certificate") is not None:
        fields["certificate"] = _wire.as_str(body, "certificate")
    if body.get("display_name") is not None:
        fields["display_name"] = _wire.as_str(body, "display_name")
    for rule in _RULES:
        if body.get(rule) is not None:
            fields[rule] = string_list(body, rule)
    for field, names in _ALIASES.items():
        name = next((n for n in names if body.get(n) is not None), None)
        if name is None:
            continue
        policies = field == "token_policies"
        fields[field] = string_list(body, name) if policies else duration(body, name)
    return fields


def describe(role: CertRoleInfo) -> dict[str, Any]:
    """A role as OpenBao's ``certs/:name`` read shows it (a rule never set is null there)."""
    return {
        "allowed_common_names": _shown(role.allowed_common_names),
        "allowed_dns_sans": _shown(role.allowed_dns_sans),
        "allowed_email_sans": _shown(role.allowed_email_sans),
        "allowed_metadata_extensions": None,
        "allowed_names": None,
        "allowed_organizational_units": _shown(role.allowed_organizational_units),
        "allowed_uri_sans": _shown(role.allowed_uri_sans),
        "certificate": role.certificate,
        "display_name": role.display_name,
        "ocsp_ca_certificates": "",
        "ocsp_enabled": False,
        "ocsp_fail_open": False,
        "ocsp_query_all_servers": False,
        "ocsp_servers_override": None,
        "required_extensions": None,
        "token_bound_cidrs": [],
        "token_explicit_max_ttl": 0,
        "token_max_ttl": role.token_max_ttl,
        "token_no_default_policy": False,
        "token_num_uses": 0,
        "token_period": 0,
        "token_policies": list(role.token_policies),
        "token_strictly_bind_ip": False,
        "token_ttl": role.token_ttl,
        "token_type": "default",
    }


def _shown(rule: tuple[str, ...]) -> list[str] | None:
    return list(rule) or None
