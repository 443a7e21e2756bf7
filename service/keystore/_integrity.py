"""What the master key vouches for in a keystore, for every implementation of the store.

Whoever can write the store's file or database without holding the master key (a shared
volume, a restored backup, a careless chmod) must not be able to change what it decides:

- key material is wrapped (AES-256-GCM under the master key) with an AAD that binds the key's
  name, the version, the algorithm and exportability: a relabelled key or a moved blob no
  longer unwraps; the import wrapping key's private half (RSA-4096, ``_imports``) is wrapped
  likewise, under its own AAD;
- every other row that decides something, a key's row (algorithm, exportable,
  min_decryption_version, and for an imported key ``imported`` and ``allow_rotation``), its
  limits row (max_encryptions, auto_rotate_period), its policy row (min_encryption_version,
  deletion_allowed, made_exportable, plaintext_backup, min_available_version, soft_deleted), a
  public-key-only key's row (its type, PEM and deletion_allowed), a token's row (digest,
  scopes, revocation, lifetime and uses), an AppRole role's or secret id's row and a
  certificate role's row, carries an HMAC-SHA-256 over every one of its columns, under a key
  derived from the master key with HKDF-SHA-256, one key per kind of row.

A store computes ``mac`` when it writes a row and calls ``verify`` on every row it loads,
before it parses a value of it; a row that fails is refused and ``refuse`` logs it once.
Values are encoded as stored (type, length, bytes), so a column given another type fails too.
A MAC cannot notice a row that was deleted, nor a whole row or file put back as it was
earlier (docs/SERVICE.md, Keystore).
"""

from __future__ import annotations

import hmac
import logging
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from sealflow.engine import Algorithm

from ._generations import split, tag
from ._key_types import KeyType, of
from ._masterkey import KeyWrapper
from .errors import KeyStoreCorrupt, KeyStoreUnavailable

log = logging.getLogger("sealflow.keystore")

# Schema 1 had no MACs and bound only name and version in the wrapping AAD.
SCHEMA_VERSION = 2


@dataclass(frozen=True, slots=True)
class Row:
    """A kind of authenticated row: its name, and its columns in the order the MAC covers them."""

    label: str
    columns: tuple[str, ...]


