"""Which certificate role a client certificate logs in to, as Vault's cert method decides it:
a pure function of the connection's certificate (``PeerCert``), the roles and the clock.

A role trusts the client certificate if one of the certificates of its ``certificate`` PEM is
that very certificate (a leaf trusted as itself), or is a CA that signed it directly and is
valid now. This is checked again at every login, whatever the handshake verified: the
handshake checked the client CA bundle (``--tls-client-ca``) of its moment, which is not the
role's CA, and a TLS 1.2 session resumed after a reload was never checked against the current
bundle at all (``http._peer``). A chain through an intermediate CA is not matched: Python's
``ssl`` gives the leaf alone (docs/TRANSIT.md, Cert).

Rules are Vault's: each ``allowed_*`` list that is not empty must have a glob (``*`` matches
anything, dots included, as Vault's go-glob) matching the common name, one DNS, email or URI
SAN, or one organizational unit.
"""

from __future__ import annotations

import datetime
import functools
import hmac
import re
from collections.abc import Iterable, Sequence

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.serialization import Encoding

from sealflow.service.keystore import CertRoleInfo

from ..http import PeerCert

NO_CERT = "no client certificate found"
UNTRUSTED = "invalid certificate or no client certificate supplied"
NO_MATCH = "no chain matching all constraints could be found for this login certificate"


class Refused(Exception):
    """A login refused, with Vault's message."""


def match(cert: PeerCert, roles: Iterable[CertRoleInfo], now: datetime.datetime) -> CertRoleInfo:
    """The first role (by name) that trusts ``cert`` and whose rules it matches; Refused with
    Vault's message otherwise."""
    leaf = x509.load_der_x509_certificate(cert.der)
    if not leaf.not_valid_before_utc <= now <= leaf.not_valid_after_utc:
        raise Refused(UNTRUSTED)
    trusted = False
    for role in sorted(roles, key=lambda r: r.name):
        if not _signed(role.certificate, leaf, cert.der, now):
            continue
        trusted = True
        if _rules_match(role, cert):
            return role
    raise Refused(NO_MATCH if trusted else UNTRUSTED)


def _signed(pem: str, leaf: x509.Certificate, der: bytes, now: datetime.datetime) -> bool:
    for trusted in _parse(pem):
        if hmac.compare_digest(trusted.der, der):
            return True
        ca = trusted.cert
        if not trusted.is_ca or ca.subject != leaf.issuer:
            continue
        if not ca.not_valid_before_utc <= now <= ca.not_valid_after_utc:
            continue
        try:
            leaf.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return True
    return False


class _Trusted:
    __slots__ = ("cert", "der", "is_ca")

    def __init__(self, cert: x509.Certificate) -> None:
        self.cert = cert
        self.der = cert.public_bytes(Encoding.DER)
        try:
            self.is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            self.is_ca = False


@functools.lru_cache(maxsize=256)
def _parse(pem: str) -> tuple[_Trusted, ...]:
    """A role's certificates, parsed once per PEM text (a role's text changes with the role)."""
    return tuple(_Trusted(c) for c in x509.load_pem_x509_certificates(pem.encode()))


def _rules_match(role: CertRoleInfo, cert: PeerCert) -> bool:
    return (
        _any(role.allowed_common_names, () if cert.common_name is None else (cert.common_name,))
        and _any(role.allowed_dns_sans, cert.dns_sans)
        and _any(role.allowed_email_sans, cert.email_sans)
        and _any(role.allowed_uri_sans, cert.uri_sans)
        and _any(role.allowed_organizational_units, cert.organizational_units)
    )


def _any(globs: Sequence[str], values: Sequence[str]) -> bool:
    if not globs:
        return True
    return any(_glob(g).fullmatch(v) for g in globs for v in values)


@functools.lru_cache(maxsize=1024)
def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(map(re.escape, pattern.split("*"))), re.DOTALL)
