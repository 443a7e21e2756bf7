"""The keystore interface: named, versioned keys and bearer tokens.

The service only talks to a ``KeyStore``; ``SQLiteKeyStore`` (``_sqlite``) is
the embedded implementation, ``PostgresKeyStore`` (``_postgres``) the shared one for
replicas on several hosts. Implementations must make every write one transaction (a key version
once written is never lost, reused or changed, but with its whole key by ``delete_key``, which
needs the key's ``deletion_allowed``) and must show writes made by
other processes on the next call, without a restart. Any method may raise
``KeyStoreUnavailable`` when the store itself fails (I/O error, lock held too long).

Implementations authenticate what they store with ``_integrity`` (wrapping AAD, row MACs)
and check every row they load: a key whose row fails is ``KeyStoreCorrupt`` for every call
that names it and is left out of ``list_keys``; a token whose row fails is not found and is
left out of ``list_tokens``. Either is logged once.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from sealflow.engine import Algorithm
from sealflow.service.envelope import valid_name

from .errors import NotExportable, VersionRetired


@dataclass(frozen=True, slots=True)
class KeyVersionInfo:
    version: int
    created_at: float  # Unix time


# NIST SP 800-38D, 8.3: with random 96-bit nonces, at most 2^32 invocations of GCM per key.
DEFAULT_MAX_ENCRYPTIONS = 2**32


@dataclass(frozen=True, slots=True)
class KeyInfo:
    name: str
    algorithm: Algorithm
    # What clients see: created exportable, or made exportable since (Transit's config).
    exportable: bool
    # The flag the key was created with: bound into every version's wrapping AAD, rotations
    # included, so it never changes (``_integrity``); only the keystore reads it.
    created_exportable: bool
    min_decryption_version: int
    versions: tuple[KeyVersionInfo, ...]  # ascending, never empty
    # Per version: sealings before an automatic rotation (docs/OPERATIONS.md, Usage limits).
    max_encryptions: int = DEFAULT_MAX_ENCRYPTIONS
    auto_rotate_period: float = 0.0  # seconds a version is used before a rotation; 0: never
    # Transit's policy (docs/TRANSIT.md): the lowest version an explicit key_version may
    # encrypt with (0: any), and whether DELETE may remove the key.
    min_encryption_version: int = 0
    deletion_allowed: bool = False

    @property
    def latest(self) -> int:
        return self.versions[-1].version

    @property
    def born(self) -> float:
        """When version 1 was written: with the name, the key's identity, fixed at creation (a
        key created again under a deleted key's name is another key, born later)."""
        return self.versions[0].created_at

    def slot(self, version: int) -> Slot:
        return Slot(self.name, self.born, version)


class Slot(NamedTuple):
    """One version of one key, as its usage is counted: reservations belong to the key's
    identity (``KeyInfo.born``), never to its name, so a key created again under a deleted
    key's name starts from nothing, whatever a process still held of the old one."""

    name: str
    born: float
    version: int


@dataclass(frozen=True, slots=True)
class VersionUsage:
    """What a version has sealed: ``encryptions`` counts reservations (never fewer than the
    sealings made, more by what a crashed process had reserved); ``bytes`` of plaintext."""

    encryptions: int
    bytes: int


@dataclass(frozen=True, slots=True)
class TokenInfo:
    id: str  # public identifier for listing and revoking, not a secret
    scopes: tuple[str, ...]
    label: str
    created_at: float
    revoked: bool


@dataclass(frozen=True, slots=True)
class KeyStoreHealth:
    """What readiness and metrics need to know of a store's cache."""

    reachable: bool  # the last attempt to reach the store succeeded
    synced_at: float  # time.monotonic() of the last successful check for changes
    invalidation: str  # "notify", "poll" (notifications lost), or "none" (checked on each read)
    fallbacks: int  # times notifications were lost and polling took over


SCOPE_RE = re.compile(r"admin|(?:encrypt|decrypt|export):[A-Za-z0-9._*?\[\]!-]{1,64}")