KEY_ROW = Row("key", ("name", "algorithm", "exportable", "min_decryption_version", "created_at"))
# A key imported (Transit's BYOK import, ``_imports``): its row MAC'd over two columns more,
# under this kind's own key. A row whose ``imported`` is 0 is MAC'd as KEY_ROW, as every key row
# was before imports existed, so those rows still verify; a flag set or cleared without the
# master key fails either way.
KEY_IMPORTED_ROW = Row("key-imported", (*KEY_ROW.columns, "imported", "allow_rotation"))
# A token's row: its identity, scopes, revocation and lifetime (``TokenInfo``). Rows written
# before lifetimes existed were MAC'd over the first six columns under LEGACY_TOKEN_ROW's key;
# opening such a keystore re-MACs each one that passes that check under TOKEN_ROW's, and leaves
# one that fails as it is: refused either way, never re-signed (``_token_rows.upgrade``).
TOKEN_ROW = Row(
    "token-lifetime",
    (
        "id",
        "digest",
        "scopes",
        "label",
        "created_at",
        "revoked_at",
        "ttl",
        "expire_at",
        "explicit_max_ttl",
        "renewable",
        "num_uses",
        "uses",
        "parent",
        "orphan",
    ),
)
LEGACY_TOKEN_ROW = Row("token", TOKEN_ROW.columns[:6])
# A key's usage limits (a key without this row has the defaults).
LIMITS_ROW = Row("limits", ("name", "max_encryptions", "auto_rotate_period"))
# A key's Transit policy (a key without this row: min_encryption_version 0, deletion not allowed).
# A row whose made_exportable is 0 is MAC'd over these three columns, as every policy row was
# before the flag existed, so those rows still verify; one whose flag is set (the key made
# exportable after its creation) over all four, under POLICY_EXPORTABLE_ROW's own key: a flag
# set without the master key, or cleared, fails either way (docs/SERVICE.md, Keystore).
POLICY_ROW = Row("policy", ("name", "min_encryption_version", "deletion_allowed"))
POLICY_EXPORTABLE_ROW = Row(
    "policy-exportable", ("name", "min_encryption_version", "deletion_allowed", "made_exportable")
)
# One whose plaintext_backup (Transit's allow_plaintext_backup) is set, over all five, under a
# key of its own, likewise: rows without it keep their forms and MACs.
POLICY_BACKUP_ROW = Row("policy-backup", (*POLICY_EXPORTABLE_ROW.columns, "plaintext_backup"))
# Likewise once a key was trimmed or soft-deleted (Transit's lifecycle, ``_lifecycle``): over
# all seven, under its own key, so neither can be lowered or lifted without the master key.
POLICY_LIFECYCLE_ROW = Row(
    "policy-lifecycle",
    (*POLICY_BACKUP_ROW.columns, "min_available_version", "soft_deleted"),
)
# A public-key-only key (an RSA public key imported as a byok-export destination,
# ``_public_keys``): a keystore meta row whose value carries this MAC.
PUBLIC_KEY_ROW = Row("public-key", ("name", "type", "public_key", "created_at", "deletion_allowed"))
# An AppRole role: what a login with it grants (``_approle_rows``).
ROLE_ROW = Row(
    "approle-role",
    (
        "name",
        "role_id",
        "policies",
        "token_ttl",
        "token_max_ttl",
        "token_num_uses",
        "secret_id_ttl",
        "secret_id_num_uses",
        "secret_id_bound_cidrs",
        "token_bound_cidrs",
        "bind_secret_id",
        "created_at",
    ),
)
# An AppRole secret id: its digest, the role (and that role's creation time, so a role deleted
# and made again under the same name does not inherit it), its lifetime, uses and bounds.
SECRET_ID_ROW = Row(
    "approle-secret-id",
    (
        "accessor",
        "role",
        "role_born",
        "digest",
        "created_at",
        "expire_at",
        "num_uses",
        "uses",
        "cidrs",
        "metadata",
    ),
)
# A certificate role of the cert auth method: the certificate it trusts, the rules a client
# certificate must match, and what a login with it grants (``_cert_rows``).
CERT_ROLE_ROW = Row(
    "cert-role",
    (
        "name",
        "certificate",
        "allowed_common_names",
        "allowed_dns_sans",
        "allowed_email_sans",
        "allowed_uri_sans",
        "allowed_organizational_units",
        "policies",
        "token_ttl",
        "token_max_ttl",
        "display_name",
        "created_at",
    ),
)


def encode(label: str, values: Sequence[object]) -> bytes:
    """The label, then every value as type, length and bytes: no two inputs encode alike."""
    out = bytearray()
    for value in (label, *values):
        kind, data = _field(value)
        out += kind + len(data).to_bytes(4, "big") + data
    return bytes(out)


def _field(value: object) -> tuple[bytes, bytes]:
    # The types a database hands back. bool is an int, as SQLite stores it.
    if value is None:
        return b"N", b""
    if isinstance(value, int):
        return b"I", value.to_bytes(8, "big", signed=True)
    if isinstance(value, float):
        return b"F", struct.pack(">d", value)
    if isinstance(value, str):
        return b"S", value.encode()
    if isinstance(value, bytes):
        return b"B", value
    raise TypeError(f"cannot authenticate a {type(value).__name__}")


_MATERIAL_LABEL = "sealflow-keystore-material"
# What a version's wrapping binds as its type: a key type, or an engine AEAD (a plain key).
Kind = KeyType | Algorithm
_CHECK_AAD = encode("sealflow-keystore-check", [SCHEMA_VERSION])
_CHECK_VALUE = b"sealflow master key check"
_WRAPPING_KEY_AAD = encode("sealflow-keystore-wrapping-key", [SCHEMA_VERSION])


def _derive(master_key: bytes, row: Row) -> bytes:
    info = f"sealflow-keystore-v{SCHEMA_VERSION} MAC key for {row.label} rows".encode()
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(master_key)


_ROWS = (
    KEY_ROW,
    KEY_IMPORTED_ROW,
    TOKEN_ROW,
    LEGACY_TOKEN_ROW,
    LIMITS_ROW,
    POLICY_ROW,
    POLICY_EXPORTABLE_ROW,
    POLICY_BACKUP_ROW,
    POLICY_LIFECYCLE_ROW,
    PUBLIC_KEY_ROW,
    ROLE_ROW,
    SECRET_ID_ROW,
    CERT_ROLE_ROW,
)


