"""Vault's cert ``login``: a login by the TLS client certificate of the connection, and by
nothing else (never a header or a body: a proxy's word for a certificate is not taken). The
optional body names the role (``{"name": ...}``); without one, every role is tried, by name.
``_cert_match`` decides which role the certificate logs in to, checking the certificate's
signature against the role's certificate at every login. Refusals are Vault's 400 with its
words; a login's token is an orphan labelled ``cert-<role>`` with the role's scopes and
lifetimes, and its audit record names the role and the certificate's SHA-256 fingerprint
(the certificate is public; nothing of its key is ever seen).
"""

from __future__ import annotations

import asyncio
import datetime

from cryptography import x509

from sealflow.service.keystore import CertRoleInfo, RoleNotFound

from .._logging import AccessRecord
from .._state import Services
from ..http import PeerCert
from . import _cert_match, _login, _wire
from ._cert import PREFIX
from ._wire import Body

_LOGIN_ROUTE = PREFIX + "login"


async def login(
    svc: Services, cert: PeerCert | None, body: Body, log: AccessRecord
) -> tuple[int, bytes]:
    """A login: the token, in Vault's ``auth`` envelope; refusals recorded as failed logins."""
    _login.check_trail(svc)
    who: dict[str, object] = {"auth_method": "cert"}
    if cert is not None:
        who["cert_fingerprint"] = cert.fingerprint
    try:
        if cert is None:
            raise _cert_match.Refused(_cert_match.NO_CERT)
        roles = await asyncio.to_thread(_roles, svc, _wire.as_str(body, "name").strip())
        role = _cert_match.match(cert, roles, datetime.datetime.now(datetime.UTC))
    except _cert_match.Refused as exc:
        _login.refused(svc, log, _LOGIN_ROUTE, who)
        raise _wire.user_error(str(exc)) from None
    assert cert is not None  # refused above otherwise
    grant = _login.Grant(
        role.token_policies, f"cert-{role.name}", role.token_ttl, role.token_max_ttl
    )
    who["role"] = role.name
    token, client_token = await _login.issue(svc, log, _LOGIN_ROUTE, grant, who)
    return 200, _login.auth_envelope(token, client_token, _metadata(role, cert))


def _metadata(role: CertRoleInfo, cert: PeerCert) -> dict[str, str]:
    """OpenBao's metadata of a cert login: the role, and the certificate's public names."""
    leaf = x509.load_der_x509_certificate(cert.der)
    return {
        "authority_key_id": _key_id(leaf, x509.AuthorityKeyIdentifier),
        "cert_name": role.name,
        "common_name": cert.common_name or "",
        "serial_number": str(int(cert.serial, 16)),
        "subject_key_id": _key_id(leaf, x509.SubjectKeyIdentifier),
    }


def _key_id(
    leaf: x509.Certificate,
    kind: type[x509.AuthorityKeyIdentifier] | type[x509.SubjectKeyIdentifier],
) -> str:
    """The key identifier as OpenBao shows it, hex bytes joined by colons ("" if none)."""
    try:
        value = leaf.extensions.get_extension_for_class(kind).value
    except x509.ExtensionNotFound:
        return ""
    ident = value.key_identifier if isinstance(value, x509.AuthorityKeyIdentifier) else value.digest
    return ":".join(f"{b:02x}" for b in ident or b"")


def _roles(svc: Services, name: str) -> list[CertRoleInfo]:
    """The role named, or every role; a name that is no role trusts nothing."""
    if not name:
        return svc.store.list_cert_roles()
    try:
        return [svc.store.get_cert_role(name)]
    except RoleNotFound:
        return []