# Key names: the native rule (``envelope.NAME_RE``, what an envelope can carry), or Vault's rule
# ``\w(([\w-.]+)?\w)?`` with ASCII ``\w`` as Go reads it, for keys made through Transit (usable
# through Transit only: the native routes refuse names an envelope cannot carry); 1 to 64.
VAULT_NAME_RE = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,62}[A-Za-z0-9_])?")


def valid_key_name(name: str) -> bool:
    """A name the keystore holds: the native rule or Vault's (see ``VAULT_NAME_RE``)."""
    return valid_name(name) or VAULT_NAME_RE.fullmatch(name) is not None


SECRET_RE = re.compile(r"[A-Za-z0-9_-]{43,512}")


def valid_secret(secret: str) -> bool:
    """A token secret: URL-safe base64 of at least 32 bytes (43 characters)."""
    return SECRET_RE.fullmatch(secret) is not None


ACCESSOR_RE = re.compile(r"tok_[0-9a-f]{16}")


def valid_accessor(accessor: str) -> bool:
    """A token's accessor (its public id, ``tok_`` and 16 hex digits, as ``create_token`` makes
    them). Anything else names no token: the server keeps such a value out of its logs and audit
    records, where a caller could otherwise write what it likes."""
    return ACCESSOR_RE.fullmatch(accessor) is not None


def valid_scope(scope: str) -> bool:
    """``admin``, or ``encrypt:<glob>`` / ``decrypt:<glob>`` / ``export:<glob>`` over key names
    (fnmatch syntax)."""
    return SCOPE_RE.fullmatch(scope) is not None


# Told of each change once it is committed: the operation (key_create, key_rotate, key_config,
# key_delete, token_create, token_revoke) and what it names (never material or a secret). The
# audit trail listens (``sealflow.service.audit``); what called the write adds who asked.
ChangeHook = Callable[[str, dict[str, object]], None]