class _Kek:
    """One KEK generation's keys: its wrapper and its MAC keys."""

    __slots__ = ("key", "mac_keys", "wrapper")

    def __init__(self, master_key: bytes) -> None:
        self.key = master_key
        self.wrapper = KeyWrapper(master_key)
        self.mac_keys = {row: _derive(master_key, row) for row in _ROWS}


@dataclass(frozen=True, slots=True)
class _Held:
    """The KEK generations a store holds, and the one it writes under; replaced whole."""

    keks: dict[int, _Kek]
    write: int
    lost: str | None = None  # why writing is refused: a rotation this process missed


class Integrity:
    """The master key's part in a store: wrapping material, MACs of rows, the check value.

    The master key is the keystore's KEK. While ``rotate-master`` runs, a store holds two KEK
    generations (``_kek_follow``): it writes under the newer, and reads each value under the
    generation written in front of it (``_generations``).
    """

    __slots__ = ("_held", "_labelled")

    def __init__(self, master_key: bytes) -> None:
        self._held = _Held({0: _Kek(master_key)}, 0)
        self._labelled = False

    # -- generations (``_kek_follow``)

    @property
    def generation(self) -> int:
        """The generation this store writes under."""
        return self._held.write

    def holds(self, generation: int) -> bool:
        return generation in self._held.keks

    def label(self, generation: int) -> None:
        """Name the generation of the key this was made with, once (the record says it)."""
        if self._labelled:
            return
        self._labelled = True
        if generation:
            self._held = _Held({generation: self._held.keks[0]}, generation)

    def adopt(self, master_key: bytes, generation: int) -> None:
        """Hold the next generation too, and write under it from now on."""
        held = self._held
        self._held = _Held({**held.keks, generation: _Kek(master_key)}, generation)

    def retire(self, generation: int) -> None:
        """Hold ``generation`` alone (a rotation finished, or none is under way)."""
        held = self._held
        if list(held.keks) != [generation]:
            self._held = _Held({generation: held.keks[generation]}, generation)

    def lose(self, why: str) -> bool:
        """Refuse every write from now on, saying ``why``; False if that was so already."""
        held = self._held
        self._held = _Held(held.keks, held.write, why)
        return held.lost is None

    def writes_with(self, master_key: bytes, generation: int) -> bool:
        """Whether this writes under ``master_key`` as ``generation``."""
        held = self._held
        kek = held.keks.get(generation)
        if held.write != generation or kek is None:
            return False
        return hmac.compare_digest(kek.key, master_key)

    def _writer(self) -> tuple[int, _Kek]:
        held = self._held
        if held.lost is not None:
            raise KeyStoreUnavailable(held.lost)
        return held.write, held.keks[held.write]

    def _reader(self, value: object) -> tuple[_Kek, bytes] | None:
        if not isinstance(value, bytes):
            return None
        keks = self._held.keks
        generation, inner = split(value, keks)
        kek = keks.get(generation)
        return None if kek is None else (kek, inner)

    def _wrap(self, aad: bytes, plain: bytes) -> bytes:
        generation, kek = self._writer()
        return tag(generation, kek.wrapper.wrap(aad, plain))

    def _unwrap(self, aad: bytes, blob: object) -> bytes:
        found = self._reader(blob)
        if found is None:
            raise KeyStoreCorrupt(
                "cannot unwrap key material: wrong master key or corrupt keystore"
            )
        kek, inner = found
        return kek.wrapper.unwrap(aad, inner)

    # -- what the stores use

    def wrap(
        self, name: str, version: int, algorithm: Kind, exportable: bool, material: bytes
    ) -> bytes:
        return self._wrap(_material_aad(name, version, algorithm, exportable), material)

    def unwrap(
        self, name: str, version: int, algorithm: Kind, exportable: bool, blob: object
    ) -> bytes:
        """The material, or KeyStoreCorrupt (the master key was checked when the store opened)."""
        aad = _material_aad(name, version, algorithm, exportable)
        try:
            material = self._unwrap(aad, blob)
        except KeyStoreCorrupt:
            raise KeyStoreCorrupt(
                f"key {name!r} version {version} fails its integrity check"
            ) from None
        kind = algorithm if isinstance(algorithm, KeyType) else of(algorithm)
        if kind.key_size and len(material) != kind.key_size:
            raise KeyStoreCorrupt(f"key {name!r} version {version} has the wrong length")
        return material

    def mac(self, row: Row, values: Sequence[object]) -> bytes:
        generation, kek = self._writer()
        return tag(generation, _mac(kek, row, values))

    def verify(self, row: Row, values: Sequence[object], mac: object) -> bool:
        found = self._reader(mac)
        if found is None or len(values) != len(row.columns):
            return False
        kek, inner = found
        try:
            expected = _mac(kek, row, values)
        except (TypeError, ValueError, OverflowError):
            return False
        return hmac.compare_digest(expected, inner)

    def mac_length(self, value: bytes) -> int:
        """How many bytes in front of ``value`` are its MAC (a public-key row's)."""
        return len(value) - len(split(value, self._held.keks)[1]) + _MAC_LEN

    def wrap_wrapping_key(self, private_der: bytes) -> bytes:
        """The import wrapping key's private half (PKCS #8 DER), wrapped under the master key."""
        return self._wrap(_WRAPPING_KEY_AAD, private_der)

    def unwrap_wrapping_key(self, blob: object) -> bytes:
        return self._unwrap(_WRAPPING_KEY_AAD, blob)

    def wrap_next(self, master_key: bytes, generation: int) -> bytes:
        """The next generation's KEK, wrapped under this one (``_kek_follow``)."""
        return self._wrap(_next_aad(generation), master_key)

    def unwrap_next(self, blob: object, generation: int) -> bytes:
        return self._unwrap(_next_aad(generation), blob)

    def rewrap_material(
        self, name: str, version: int, column: str, exportable: int, blob: object
    ) -> bytes | None:
        """A version's wrapping under the generation written now, or None if it does not unwrap
        (``_rotation``); ``column`` is the key's stored type."""
        aad = encode(_MATERIAL_LABEL, [name, version, column, exportable])
        try:
            return self._wrap(aad, self._unwrap(aad, blob))
        except KeyStoreCorrupt:
            return None

    def rewrap_wrapping_key(self, blob: object) -> bytes | None:
        try:
            return self.wrap_wrapping_key(self.unwrap_wrapping_key(blob))
        except KeyStoreCorrupt:
            return None

    def check_blob(self) -> bytes:
        """Stored with a keystore, so a wrong master key fails at open; binds the schema version."""
        return self._wrap(_CHECK_AAD, _CHECK_VALUE)

    def opens(self, check_blob: object) -> bool:
        try:
            return self._unwrap(_CHECK_AAD, check_blob) == _CHECK_VALUE
        except KeyStoreCorrupt:
            return False


