"""The audit key and the two MACs made with it: a value's ``hmac-sha256:`` field, a checkpoint.

The audit key is derived from the master key (HKDF-SHA-256, its own ``info``), so the log never
needs a secret of its own and nothing written to it can unwrap a key. ``hmac_field`` is an
oracle by design: a request's AAD, a Transit context or a presented token reaches the log as
HMAC(audit key, value), for any value a caller sends. A checkpoint is therefore MAC'd under a
second key that is not an HMAC under the audit key of anything (HKDF with the audit key as its
input keying material, not as the HMAC key), so no value a caller sends can make one.
"""

from __future__ import annotations

import hashlib
import hmac

import orjson
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

PREFIX = "hmac-sha256:"
_AUDIT_INFO = b"sealflow audit v1"
_CHECKPOINT_INFO = b"sealflow audit checkpoint v1"


def _hkdf(secret: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret)


def audit_key(master_key: bytes) -> bytes:
    """The 32-byte audit key: HKDF-SHA-256 of the master key, ``info`` b"sealflow audit v1"."""
    return _hkdf(master_key, _AUDIT_INFO)


def hmac_field(key: bytes, value: bytes | str) -> str:
    """``hmac-sha256:<hex>`` of ``value`` (a str as UTF-8) under the audit key ``key``.

    What a record holds instead of a value that identifies data or a caller: searchable by
    whoever has the master key (``sealflow audit hmac VALUE``), meaningless to anyone else.
    """
    data = value.encode() if isinstance(value, str) else value
    return PREFIX + hmac.new(key, data, hashlib.sha256).hexdigest()


def checkpoint_key(key: bytes) -> bytes:
    """The key of checkpoint MACs, from the audit key (see the module's docstring for why)."""
    return _hkdf(key, _CHECKPOINT_INFO)


def checkpoint_mac(ckey: bytes, writer: str, seq: int, prev: str | None, time: str) -> str:
    """A checkpoint's ``hmac``: over its writer, seq, prev (so the whole chain before it) and
    time, encoded as one JSON array so that no two tuples share a message."""
    message = orjson.dumps([writer, seq, prev, time])
    return PREFIX + hmac.new(ckey, message, hashlib.sha256).hexdigest()
