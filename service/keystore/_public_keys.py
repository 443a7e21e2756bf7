"""Public-key-only keys: an RSA public key imported as Transit's ``keys/:name/import`` takes it
(``type`` rsa-2048/3072/4096 and ``public_key``), held only as a ``byok-export`` destination
(another Transit engine's wrapping key). Written once for every store (``Writes`` inherits it).

Each one is a row of the store's meta table under ``public-key/<name>`` (no schema change, so
no migration): its value is the row's MAC (``PUBLIC_KEY_ROW``: name, type, PEM, creation time,
deletion_allowed) followed by those values as JSON. A public key needs no secrecy, only
integrity: a key swapped in without the master key would have sealflow wrap exported material
for someone else, so a row that fails its MAC is refused, never used. Key names are one space
with the keystore's keys: each kind's creation checks the other in its transaction, and the
two are serialised (PostgreSQL: both count a change). These rows
are read from the database on each use (not hot: a byok-export, a read, a listing).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from . import _byok
from ._base import valid_key_name
from ._dialect import Connection
from ._integrity import PUBLIC_KEY_ROW, refuse
from ._store_access import StoreAccess
from ._tables import Tables
from .errors import DeletionNotAllowed, InvalidRequest, KeyNotFound, KeyStoreCorrupt

PREFIX = "public-key/"
# Transit's RSA types, by their modulus in bytes (keysutil's sizes).
RSA_TYPES = {"rsa-2048": 256, "rsa-3072": 384, "rsa-4096": 512}
EXISTING = (
    "the import path cannot be used with an existing key; use import-version to rotate an"
    " existing imported key"
)


@dataclass(frozen=True, slots=True)
class PublicKeyInfo:
    name: str
    type: str
    public_key: str  # PEM, SubjectPublicKeyInfo, as Transit shows it
    created_at: float
    deletion_allowed: bool

    def rsa(self) -> rsa.RSAPublicKey:
        key = serialization.load_pem_public_key(self.public_key.encode())
        if not isinstance(key, rsa.RSAPublicKey):  # checked on import, and MAC'd since
            raise KeyStoreCorrupt(f"public key {self.name!r} is not an RSA key")
        return key

    def wrap(self, material: bytes, hash_name: str = "SHA256") -> str:
        """``material`` wrapped for this key's holder in Transit's import format (``_byok``);
        InvalidRequest for an unknown hash."""
        return _byok.wrap(self.rsa(), material, hash_name)


def parse(kind: str, pem: str) -> str:
    """The PEM of an RSA public key of ``kind``, re-encoded; InvalidRequest in Transit's words
    (keysutil's ``ImportPublicOrPrivate``) otherwise."""
    size = RSA_TYPES.get(kind)
    if size is None:
        raise InvalidRequest("provided type does not support public_key import")
    if "-----BEGIN" not in pem:
        raise InvalidRequest("error importing key: error parsing public key: not in PEM format")
    try:
        key = serialization.load_pem_public_key(pem.encode())
    except (ValueError, TypeError):
        raise InvalidRequest(
            "error importing key: error parsing public key: not a PKIX public key"
        ) from None
    if not isinstance(key, rsa.RSAPublicKey):
        raise InvalidRequest(
            f"error importing key: invalid key type: expected {kind}, got {type(key).__name__}"
        )
    if key.key_size // 8 != size:
        raise InvalidRequest(
            f"error importing key: invalid key size: expected {size} bytes,"
            f" got {key.key_size // 8} bytes"
        )
    encoded = key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return encoded.decode()


def held(tables: Tables, db: Connection, name: str) -> bool:
    """Whether a public-key-only key holds ``name`` (checked by the keystore's key writes)."""
    return db.execute(tables.sql.meta_value, (PREFIX + name,)).fetchone() is not None


class PublicKeys(StoreAccess):
    _tables: Tables

    def import_public_key(self, name: str, kind: str, pem: str) -> PublicKeyInfo:
        """A new public-key-only key; InvalidRequest (Transit's words) for a bad PEM, a type
        or size that does not match, or a name taken by any key."""
        if not valid_key_name(name):
            raise InvalidRequest(f"invalid key name {name!r}")
        info = PublicKeyInfo(name, kind, parse(kind, pem), time.time(), False)
        # A counted change, as a key's creation is: on PostgreSQL both take the changes row's
        # lock, so of a key and a public key made under one name at once, one sees the other.
        with self._transaction() as db:
            taken = db.execute(self._tables.sql.key_row, (name,)).fetchone() is not None
            inserted = not taken and self._public_write(db, info, new=True)
            if not inserted:
                raise InvalidRequest(EXISTING)
        self._changed("key_import", key=name, version=1)
        return info

    def public_key(self, name: str) -> PublicKeyInfo | None:
        """The public-key-only key of this name, or None; KeyStoreCorrupt if its row fails."""
        with self._connection() as db:
            return self._public_read(db, name)

    def public_keys(self) -> list[PublicKeyInfo]:
        """Every public-key-only key whose row passes its check (one that fails is logged)."""
        with self._connection() as db:
            rows = db.execute(self._tables.sql.meta_like, (PREFIX + "%",)).fetchall()
        found = []
        for key, value in rows:
            info = self._public_checked(str(key)[len(PREFIX) :], bytes(value))
            if info is not None:
                found.append(info)
        return found

    def public_key_rows(self) -> list[tuple[object, ...]]:
        """Every public-key-only key's meta row as stored, checked or not (``_migrate``)."""
        with self._connection() as db:
            rows = db.execute(self._tables.sql.meta_like, (PREFIX + "%",)).fetchall()
        return [(str(key), bytes(value)) for key, value in rows]

    def configure_public_key(self, name: str, deletion_allowed: bool) -> PublicKeyInfo:
        with self._transaction(changes=False) as db:
            info = self._public_locked(db, name)
            info = PublicKeyInfo(
                name, info.type, info.public_key, info.created_at, deletion_allowed
            )
            self._public_write(db, info, new=False)
        self._changed("key_config", key=name)
        return info

    def delete_public_key(self, name: str) -> None:
        """KeyNotFound; DeletionNotAllowed unless ``deletion_allowed`` was set."""
        with self._transaction(changes=False) as db:
            if not self._public_locked(db, name).deletion_allowed:
                raise DeletionNotAllowed(f"deletion is not allowed for key {name!r}")
            db.execute(self._tables.sql.delete_meta, (PREFIX + name,))
        self._changed("key_delete", key=name, version=1)

    def _public_locked(self, db: Connection, name: str) -> PublicKeyInfo:
        info = self._public_read(db, name)
        if info is None:
            raise KeyNotFound(f"key {name!r} not found")
        return info

    def _public_read(self, db: Connection, name: str) -> PublicKeyInfo | None:
        row = db.execute(self._tables.sql.meta_value, (PREFIX + name,)).fetchone()
        if row is None:
            return None
        info = self._public_checked(name, bytes(row[0]))
        if info is None:
            raise KeyStoreCorrupt(f"public key {name!r} fails its integrity check")
        return info

    def _public_checked(self, name: str, value: bytes) -> PublicKeyInfo | None:
        # The MAC, with its KEK generation in front once the KEK was rotated (``_generations``).
        size = self._tables.integrity.mac_length(value)
        mac, payload = value[:size], value[size:]
        try:
            fields = json.loads(payload)
            row = (name, *(fields[column] for column in PUBLIC_KEY_ROW.columns[1:]))
        except (ValueError, KeyError, TypeError):
            row = ()
        if not row or not self._tables.integrity.verify(PUBLIC_KEY_ROW, row, mac):
            refuse(self._tables.where, f"public key {name!r}")
            return None
        return PublicKeyInfo(
            name,
            fields["type"],
            fields["public_key"],
            fields["created_at"],
            bool(fields["deletion_allowed"]),
        )

    def _public_write(self, db: Connection, info: PublicKeyInfo, *, new: bool) -> bool:
        row = (info.name, info.type, info.public_key, info.created_at, int(info.deletion_allowed))
        payload = json.dumps(dict(zip(PUBLIC_KEY_ROW.columns[1:], row[1:], strict=True)))
        value = self._tables.integrity.mac(PUBLIC_KEY_ROW, row) + payload.encode()
        sql = self._tables.sql
        if new:
            return db.execute(sql.note_meta, (PREFIX + info.name, value)).rowcount == 1
        db.execute(sql.write_meta, (value, PREFIX + info.name))
        return True