_MAC_LEN = 32


def _mac(kek: _Kek, row: Row, values: Sequence[object]) -> bytes:
    message = encode(f"sealflow-keystore-{row.label}-row", values)
    return hmac.digest(kek.mac_keys[row], message, "sha256")


def _next_aad(generation: int) -> bytes:
    return encode("sealflow-keystore-next-kek", [generation])


def key_row_form(values: Sequence[object]) -> tuple[Row, Sequence[object]]:
    """How a key's stored row (KEY_IMPORTED_ROW's columns) is MAC'd: as KEY_ROW's five columns
    unless the key was imported."""
    if values[5] == 0:
        return KEY_ROW, values[:5]
    return KEY_IMPORTED_ROW, values


def _material_aad(name: str, version: int, algorithm: Kind, exportable: bool) -> bytes:
    # The stored type (``KeyType.column``): a plain AEAD key's is the engine's name, as ever.
    column = algorithm.column if isinstance(algorithm, KeyType) else algorithm.value
    return encode(_MATERIAL_LABEL, [name, version, column, int(exportable)])


_refused: set[tuple[str, str]] = set()
_refused_lock = threading.Lock()


def refuse(store: str, what: str) -> None:
    """Log a row that failed its check, once per process: every refresh reads it again."""
    with _refused_lock:
        if (store, what) in _refused:
            return
        _refused.add((store, what))
    log.error(
        "keystore %s: %s fails its integrity check (changed without the master key, or"
        " damaged); refused",
        store,
        what,
        extra={"fields": {"keystore": store, "row": what}},
    )
