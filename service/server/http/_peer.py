"""The TLS client certificate of a connection, read once when the connection is made.

With ``--tls-client-ca`` the server asks every TLS client for a certificate during the
handshake, and OpenSSL verifies one that is sent against the client CAs of that moment (``_tls``):
a certificate they did not issue fails the handshake, so a connection that has a ``PeerCert`` at
all holds a verified one. The protocol reads it in ``connection_made`` (``identity``) and hands
it to every ``Head`` of the connection (``Head.peer_cert``); nothing reads the certificate per
request.

This is what a login by certificate (Vault's cert method, ``POST /v1/auth/cert/login``) matches
on: the subject and its common name and organizational units, the SANs by kind, the issuer, the
serial, the SHA-256 fingerprint, and ``authority()``: the fingerprint of the CA of the bundle
that signed it.
"""

from __future__ import annotations

import datetime
import hashlib
import ssl
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import NameOID


@dataclass(frozen=True, slots=True)
class PeerCert:
    """A verified client certificate (its leaf), the fields a login matches on."""

    der: bytes  # the certificate as sent (DER)
    fingerprint: str  # SHA-256 of ``der``, lowercase hex
    subject: str  # RFC 4514, e.g. "CN=orders-app,OU=payments,O=acme"
    common_name: str | None  # the subject's first CN
    organizational_units: tuple[str, ...]  # the subject's OUs
    issuer: str  # the issuer's name, RFC 4514
    serial: str  # lowercase hex
    not_after: datetime.datetime  # UTC
    dns_sans: tuple[str, ...] = ()
    email_sans: tuple[str, ...] = ()
    uri_sans: tuple[str, ...] = ()
    ip_sans: tuple[str, ...] = ()
    # The context whose client CAs verified it (the one current at the handshake: a reload
    # later does not change which CAs verified this connection).
    context: ssl.SSLContext | None = field(default=None, repr=False, compare=False)

    def authority(self) -> str | None:
        """The SHA-256 fingerprint (lowercase hex) of the CA in the client CA bundle that
        signed this certificate, or None when none did directly (the client sent the chain
        through an intermediate CA: Python 3.11's ``ssl`` does not give the verified chain)."""
        if self.context is None:
            return None
        leaf = x509.load_der_x509_certificate(self.der)
        for der in self.context.get_ca_certs(binary_form=True):
            assert isinstance(der, bytes)  # binary_form: DER
            ca = x509.load_der_x509_certificate(der)
            if ca.subject != leaf.issuer:
                continue
            try:
                leaf.verify_directly_issued_by(ca)
            except (ValueError, TypeError, InvalidSignature):
                continue
            return hashlib.sha256(der).hexdigest()
        return None


def identity(ssl_object: ssl.SSLObject | None) -> PeerCert | None:
    """The verified client certificate of a TLS connection whose handshake is done, if the
    client sent one (None without TLS, or without a certificate)."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    cert = x509.load_der_x509_certificate(der)
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        sans = x509.SubjectAlternativeName([])
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    units = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    return PeerCert(
        der=der,
        fingerprint=hashlib.sha256(der).hexdigest(),
        subject=cert.subject.rfc4514_string(),
        common_name=str(names[0].value) if names else None,
        organizational_units=tuple(str(unit.value) for unit in units),
        issuer=cert.issuer.rfc4514_string(),
        serial=format(cert.serial_number, "x"),
        not_after=cert.not_valid_after_utc,
        dns_sans=tuple(sans.get_values_for_type(x509.DNSName)),
        email_sans=tuple(sans.get_values_for_type(x509.RFC822Name)),
        uri_sans=tuple(sans.get_values_for_type(x509.UniformResourceIdentifier)),
        ip_sans=tuple(str(ip) for ip in sans.get_values_for_type(x509.IPAddress)),
        context=ssl_object.context,
    )
