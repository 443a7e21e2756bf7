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


class NotExportable(KeyStoreError):
    """Export of a key that is not exportable (neither created nor made so)."""


class VersionRetired(KeyStoreError):
    """Export of a version below the key's min_decryption_version."""


class VersionUsedUp(KeyStoreError):
    """A sealing asked for under an explicit key version (Transit's ``key_version``) that has
    reached its ``max_encryptions``: refused, never sealed (the latest rotates instead)."""


class DeletionNotAllowed(KeyStoreError):
    """Deletion of a key whose ``deletion_allowed`` was not set."""


class KeyStoreUnavailable(KeyStoreError):
    """The store is corrupt, unreadable, or the master key does not open it."""


class KeyStoreCorrupt(KeyStoreUnavailable):
    """A row or file fails its check: changed without the master key, or damaged.

    A refused row is logged once per process by the store; callers need not log it again.
    """
