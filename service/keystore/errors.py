"""The keystore's errors. Messages never contain key material or tokens."""

from __future__ import annotations


class KeyStoreError(Exception):
    """Base of the keystore's errors."""


class KeyNotFound(KeyStoreError):
    pass


class TokenNotFound(KeyStoreError):
    pass


class KeyExists(KeyStoreError):
    pass


class InvalidRequest(KeyStoreError):
    """A well-formed call the store refuses (e.g. min_decryption_version out of range)."""


class KeyStoreUnavailable(KeyStoreError):
    """The store is corrupt, unreadable, or the master key does not open it."""
