"""The keystore's errors, and the one way a database driver's errors become them. Messages
never contain key material or tokens."""

from __future__ import annotations

from types import TracebackType


class KeyStoreError(Exception):
    """Base of the keystore's errors."""


class KeyNotFound(KeyStoreError):
    pass


class TokenNotFound(KeyStoreError):
    pass


class TokenExpired(KeyStoreError):
    """A token past its expiry, or whose uses are all used: refused like an unknown one, with
    its own code (``token_expired``)."""


class NotRenewable(KeyStoreError):
    """A renewal of a token created not renewable (or without an expiry, as the root token)."""


class KeyExists(KeyStoreError):
    pass


class RoleNotFound(KeyStoreError):
    """An AppRole role that is not there."""


class LoginRefused(KeyStoreError):
    """An AppRole login refused: its message is Vault's, safe to show (it names no secret)."""


class InvalidRequest(KeyStoreError):
    """A well-formed call the store refuses (e.g. min_decryption_version out of range)."""


class NotExportable(KeyStoreError):
    """Export of a key that is not exportable (neither created nor made so)."""


class VersionRetired(KeyStoreError):
    """Export of a version below the key's min_decryption_version."""


class VersionUsedUp(KeyStoreError):
    """A sealing asked for under an explicit key version (Transit's ``key_version``) that has
    reached its ``max_encryptions``: refused, never sealed (the latest rotates instead)."""


# OpenBao's words for any use of a soft-deleted key (keysutil's ErrSoftDeleted).
SOFT_DELETED = "refusing to use soft-deleted key"


class KeySoftDeleted(KeyStoreError):
    """Any use of a soft-deleted key (Transit's soft delete) but reading, deleting or restoring
    it; its message is always ``SOFT_DELETED``."""


# OpenBao's words for a derived key used without a context (keysutil's DeriveKey).
MISSING_CONTEXT = (
    "missing 'context' for key derivation; the key was created using a derived key, which means"
    " additional, per-request information must be included in order to perform operations"
    " with the key"
)


class WrongKeyType(KeyStoreError):
    """An operation the key's type does not support (encrypting with an hmac or signing key,
    signing with an AES key), or a derived key used without its context: a 400."""


class DeletionNotAllowed(KeyStoreError):
    """Deletion of a key whose ``deletion_allowed`` was not set."""


class KeyStoreUnavailable(KeyStoreError):
    """The store is corrupt, unreadable, or the master key does not open it."""


class WouldWait(KeyStoreUnavailable):
    """A sealing asked for on the event loop that needs the store first (a reservation, a
    rotation): nothing was counted, and the caller asks again off the loop. Nothing that waits
    on the database runs on the event loop (``UsageMeter.bind_loop``); should one reach a
    client, it is the 503 of an unavailable store, never a wait."""


class BackupRefused(KeyStoreUnavailable):
    """A keystore backup file that is not one, is of another format, fails its integrity
    check, or whose target keystore is not empty: nothing was restored."""


class KeyStoreCorrupt(KeyStoreUnavailable):
    """A row or file fails its check: changed without the master key, or damaged.

    A refused row is logged once per process by the store; callers need not log it again.
    """


class DriverErrors:
    """A database driver's errors as ``KeyStoreUnavailable``, named after ``what``: the one
    mapping of a store (httpx's ``map_httpcore_exceptions``). Each store makes it once from its
    driver's base exception and runs every database call inside it, so the rest of the
    keystore, and its callers, see keystore errors only. It keeps no state, so one instance
    serves every thread, nested uses included."""

    __slots__ = ("_driver", "_what")

    def __init__(self, driver: type[Exception], what: str) -> None:
        self._driver = driver
        self._what = what

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if isinstance(exc, self._driver):
            # The first line only, and the driver's exception not chained: PostgreSQL's DETAIL
            # lines can quote row values (a unique violation quotes a token's digest).
            reason = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise KeyStoreUnavailable(f"{self._what}: {reason}") from None
