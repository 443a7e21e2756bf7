"""Transit's BYOK import, written once for every store (``Writes`` inherits this): the RSA-4096
wrapping key, made once per keystore and held wrapped under the master key; keys and versions
made of imported material, which is wrapped at once like any version's and kept nowhere else.

Every import is told to ``on_change`` (the audit trail) by key and version, never material.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from sealflow.engine import Algorithm

from . import _byok
from ._base import KeyInfo, valid_key_name
from ._key_types import KeyType, check_material, fresh_material
from ._key_types import of as key_type_of
from ._public_keys import EXISTING, held
from ._rows import MAX_VERSION, limits_row, policy_row
from ._store_access import StoreAccess
from ._tables import Tables
from .errors import SOFT_DELETED, InvalidRequest, KeySoftDeleted, KeyStoreCorrupt


def rotatable(info: KeyInfo) -> None:
    """InvalidRequest, in Transit's words, for an imported key that does not allow rotation."""
    if info.imported and not info.allow_rotation:
        raise InvalidRequest(f"imported key {info.name} does not allow rotation within Vault")


class Imports(StoreAccess):
    _tables: Tables
    _wrapping: rsa.RSAPrivateKey | None = None

    def wrapping_key(self) -> rsa.RSAPrivateKey:
        """The keystore's import wrapping key, made on first use: one per keystore, whichever
        process asks first (insert if absent, then read back)."""
        key = self._wrapping
        if key is None:
            # No lock: threads racing here each make one, and agree on the one stored first,
            # as replicas do.
            key = self._wrapping = self._load_wrapping_key()
        return key

    def wrapping_public_pem(self) -> str:
        public = self.wrapping_key().public_key()
        return public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ).decode()

    def _load_wrapping_key(self) -> rsa.RSAPrivateKey:
        with self._connection() as db:
            der = self._tables.wrapping_key(db)
        if der is None:
            # Made outside the transaction (a second or so): a replica that stored one first
            # wins, and this one is dropped.
            fresh = rsa.generate_private_key(65537, _byok.WRAPPING_KEY_BITS)
            encoded = fresh.private_bytes(
                serialization.Encoding.DER,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
            with self._transaction(changes=False) as db:
                der = self._tables.wrapping_key(db, encoded)
        key = None if der is None else serialization.load_der_private_key(der, None)
        if not isinstance(key, rsa.RSAPrivateKey):
            raise KeyStoreCorrupt("the import wrapping key is missing or not an RSA key")
        return key

    def unwrap_import(self, ciphertext: str, hash_function: str = "SHA256") -> bytes:
        """The key material of an import ``ciphertext`` (base64); InvalidRequest in Transit's
        words for anything wrong with it."""
        _byok.hash_function(hash_function)  # named first, as Transit checks it first
        return _byok.unwrap(self.wrapping_key(), _byok.decode(ciphertext), hash_function)

    def import_key(
        self,
        name: str,
        algorithm: Algorithm | KeyType,
        material: bytes,
        *,
        exportable: bool = False,
        allow_rotation: bool = False,
        auto_rotate_period: float | None = None,
        allow_plaintext_backup: bool = False,
    ) -> KeyInfo:
        """A new key whose version 1 is ``material``, marked imported, in one transaction
        (``import_versions`` of one version)."""
        return self.import_versions(
            name,
            algorithm,
            [material],
            exportable=exportable,
            allow_rotation=allow_rotation,
            auto_rotate_period=auto_rotate_period,
            allow_plaintext_backup=allow_plaintext_backup,
        )

    def import_versions(
        self,
        name: str,
        algorithm: Algorithm | KeyType,
        versions: Sequence[bytes | None],
        *,
        min_decryption_version: int = 1,
        min_encryption_version: int = 0,
        deletion_allowed: bool = False,
        exportable: bool = False,
        allow_rotation: bool = False,
        auto_rotate_period: float | None = None,
        allow_plaintext_backup: bool = False,
    ) -> KeyInfo:
        """A new imported key whose versions 1, 2, ... are ``versions``, with its minimum
        versions and deletion flag, in one transaction: the whole key or nothing. None is a
        retired placeholder (fresh random material, never usable: it must lie below
        ``min_decryption_version``), so that a key moved from another engine keeps its
        version numbers.

        InvalidRequest (Transit's words) if the name is taken, by an imported key or not, a
        material's length is not the algorithm's, ``auto_rotate_period`` is set without
        ``allow_rotation``, or the minimum versions or placeholders do not fit."""
        if not valid_key_name(name):
            raise InvalidRequest(f"invalid key name {name!r}")
        _placeholders(versions, min_decryption_version)
        kind = algorithm if isinstance(algorithm, KeyType) else key_type_of(algorithm)
        for material in versions:
            if material is not None:
                _length(kind, material)
        # A placeholder is fresh material of the type (made before the transaction).
        made = [fresh_material(kind) if m is None else m for m in versions]
        if auto_rotate_period and not allow_rotation:
            raise InvalidRequest("allow_rotation must be set to true if auto-rotation is enabled")
        least = min_decryption_version
        row = (name, kind.column, int(exportable), least, time.time(), 1, int(allow_rotation))
        with self._transaction() as db:
            if held(self._tables, db, name) or not self._tables.insert_key(db, row):
                raise InvalidRequest(EXISTING)
            for version, material in enumerate(made, start=1):
                self._tables.add_version(db, name, version, kind, exportable, material)
            info = self._tables.locked_key(db, name)
            if min_encryption_version or deletion_allowed or allow_plaintext_backup:
                policy = policy_row(
                    info,
                    least,
                    min_encryption_version,
                    deletion_allowed,
                    plaintext_backup=allow_plaintext_backup or None,
                )
                self._tables.write_policy(db, policy)
            if auto_rotate_period:
                self._tables.write_limits(db, limits_row(info, None, auto_rotate_period))
            info = self._tables.locked_key(db, name)
        self._changed("key_import", key=name, version=info.latest)
        return info

    def import_version(self, name: str, material: bytes) -> KeyInfo:
        """Version latest+1 of an imported key, of ``material``, in one transaction.
        KeyNotFound; InvalidRequest for a key not imported or material of the wrong length."""
        with self._transaction() as db:
            info = self._tables.locked_key(db, name)
            if info.soft_deleted:
                raise KeySoftDeleted(SOFT_DELETED)
            if not info.imported:
                raise InvalidRequest(
                    "the import_version endpoint can only be used with an imported key"
                )
            _length(info.key_type, material)
            if info.latest >= MAX_VERSION:
                raise InvalidRequest(f"key {name!r} has no version left")
            version = info.latest + 1
            self._tables.add_version(
                db, name, version, info.key_type, info.created_exportable, material
            )
            info = self._tables.locked_key(db, name)
        self._changed("key_import_version", key=name, version=version)
        return info


def _placeholders(versions: Sequence[bytes | None], least: int) -> None:
    """InvalidRequest unless there is a version, ``least`` is one of them, and every
    placeholder lies below it."""
    if not 1 <= len(versions) <= MAX_VERSION:
        raise InvalidRequest(f"an import holds 1 to {MAX_VERSION} versions, not {len(versions)}")
    if isinstance(least, bool) or not isinstance(least, int) or not 1 <= least <= len(versions):
        raise InvalidRequest(
            f"min_decryption_version must be between 1 and {len(versions)}, not {least!r}"
        )
    if any(material is None for material in versions[least - 1 :]):
        raise InvalidRequest("a placeholder version must be below min_decryption_version")


def _length(kind: KeyType, material: bytes) -> None:
    if kind.key_size and len(material) != kind.key_size:
        name = kind.aead.value if kind.aead is not None else kind.name
        raise InvalidRequest(
            f"error importing key: invalid key size {len(material)} bytes for key type {name}"
        )
    check_material(kind, material)
