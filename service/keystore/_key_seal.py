"""The ``file`` and ``env`` master-key providers: a 32-byte key the operator keeps, which wraps
the keystore's KEK with AES-256-GCM in this process (``KeyWrapper``).

``file`` is today's behaviour, unchanged: ``SEALFLOW_MASTER_KEY`` if set, else the master key
file. ``env`` is the variable alone, for a deployment that wants a missing variable to be an
error rather than a fall back to a file. Both hold the same kind of key, so a keystore sealed
by one opens with the other (docs/SERVICE.md, The key hierarchy).
"""

from __future__ import annotations

from sealflow.service.config import Settings

from ._masterkey import KeyWrapper, load_master_key
from .errors import KeyStoreCorrupt, KeyStoreUnavailable


class KeySeal:
    """A master key held in this process: the ``file`` and ``env`` rows of the table."""

    __slots__ = ("_name", "_wrapper", "key")

    def __init__(self, name: str, key: bytes) -> None:
        self._name = name
        # Public for the upgrade of a keystore made before providers: its KEK is this key.
        self.key = key
        self._wrapper = KeyWrapper(key)

    @classmethod
    def from_settings(cls, settings: Settings) -> KeySeal:
        env = settings.master_key.get_secret_value() if settings.master_key else None
        return cls("file", load_master_key(env, None if env else settings.master_key_path))

    @classmethod
    def env_from_settings(cls, settings: Settings) -> KeySeal:
        env = settings.master_key.get_secret_value() if settings.master_key else ""
        if not env.strip():
            raise KeyStoreUnavailable(
                "the env master-key provider needs SEALFLOW_MASTER_KEY (base64 of 32 bytes)"
            )
        return cls("env", load_master_key(env, None))

    def wrap(self, kek: bytes, aad: bytes) -> bytes:
        return self._wrapper.wrap(aad, kek)

    def unwrap(self, blob: bytes, aad: bytes) -> bytes:
        try:
            return self._wrapper.unwrap(aad, blob)
        except KeyStoreCorrupt:
            raise KeyStoreUnavailable(
                f"the {self._name} master key does not unwrap the keystore's key-encryption key"
                " (another master key, or another provider sealed it)"
            ) from None

    def describe(self) -> dict[str, str]:
        return {}
