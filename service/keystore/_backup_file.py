"""The keystore backup file: a snapshot (``_snapshot``) sealed under the keystore's stable
secret (``_kek``), sans IO.

Layout (integers big-endian; docs/OPERATIONS.md, Backup and restore):

    magic "SFKB" | format (u8) | algorithm 2 = AES-256-GCM (u8) | keystore id (16)
    | created at, Unix seconds (u64) | salt (32) | nonce (12)
    | format 2 only: record length (u16) | the keystore's sealed key record
    | ciphertext || tag (16)

Format 2 carries the sealed key record, so the file opens with the master-key provider alone
(the keystore may be lost); format 1, written before providers, opens with the master key,
which was the keystore's secret. The key is HKDF-SHA-256 of the secret with the file's random
salt and a label of its own,
so it is fresh for every file and is no other key of the keystore's. The whole header is the
AEAD's associated data: a byte changed anywhere, header or body, and ``open_backup`` refuses
the file before anything is parsed. The plaintext holds the rows as stored: key material only
ever wrapped, tokens and secret ids only as digests.
"""

from __future__ import annotations

import os
import struct
import time
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from sealflow import engine

from ._snapshot import TABLES, Snapshot
from .errors import BackupRefused

MAGIC = b"SFKB"
FORMAT = 2
_FORMATS = (1, 2)
_RECORD_LEN = struct.Struct(">H")
_ALG = engine.Algorithm.AES_256_GCM
_ALG_ID = 2
_SALT_LEN = 32
_HEADER = struct.Struct(f">4sBB16sQ{_SALT_LEN}s{engine.NONCE_LEN}s")
_LABEL = b"sealflow keystore backup v1"


def _key(secret: bytes, salt: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=_LABEL).derive(secret)


def seal_backup(secret: bytes, snapshot: Snapshot, record: bytes | None = None) -> bytes:
    """Format 2 with the keystore's sealed key ``record``; format 1 without (a keystore whose
    secret is its master key)."""
    salt, nonce = os.urandom(_SALT_LEN), os.urandom(engine.NONCE_LEN)
    version = 1 if record is None else FORMAT
    header = _HEADER.pack(
        MAGIC, version, _ALG_ID, snapshot.keystore_id, int(time.time()), salt, nonce
    )
    if record is not None:
        header += _RECORD_LEN.pack(len(record)) + record
    body = engine.seal(_ALG, _key(secret, salt), nonce, header, _encode(snapshot))
    return header + body


def backup_record(data: bytes, where: str) -> bytes | None:
    """The sealed key record a format 2 file carries (unauthenticated until ``open_backup``:
    a changed one unseals other keys, which then do not open the file), or None."""
    _, version, _header_len, record = _parse(data, where)
    return record if version == 2 else None


def _parse(data: bytes, where: str) -> tuple[tuple[Any, ...], int, int, bytes]:
    if len(data) < _HEADER.size + 16 or not data.startswith(MAGIC):
        raise BackupRefused(f"{where} is not a sealflow keystore backup")
    fields = _HEADER.unpack_from(data)
    version, alg = fields[1], fields[2]
    if version not in _FORMATS or alg != _ALG_ID:
        raise BackupRefused(
            f"{where} is a keystore backup of format {version}, algorithm {alg}: this sealflow"
            f" reads formats 1 and 2, algorithm {_ALG_ID}"
        )
    if version == 1:
        return fields, version, _HEADER.size, b""
    if len(data) < _HEADER.size + _RECORD_LEN.size:
        raise BackupRefused(f"{where} is not a sealflow keystore backup")
    (length,) = _RECORD_LEN.unpack_from(data, _HEADER.size)
    start = _HEADER.size + _RECORD_LEN.size
    if len(data) < start + length + 16:
        raise BackupRefused(f"{where} is not a sealflow keystore backup")
    return fields, version, start + length, data[start : start + length]


def open_backup(secret: bytes, data: bytes, where: str) -> Snapshot:
    """The snapshot in ``data``, or BackupRefused saying why (nothing of it is trusted)."""
    fields, _version, header_len, _record = _parse(data, where)
    keystore_id, salt, nonce = fields[3], fields[5], fields[6]
    header = data[:header_len]
    try:
        plain = engine.open(_ALG, _key(secret, salt), nonce, header, data[header_len:])
    except engine.DecryptionError:
        raise BackupRefused(
            f"{where} fails its integrity check: it was changed or damaged, or it was sealed"
            " under another master key; nothing was restored"
        ) from None
    snapshot = _decode(plain, where)
    if snapshot.keystore_id != keystore_id:
        raise BackupRefused(f"{where} names another keystore than the one it holds")
    return snapshot


# -- the payload: the check value, then per table its row count and each row's values

_NONE, _INT, _FLOAT, _TEXT, _BYTES = b"N", b"I", b"F", b"S", b"B"


def _encode(snapshot: Snapshot) -> bytes:
    out = bytearray()
    _value(out, snapshot.check)
    for table, rows in zip(TABLES, snapshot.tables, strict=True):
        _value(out, table.name)
        out += struct.pack(">I", len(rows))
        for row in rows:
            for value in row:
                _value(out, value)
    return bytes(out)


def _value(out: bytearray, value: object) -> None:
    # The types the stores hand back (``_integrity._field``); a bool is stored as an int.
    if value is None:
        kind, data = _NONE, b""
    elif isinstance(value, int):
        kind, data = _INT, value.to_bytes(8, "big", signed=True)
    elif isinstance(value, float):
        kind, data = _FLOAT, struct.pack(">d", value)
    elif isinstance(value, str):
        kind, data = _TEXT, value.encode()
    elif isinstance(value, (bytes, memoryview)):
        kind, data = _BYTES, bytes(value)
    else:
        raise TypeError(f"cannot back up a {type(value).__name__}")
    out += kind + struct.pack(">I", len(data)) + data


class _Reader:
    __slots__ = ("_data", "_pos")

    def __init__(self, data: bytes) -> None:
        self._data, self._pos = data, 0

    def take(self, n: int) -> bytes:
        if self._pos + n > len(self._data):
            raise ValueError("truncated")
        chunk = self._data[self._pos : self._pos + n]
        self._pos += n
        return chunk

    def count(self) -> int:
        (n,) = struct.unpack(">I", self.take(4))
        return int(n)

    def value(self) -> Any:
        kind = self.take(1)
        data = self.take(self.count())
        if kind == _NONE:
            return None
        if kind == _INT:
            return int.from_bytes(data, "big", signed=True)
        if kind == _FLOAT:
            return struct.unpack(">d", data)[0]
        if kind == _TEXT:
            return data.decode()
        if kind == _BYTES:
            return data
        raise ValueError("unknown type")

    def done(self) -> bool:
        return self._pos == len(self._data)


def _decode(plain: bytes, where: str) -> Snapshot:
    reader = _Reader(plain)
    try:
        check = reader.value()
        tables = []
        for table in TABLES:
            if reader.value() != table.name:
                raise ValueError(f"expected table {table.name}")
            width = len(table.columns)
            rows = [tuple(reader.value() for _ in range(width)) for _ in range(reader.count())]
            tables.append(rows)
        if not isinstance(check, bytes) or not reader.done():
            raise ValueError("trailing data")
    except (ValueError, UnicodeDecodeError, struct.error):
        # Authenticated, so written by a sealflow: one whose tables are not these.
        raise BackupRefused(
            f"{where} holds tables this sealflow does not know: restore it with the release"
            " that made it"
        ) from None
    return Snapshot(check, tuple(tables))
