"""The master key: loading it, creating a key file, and wrapping key material under it."""

from __future__ import annotations

import base64
import os
from pathlib import Path

from sealflow import engine

from .errors import KeyStoreCorrupt, KeyStoreUnavailable

MASTER_KEY_LEN = 32
_ALG = engine.Algorithm.AES_256_GCM


def load_master_key(env_value: str | None, key_file: Path | None) -> bytes:
    """The key from ``SEALFLOW_MASTER_KEY`` if set (and not blank), else from ``key_file``.

    Both hold base64 (standard or URL-safe alphabet, padding optional) of 32 bytes.
    """
    if env_value is not None and env_value.strip():
        return _decode(env_value, "SEALFLOW_MASTER_KEY")
    if key_file is None:
        raise KeyStoreUnavailable("no master key: set SEALFLOW_MASTER_KEY or a master key file")
    source = f"master key file {key_file}"
    return _decode(read_secret(key_file, source), source)


def read_secret(path: Path, source: str) -> str:
    """The text of a secret file (ASCII), or KeyStoreUnavailable saying what is wrong with it."""
    try:
        return path.read_bytes().decode("ascii")
    except OSError as exc:
        raise KeyStoreUnavailable(f"cannot read {source}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise KeyStoreUnavailable(f"{source} is not base64 text") from None


def _decode(text: str, source: str) -> bytes:
    # One decoder for both alphabets: operators paste keys from either kind of tool.
    text = text.strip().replace("-", "+").replace("_", "/").rstrip("=")
    try:
        key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except ValueError:
        # `from None`: the decoder's message may quote part of the key.
        raise KeyStoreUnavailable(f"{source} is not valid base64") from None
    if len(key) != MASTER_KEY_LEN:
        raise KeyStoreUnavailable(f"{source} must decode to {MASTER_KEY_LEN} bytes, not {len(key)}")
    return key


def create_master_key_file(path: Path) -> bytes:
    """Write a new random key to ``path`` (mode 0600) and return it.

    Raises ``FileExistsError`` rather than replace a key that may still protect a keystore.
    """
    key = os.urandom(MASTER_KEY_LEN)
    # O_EXCL: never overwrite; the mode is set at creation so the key is never world-readable.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(base64.b64encode(key) + b"\n")
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return key


class KeyWrapper:
    """AES-256-GCM under the master key; the AAD (from ``_integrity``) says what a blob is."""

    __slots__ = ("_key",)

    def __init__(self, master_key: bytes) -> None:
        if len(master_key) != MASTER_KEY_LEN:
            raise ValueError(f"the master key must be {MASTER_KEY_LEN} bytes")
        self._key = bytes(master_key)

    def wrap(self, aad: bytes, material: bytes) -> bytes:
        nonce = os.urandom(engine.NONCE_LEN)
        return nonce + engine.seal(_ALG, self._key, nonce, aad, material)

    def unwrap(self, aad: bytes, blob: object) -> bytes:
        """The material, or KeyStoreCorrupt (``blob`` is whatever the store held)."""
        try:
            if not isinstance(blob, bytes):
                raise ValueError("not a blob")
            nonce, sealed = blob[: engine.NONCE_LEN], blob[engine.NONCE_LEN :]
            return engine.open(_ALG, self._key, nonce, aad, sealed)
        except (engine.DecryptionError, ValueError):
            # ValueError: a blob too short to hold a nonce and tag is corruption too.
            raise KeyStoreCorrupt(
                "cannot unwrap key material: wrong master key or corrupt keystore"
            ) from None
