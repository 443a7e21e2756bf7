"""Test CAs and certificates (``cryptography``), written as PEM files into a test's directory."""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Issued", "NameOID", "ca", "client_cert", "issue", "server_cert"]


@dataclass
class Issued:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    cert_path: Path
    key_path: Path

    @property
    def serial(self) -> str:
        return format(self.cert.serial_number, "x")

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(self.cert.public_bytes(serialization.Encoding.DER)).hexdigest()


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _write(
    directory: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> Issued:
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return Issued(cert, key, cert_path, key_path)


def ca(directory: Path, name: str) -> Issued:
    """A self-signed CA; its certificate file is a client CA bundle of one."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now() - datetime.timedelta(minutes=5))
        .not_valid_after(_now() + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _write(directory, name, cert, key)


def issue(
    authority: Issued,
    directory: Path,
    stem: str,
    subject: list[tuple[x509.ObjectIdentifier, str]],
    *,
    server: bool = False,
    dns: tuple[str, ...] = (),
    uris: tuple[str, ...] = (),
    emails: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
) -> Issued:
    """A leaf certificate ``authority`` signs: a server's (``server``) or a client's."""
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns]
    sans += [x509.UniformResourceIdentifier(uri) for uri in uris]
    sans += [x509.RFC822Name(email) for email in emails]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(oid, value) for oid, value in subject]))
        .issuer_name(authority.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now() - datetime.timedelta(minutes=5))
        .not_valid_after(_now() + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(authority.key.public_key()),
            critical=False,
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(authority.key, hashes.SHA256())
    return _write(directory, stem, cert, key)


def server_cert(authority: Issued, directory: Path, stem: str) -> Issued:
    """A server certificate for localhost and 127.0.0.1."""
    return issue(
        authority,
        directory,
        stem,
        [(NameOID.COMMON_NAME, "localhost")],
        server=True,
        dns=("localhost",),
        ips=("127.0.0.1",),
    )


def client_cert(authority: Issued, directory: Path, stem: str) -> Issued:
    return issue(
        authority,
        directory,
        stem,
        [(NameOID.COMMON_NAME, stem), (NameOID.ORGANIZATIONAL_UNIT_NAME, "tests")],
        dns=(f"{stem}.internal",),
        uris=(f"spiffe://sealflow.test/{stem}",),
    )
