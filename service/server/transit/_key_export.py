"""Transit's ``export/public-key|signing-key/:name[/:version]`` for the asymmetric key types
(OpenBao's path_export.go): each version's key in OpenBao's formats, chosen by ``format``.

The default format is OpenBao's: PEM for ECDSA and RSA (SEC 1 ``EC PRIVATE KEY`` and PKCS#1
``RSA PRIVATE KEY`` for a signing key, SubjectPublicKeyInfo ``PUBLIC KEY`` for a public one),
base64 of the raw key for ed25519 (a signing key as Go holds it: the 32-byte seed and the
32-byte public key). ``der`` is base64 of PKCS#8 or SubjectPublicKeyInfo, ``pem`` their PEM.
OpenBao trims the final newline of every PEM but an RSA key's; so does this.

The rules are the export route's: a signing key only from an exportable key, no version below
``min_decryption_version``; a public key from any signing key (scopes: docs/TRANSIT.md).
"""

from __future__ import annotations

import base64

from cryptography.hazmat.primitives import serialization as s
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from sealflow.service.keystore import SOFT_DELETED, KeyInfo, KeyNotFound, KeyStore

from . import _keys, _public, _wire

TYPES = ("public-key", "signing-key")
FORMATS = ("", "raw", "der", "pem")
_PEM, _DER = s.Encoding.PEM, s.Encoding.DER
_SPKI = s.PublicFormat.SubjectPublicKeyInfo
_PKCS8 = s.PrivateFormat.PKCS8
_NONE = s.NoEncryption()


def export(store: KeyStore, kind: str, name: str, version: str | None, form: str) -> bytes:
    """The answer of ``export/<kind>/:name[/:version]`` (``kind`` one of ``TYPES``, or
    ``encryption-key`` of an RSA key: its private key, as OpenBao exports it)."""
    if form not in FORMATS:
        raise _wire.user_error(f"invalid format: {form}")
    try:
        key = store.get_key(name)
    except KeyNotFound:
        _public.refuse(store, name, "export")
        raise _wire.not_found() from None
    private = kind != "public-key"
    if private and not key.exportable:
        raise _wire.user_error("private key material is not exportable")
    if key.soft_deleted:
        raise _internal(SOFT_DELETED)
    type_name = key.key_type.name
    if kind == "signing-key" and not key.key_type.signs:
        raise _wire.user_error("signing not supported for the key")
    if version is None:
        numbers = [v.version for v in key.versions if v.version >= key.min_decryption_version]
    else:
        number = key.latest if version == "latest" else _keys.parse_version(version.lstrip("v"))
        if number < key.min_decryption_version:
            raise _wire.user_error("version for export is below minimum decryption version")
        if number not in {v.version for v in key.versions}:
            raise _wire.user_error("version does not exist or cannot be found")
        numbers = [number]
    as_kind = "signing-key" if private else kind  # an RSA key's encryption key is the same
    keys = {str(n): encoded(type_name, as_kind, _material(store, key, n), form) for n in numbers}
    return _wire.envelope({"keys": keys, "name": name, "type": type_name})


def encoded(type_name: str, kind: str, material: bytes, form: str) -> str:
    """One version's key as OpenBao writes it; a 500 in its words for a format the type has
    not, or a type with no such key."""
    if type_name == "ed25519":
        private = ed25519.Ed25519PrivateKey.from_private_bytes(material)
        public = private.public_key()
        if form in ("", "raw"):
            raw = public.public_bytes_raw()
            return _b64(private.private_bytes_raw() + raw if kind == "signing-key" else raw)
        if kind == "signing-key":
            return _private(private, form, _PKCS8)
        return _public_key(public, form, trim=True)
    if not type_name.startswith(("ecdsa-", "rsa-")):
        raise _internal(f"unknown key type {type_name} for export type {kind}")
    key = s.load_der_private_key(material, None)
    assert isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey)
    is_rsa = isinstance(key, rsa.RSAPrivateKey)
    if form == "raw":
        which = "rsa" if is_rsa else "ec"
        raise _internal(
            f"unknown key format for {which} key; supported values are ``, `der`, or `pem`"
        )
    if kind == "public-key":
        return _public_key(key.public_key(), form, trim=not is_rsa)
    return _private(key, form, s.PrivateFormat.TraditionalOpenSSL, trim=not is_rsa)


def _private(
    key: ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey,
    form: str,
    default: s.PrivateFormat,
    trim: bool = True,
) -> str:
    if form == "der":
        return _b64(key.private_bytes(_DER, _PKCS8, _NONE))
    pem = key.private_bytes(_PEM, _PKCS8 if form == "pem" else default, _NONE).decode()
    return pem.strip() if trim else pem


def _public_key(
    key: ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey | rsa.RSAPublicKey,
    form: str,
    trim: bool,
) -> str:
    if form == "der":
        return _b64(key.public_bytes(_DER, _SPKI))
    pem = key.public_bytes(_PEM, _SPKI).decode()
    return pem.strip() if trim else pem


def _material(store: KeyStore, key: KeyInfo, version: int) -> bytes:
    try:
        return store.material(key.slot(version))
    except KeyNotFound:
        raise _wire.user_error("version does not exist or cannot be found") from None


def _internal(message: str) -> Exception:
    return _wire.user_error(_wire.framework_error(message), 500)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
