"""Certificate roles of the cert auth method, written once for every store (``Writes``
inherits this). A role names the certificate that must have signed a client certificate (a
CA, or the leaf itself), the rules the client certificate must match, and the scopes and
token lifetimes a login with it yields. Matching a certificate is the server's
(``transit._cert_match``): the store keeps and checks the rows.

Every change is told to ``on_change`` (the audit trail) by role name.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from ._approle import ROLE_NAME
from ._base import valid_scope
from ._cert_api import CertRoleInfo
from ._cert_rows import RULES, CertTables, cert_role_info
from ._store_access import StoreAccess
from .errors import InvalidRequest, RoleNotFound

# What a role has until told otherwise (Vault's defaults; display_name: the role's name).
_DEFAULTS: dict[str, Any] = {
    "certificate": "",
    **dict.fromkeys(RULES, ()),
    "token_policies": (),
    "token_ttl": 0,
    "token_max_ttl": 0,
    "display_name": "",
}
CERT_FIELDS = frozenset(_DEFAULTS)


class CertRoles(StoreAccess):
    _cert: CertTables

    def write_cert_role(self, name: str, fields: Mapping[str, Any]) -> CertRoleInfo:
        """Create the role, or change the fields given of an existing one (Vault's update).
        Names are lowercase, as Vault keeps them."""
        name = name.lower()
        if not ROLE_NAME.fullmatch(name):
            raise InvalidRequest(f"invalid role name {name!r}")
        unknown = set(fields) - CERT_FIELDS
        if unknown:
            raise InvalidRequest(f"unknown role fields {sorted(unknown)}")
        tables = self._cert
        with self._transaction() as db:
            old = tables.role_row(db, name)
            current = _DEFAULTS if old is None else _as_fields(cert_role_info(old))
            row = _row(name, {**current, **fields}, time.time() if old is None else old[11])
            tables.write(db, row)
        self._changed("cert_role_create" if old is None else "cert_role_update", role=name)
        return cert_role_info(row)

    def get_cert_role(self, name: str) -> CertRoleInfo:
        with self._connection() as db:
            row = self._cert.role_row(db, name.lower())
        if row is None:
            raise RoleNotFound(f'role "{name}" does not exist')
        return cert_role_info(row)

    def list_cert_roles(self) -> list[CertRoleInfo]:
        with self._connection() as db:
            return self._cert.all_roles(db)

    def delete_cert_role(self, name: str) -> bool:
        name = name.lower()
        with self._transaction() as db:
            if db.execute(self._cert.role, (name,)).fetchone() is None:
                return False
            db.execute(self._cert.delete, (name,))
        self._changed("cert_role_delete", role=name)
        return True

    def cert_role_rows(self) -> list[tuple[Any, ...]]:
        with self._connection() as db:
            return [tuple(r) for r in db.execute(self._cert.roles).fetchall()]


def _as_fields(role: CertRoleInfo) -> dict[str, Any]:
    return {field: getattr(role, field) for field in CERT_FIELDS}


def _row(name: str, f: Mapping[str, Any], created: float) -> tuple[Any, ...]:
    pem = f["certificate"]
    if not isinstance(pem, str) or not pem.strip():
        raise InvalidRequest("missing certificate")
    _check_certificate(pem)
    policies = tuple(f["token_policies"])
    if not policies or not all(map(valid_scope, policies)):
        raise InvalidRequest(f"token_policies must be one or more sealflow scopes, not {policies}")
    for field in RULES:
        if not all(isinstance(glob, str) and glob for glob in f[field]):
            raise InvalidRequest(f"{field} must be a list of non-empty strings")
    for field in ("token_ttl", "token_max_ttl"):
        if isinstance(f[field], bool) or not isinstance(f[field], int) or f[field] < 0:
            raise InvalidRequest(f"{field} must be a whole number, 0 or more")
    if f["token_max_ttl"] and f["token_ttl"] > f["token_max_ttl"]:
        raise InvalidRequest("ttl should be shorter than max_ttl")  # Vault's words
    display = f["display_name"] or name
    if not isinstance(display, str) or not display.isprintable():
        raise InvalidRequest("display_name must be printable text")
    return (
        name,
        pem.strip() + "\n",
        *(json.dumps(list(f[field])) for field in RULES),
        " ".join(policies),
        f["token_ttl"],
        f["token_max_ttl"],
        display,
        created,
    )


def _check_certificate(pem: str) -> None:
    """Vault's checks: PEM certificates, and a leaf (not a CA) trusted as itself must be meant
    for TLS client authentication if it says what it is meant for."""
    try:
        parsed = x509.load_pem_x509_certificates(pem.encode())
    except ValueError:
        raise InvalidRequest("failed to parse certificate") from None
    first = parsed[0]
    try:
        is_ca = first.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    if is_ca:
        return
    try:
        usages = first.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return
    if not {ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE} & set(
        usages
    ):
        raise InvalidRequest(
            "nonCA certificates should have TLS client authentication set as an extended key usage"
        )
