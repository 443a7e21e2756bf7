"""The key hierarchy's top: the keystore's key-encryption key (KEK) and its stable secret,
sealed together by the master-key provider (``_seals``) into one record of the keystore's
metadata.

- The KEK is what ``Integrity`` wraps key material under and derives row MAC keys from.
  ``rotate-master`` replaces it (docs/SERVICE.md, The key hierarchy).
- The stable secret is what the audit key and backup files derive from; it never changes, so
  an audit trail verifies and a backup opens across any number of KEK rotations.

The record is the provider's name, its non-secret identity (token and key label; nothing for
``file``), and the provider's wrapping of KEK || secret: one provider call unwraps both.

A keystore made before providers has no record: its KEK and its secret are the master key it
was made with (so no row is rewritten, old audit trails verify, old backups open), and the
first open with that key writes the record. A new keystore under ``file`` or ``env`` is made
the same way (the file's key is its KEK until ``rotate-master``); under any other provider it
gets a random KEK and secret.

Keys a token (or another remote provider) unwrapped are kept in this process's memory, by
provider, identity and record, so a process asks its provider once; the file and env providers
unwrap in the process and are asked each time. Keys never go to the environment or a file.
"""

from __future__ import annotations

import base64
import os
import threading
from dataclasses import dataclass, field

import orjson

from ._masterkey import MASTER_KEY_LEN
from ._seals import HELD_KEYS, Seal
from .errors import KeyStoreCorrupt, KeyStoreUnavailable

# The metadata row (SQLite ``meta``, PostgreSQL ``sealflow_meta``) holding the record.
RECORD_META = "master_seal"
# While rotate-master runs (``_rotation``): the next generation's record, sealed by the target
# provider, and the next KEK wrapped under the current one, for the processes already running.
NEXT_META = "master_seal_next"
COPY_META = "master_kek_next"
_AAD = b"sealflow keystore KEK and secret v1"


@dataclass(frozen=True, slots=True)
class Keys:
    """What the provider unwraps: the KEK, and the stable secret (see the module docstring)."""

    kek: bytes = field(repr=False)
    secret: bytes = field(repr=False)

    @classmethod
    def new(cls) -> Keys:
        return cls(os.urandom(MASTER_KEY_LEN), os.urandom(MASTER_KEY_LEN))

    @classmethod
    def new_kek(cls, secret: bytes) -> Keys:
        """A new random KEK with the same stable secret: what ``rotate-master`` makes."""
        return cls(os.urandom(MASTER_KEY_LEN), secret)

    @classmethod
    def of_master_key(cls, key: bytes) -> Keys:
        """A keystore made before providers, or under ``file``/``env``: both are the key."""
        return cls(key, key)


@dataclass(frozen=True, slots=True)
class Record:
    """Which provider sealed the keys, what names its key (nothing secret), and the sealed
    blob."""

    provider: str
    identity: dict[str, str]
    blob: bytes = field(repr=False)
    # Which KEK this is: 0 until the first rotate-master, one more at each (``_generations``).
    generation: int = 0

    def encode(self) -> bytes:
        blob = base64.b64encode(self.blob).decode()
        fields: dict[str, object] = {
            "provider": self.provider,
            "identity": self.identity,
            "sealed": blob,
        }
        if self.generation:
            fields["generation"] = self.generation
        return orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)

    @classmethod
    def decode(cls, data: object, where: str) -> Record:
        try:
            if not isinstance(data, (bytes, memoryview)):
                raise ValueError("not a blob")
            fields = orjson.loads(bytes(data))
            identity = {str(k): str(v) for k, v in dict(fields["identity"]).items()}
            generation = fields.get("generation", 0)
            if not isinstance(generation, int) or not 0 <= generation < 2**32:
                raise ValueError("bad generation")
            blob = base64.b64decode(fields["sealed"])
            return cls(str(fields["provider"]), identity, blob, generation)
        except (ValueError, KeyError, TypeError, AttributeError):
            raise KeyStoreCorrupt(f"keystore {where}: its sealed key record is damaged") from None

    def names(self) -> str:
        """The provider and its identity, for messages."""
        parts = [f"{k} {v!r}" for k, v in sorted(self.identity.items())]
        return self.provider + (f" ({', '.join(parts)})" if parts else "")


def seal(seal: Seal, name: str, keys: Keys, generation: int = 0) -> Record:
    """One provider call: the keys wrapped by ``seal`` (the provider ``name``)."""
    blob = seal.wrap(keys.kek + keys.secret, _aad(generation))
    return Record(name, seal.describe(), blob, generation)


def _aad(generation: int) -> bytes:
    # Generation 0's is the AAD records had before rotations; later ones bind their number.
    return _AAD if generation == 0 else _AAD + b" generation %d" % generation


# By provider, its identity and the record. The file and env providers are not kept: their
# unwrap is AES-GCM in this process, and the identity of their key is the key itself, so each
# open checks the key it is given.
_unsealed: dict[tuple[str, bytes, bytes], Keys] = {}
_lock = threading.Lock()


def _cached(seal: Seal, name: str, record: Record) -> tuple[str, bytes, bytes] | None:
    if name in HELD_KEYS:
        return None
    return name, orjson.dumps(seal.describe(), option=orjson.OPT_SORT_KEYS), record.blob


def unseal(seal: Seal, name: str, record: Record) -> Keys:
    """The keys in ``record``: one provider call per process for a record (then from memory)."""
    cached = _cached(seal, name, record)
    with _lock:
        known = None if cached is None else _unsealed.get(cached)
    if known is not None:
        return known
    plain = seal.unwrap(record.blob, _aad(record.generation))
    if len(plain) != 2 * MASTER_KEY_LEN:
        raise KeyStoreUnavailable(f"the {record.names()} key unwrapped a record of the wrong size")
    keys = Keys(plain[:MASTER_KEY_LEN], plain[MASTER_KEY_LEN:])
    remember(seal, name, record, keys)
    return keys


def remember(seal: Seal, name: str, record: Record, keys: Keys) -> None:
    """Keys this process sealed itself, so that opening the record needs no provider call."""
    cached = _cached(seal, name, record)
    if cached is not None:
        with _lock:
            _unsealed[cached] = keys


def held_key(seal: Seal, name: str, where: str) -> bytes:
    """The master key itself, for a keystore without a record: only ``file`` and ``env``
    hold one; another provider is told how to move such a keystore."""
    key = getattr(seal, "key", None) if name in HELD_KEYS else None
    if not isinstance(key, bytes):
        raise KeyStoreUnavailable(
            f"keystore {where} is sealed by a master key file or variable, not by {name}: start"
            " it with --master-key-provider file (rotate-master moves it to another provider)"
        )
    return key


def mismatch(record: Record, name: str) -> str | None:
    """Why ``name`` cannot be the provider of ``record``, or None."""
    if record.provider == name or {record.provider, name} <= HELD_KEYS:
        return None
    return (
        f"its key-encryption key is sealed by the {record.names()} master-key provider, and"
        f" {name} is configured (SEALFLOW_MASTER_KEY_PROVIDER)"
    )