class KeyStore(Protocol):
    on_change: ChangeHook | None  # set once, before the store is used from several threads

    def create_key(
        self,
        name: str,
        algorithm: Algorithm,
        exportable: bool = False,
        max_encryptions: int | None = None,
        auto_rotate_period: float | None = None,
    ) -> KeyInfo:
        """Create a key with version 1 of fresh random material, and its limits (None: the
        defaults), in one transaction.

        KeyExists if taken; InvalidRequest for an invalid name, a non-``Algorithm`` or a limit
        out of range (``set_limits``).
        """

    def rotate_key(self, name: str) -> KeyInfo:
        """Add version latest+1 of fresh random material. KeyNotFound if absent."""

    def set_min_decryption_version(
        self, name: str, version: int, allow_lowering: bool = False
    ) -> KeyInfo:
        """InvalidRequest unless 1 <= version <= latest, and unless ``allow_lowering`` when
        ``version`` is below the current value (that makes retired versions usable again).

        A lowering is logged (warning: key name, old and new value).
        """

    def configure(
        self,
        name: str,
        min_decryption_version: int | None = None,
        min_encryption_version: int | None = None,
        deletion_allowed: bool | None = None,
        allow_lowering: bool = False,
        exportable: bool | None = None,
    ) -> KeyInfo:
        """Set any of a key's version rules, its deletion flag and its exportability (None:
        unchanged) in one transaction: ``set_min_decryption_version``'s rules, and
        InvalidRequest unless ``0 <= min_encryption_version <= latest`` and, when it is not 0,
        it is at least the min_decryption_version that results. ``exportable`` True makes
        every version of the key exportable from now on (its wrapping is unchanged);
        InvalidRequest for False on an exportable key: material may have left already. Each
        change is logged (key name, old and new)."""

    def delete_key(self, name: str) -> KeyInfo:
        """Remove the key, every version's material, its limits and usage, in one transaction;
        the key as it was. KeyNotFound if absent, DeletionNotAllowed unless ``deletion_allowed``
        was set. Logged (name and number of versions, never material)."""

    def get_key(self, name: str) -> KeyInfo:
        """KeyNotFound if absent."""

    def set_limits(
        self, name: str, max_encryptions: int | None = None, auto_rotate_period: float | None = None
    ) -> KeyInfo:
        """Change a key's usage limits (None: unchanged). InvalidRequest unless
        ``1 <= max_encryptions <= 2^32`` and ``auto_rotate_period`` is 0 (never) or >= 1 s."""

    def rotate_if_latest(self, name: str, version: int) -> KeyInfo:
        """Rotate only if ``version`` is still the latest: of several processes that saw the
        same limit reached, exactly one adds a version."""

    def reserve_usage(self, slot: Slot, want: int, limit: int, nbytes: int = 0) -> tuple[int, int]:
        """Reserve up to ``want`` sealings of a key version (``_rows.grant``: never past
        ``limit``), and add ``nbytes``; one transaction. The number granted (0: the limit is
        reached) and the total reserved after it. KeyNotFound if the slot's key is gone
        (deleted, or replaced by a new key of its name): checked in the same transaction."""

    def release_usage(self, slot: Slot, count: int, nbytes: int = 0) -> None:
        """Give back ``count`` reserved, unused sealings; add ``nbytes``. Nothing if the slot's
        key is gone: a new key of its name is not given what the old one's users held."""

    def reserved(self, slots: list[Slot]) -> dict[Slot, int]:
        """The total reserved of each slot (one never reserved, or whose key is gone, is left
        out)."""

    def usage(self, name: str) -> dict[int, VersionUsage]:
        """What each version of a key has sealed (versions never used are left out)."""

    def list_keys(self) -> list[KeyInfo]:
        """Sorted by name."""

    def key_material(self, name: str, version: int) -> bytes:
        """The unwrapped material of one version. KeyNotFound if name or version is absent.

        Whatever ``min_decryption_version`` says: that rule is the caller's (decrypt, export).
        """

    def material(self, slot: Slot) -> bytes:
        """The unwrapped material of the slot's version of the key born then: KeyNotFound if
        that key is gone, or replaced by a new key of its name (``KeyInfo.born`` differs), or
        has no such version. By identity, not by name: a lease takes the material of the key
        whose slot it counts against, never another key's made under the same name since.
        """

    def create_token(
        self, scopes: list[str], label: str = "", secret: str | None = None
    ) -> tuple[TokenInfo, str]:
        """A new token: its info and the secret, which is returned once and stored only hashed.

        ``secret`` imports a token made elsewhere (a deployment secret) instead of drawing one;
        it must be ``valid_secret``.

        InvalidRequest unless there is at least one scope and every scope is ``valid_scope``.
        """

    def list_tokens(self) -> list[TokenInfo]:
        """Sorted by creation time."""

    def revoke_token(self, token_id: str) -> TokenInfo:
        """Mark the token revoked (again is a no-op). TokenNotFound if absent."""

    def find_token(self, secret: str) -> TokenInfo | None:
        """The live (not revoked) token with this secret, or None; constant-time comparison."""

    def health(self) -> KeyStoreHealth:
        """Whether the store answers and how old the cache is (for /readyz and /metrics)."""

    def stale(self, max_age: float) -> bool:
        """Whether the store last heard from its database more than ``max_age`` seconds ago
        (a PostgreSQL replica cut off from it); cheap, asked on every request with a token.
        Never for a store that reads its database directly (SQLite)."""

    def close(self) -> None: ...


def export_material(
    store: KeyStore, name: str, version: int | None = None
) -> tuple[KeyInfo, int, bytes]:
    """The key, the version (latest by default) and its material, for export.

    NotExportable unless the key is exportable (created so, or made so since); VersionRetired
    for a version below ``min_decryption_version`` (retired for decryption, so not handed out
    either).
    """
    key = store.get_key(name)
    if not key.exportable:
        raise NotExportable(f"key {name!r} is not exportable")
    version = key.latest if version is None else version
    if version < key.min_decryption_version:
        raise VersionRetired(
            f"key {name!r} version {version} is below min_decryption_version"
            f" {key.min_decryption_version}"
        )
    return key, version, store.key_material(name, version)
