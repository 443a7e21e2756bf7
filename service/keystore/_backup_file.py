"""The keystore backup file: a snapshot (``_snapshot``) sealed under the master key, sans IO.

Layout (integers big-endian; docs/OPERATIONS.md, Backup and restore):

    magic "SFKB" | format 1 (u8) | algorithm 2 = AES-256-GCM (u8) | keystore id (16)
    | created at, Unix seconds (u64) | salt (32) | nonce (12) | ciphertext || tag (16)

The key is HKDF-SHA-256 of the master key with the file's random salt and a label of its own,
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
FORMAT = 1
_ALG = engine.Algorithm.AES_256_GCM
_ALG_ID = 2
_SALT_LEN = 32
_HEADER = struct.Struct(f">4sBB16sQ{_SALT_LEN}s{engine.NONCE_LEN}s")
_LABEL = b"sealflow keystore backup v1"


def _key(master_key: bytes, salt: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=_LABEL).derive(master_key)


def seal_backup(master_key: bytes, snapshot: Snapshot) -> bytes:
    salt, nonce = os.urandom(_SALT_LEN), os.urandom(engine.NONCE_LEN)
    header = _HEADER.pack(
        MAGIC, FORMAT, _ALG_ID, snapshot.keystore_id, int(time.time()), salt, nonce
    )
    body = engine.seal(_ALG, _key(master_key, salt), nonce, header, _encode(snapshot))
    return header + body


def open_backup(master_key: bytes, data: bytes, where: str) -> Snapshot:
    """The snapshot in ``data``, or BackupRefused saying why (nothing of it is trusted)."""
    if len(data) < _HEADER.size + 16 or not data.startswith(MAGIC):
        raise BackupRefused(f"{where} is not a sealflow keystore backup")
    _, version, alg, keystore_id, _when, salt, nonce = _HEADER.unpack_from(data)
    if version != FORMAT or alg != _ALG_ID:
        raise BackupRefused(
            f"{where} is a keystore backup of format {version}, algorithm {alg}: this sealflow"
            f" reads format {FORMAT}, algorithm {_ALG_ID}"
        )
    header = data[: _HEADER.size]
    try:
        plain = engine.open(_ALG, _key(master_key, salt), nonce, header, data[_HEADER.size :])
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
