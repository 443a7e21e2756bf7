"""The keystore interface: named, versioned keys and bearer tokens.

The service only talks to a ``KeyStore``; ``SQLiteKeyStore`` (``_sqlite``) is
the embedded implementation, ``PostgresKeyStore`` (``_postgres``) the shared one for
replicas on several hosts. Implementations must make every write one transaction (a key version
once written is never lost, reused or changed, but with its whole key by ``delete_key``, which
needs the key's ``deletion_allowed``, or by ``trim_key``, Transit's trim, the one way a version
goes while its key lives) and must show writes made by
other processes on the next call, without a restart. Any method may raise
``KeyStoreUnavailable`` when the store itself fails (I/O error, lock held too long).

Implementations authenticate what they store with ``_integrity`` (wrapping AAD, row MACs)
and check every row they load: a key whose row fails is ``KeyStoreCorrupt`` for every call
that names it and is left out of ``list_keys``; a token whose row fails is not found and is
left out of ``list_tokens``. Either is logged once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

from sealflow.engine import Algorithm
from sealflow.service.envelope import valid_name

from ._approle_api import AppRoleStore
from ._cert_api import CertRoleStore
from ._key_types import KeyType
from .errors import (
    MISSING_CONTEXT,
    SOFT_DELETED,
    KeySoftDeleted,
    NotExportable,
    VersionRetired,
    WrongKeyType,
)

if TYPE_CHECKING:  # _snapshot imports this module (through _dialect)
    from ._public_keys import PublicKeyInfo
    from ._snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class KeyVersionInfo:
    version: int
    created_at: float  # Unix time


# NIST SP 800-38D, 8.3: with random 96-bit nonces, at most 2^32 invocations of GCM per key.
DEFAULT_MAX_ENCRYPTIONS = 2**32


@dataclass(frozen=True, slots=True)
class RestoredKey:
    """A key as a Transit backup holds it (``KeyStore.restore_key``): material by version."""

    name: str
    algorithm: Algorithm
    material: tuple[tuple[int, bytes], ...]
    min_decryption_version: int = 1
    min_encryption_version: int = 0
    deletion_allowed: bool = False
    allow_plaintext_backup: bool = False
    auto_rotate_period: float = 0.0


@dataclass(frozen=True, slots=True)
class KeyInfo:
    name: str
    # What the key is (Transit's type, derived, convergent: ``_key_types``), fixed at creation.
    key_type: KeyType
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
    # Transit's BYOK import (docs/TRANSIT.md, Importing keys): made by ``import``, and whether
    # sealflow may rotate it (a rotation makes it a key like any other, as in Transit).
    imported: bool = False
    allow_rotation: bool = False
    # When the key's own row was written (MAC'd with it): with the name, the key's identity.
    created_at: float = 0.0
    # Transit's key lifecycle (docs/TRANSIT.md, Trimming and soft deletion): versions below
    # ``min_available_version`` were removed by ``trim_key`` (0: never trimmed); a soft-deleted
    # key refuses every use until ``undo_soft_delete``.
    min_available_version: int = 0
    soft_deleted: bool = False
    # Transit's allow_plaintext_backup: backup/:name may dump the key (if exportable too).
    allow_plaintext_backup: bool = False

    @property
    def latest(self) -> int:
        return self.versions[-1].version

    @property
    def algorithm(self) -> Algorithm:
        """The engine's AEAD this key seals with under its own material: WrongKeyType for a
        key of another type (hmac, signing keys) and for a derived key, whose material is never
        used but through a per-context derivation. Every encryption path asks this, so such a
        key fails closed wherever it has not been given a path of its own."""
        key_type = self.key_type
        aead = key_type.aead
        if aead is None:
            kind = key_type.name
            raise WrongKeyType(f"message encryption not supported for key type {kind}")
        if key_type.derived:
            raise WrongKeyType(MISSING_CONTEXT)
        return aead

    @property
    def born(self) -> float:
        """When the key's row was written: with the name, the key's identity, fixed at creation
        (a key created again under a deleted key's name is another key, born later). Not its
        version 1's time: a trim removes version 1, never the key's row."""
        return self.created_at

    def slot(self, version: int) -> Slot:
        return Slot(self.name, self.created_at, version)  # ``born``, without its call


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
    """A token as its row says, every field under the row's MAC (``_integrity.TOKEN_ROW``).

    A lifetime as Vault's tokens have one: ``ttl`` is the period a renewal gives when it names
    none (Vault's ``creation_ttl``), ``expire_time`` the absolute end (None: never, as the
    first-start root token and every token made before lifetimes existed), never past
    ``created_at`` plus the smaller of ``explicit_max_ttl`` (0: none) and the store's
    ``Lifetimes.max_ttl`` at each renewal. ``num_uses`` (0: unlimited) counts requests, each
    one a keystore write (``use_token``), of which ``uses`` are made. ``parent`` is the accessor
    of the token that created this one ("" for the CLI's), and ``orphan`` whether it outlives
    that parent.
    """

    id: str  # public identifier (the accessor) for listing and revoking, not a secret
    scopes: tuple[str, ...]
    label: str
    created_at: float
    revoked: bool
    ttl: int = 0
    expire_time: float | None = None
    explicit_max_ttl: int = 0
    renewable: bool = False
    num_uses: int = 0
    uses: int = 0
    parent: str = ""
    orphan: bool = True

    def expired(self, now: float) -> bool:
        """Past its expiry at ``now`` (``time.time()``), or its uses all used."""
        end = self.expire_time
        return (end is not None and now >= end) or (0 < self.num_uses <= self.uses)

    def ttl_left(self, now: float) -> int:
        """Whole seconds left (Vault's ``ttl``): 0 for a token that never expires."""
        end = self.expire_time
        return 0 if end is None else max(int(end - now), 0)


@dataclass(frozen=True, slots=True)
class Lifetimes:
    """The store's rules for token lifetimes (``SEALFLOW_TOKEN_DEFAULT_TTL``,
    ``SEALFLOW_TOKEN_MAX_TTL``), in seconds: ``default_ttl`` for a token created without one
    (0: it never expires, unless ``max_ttl`` is set, which is then its lifetime), ``max_ttl`` the
    longest any token lives from its creation, renewals included (0: no limit)."""

    default_ttl: int = 0
    max_ttl: int = 0


class Renewal(NamedTuple):
    """A renewed token, and Vault's warnings (a renewal capped at the token's maximum)."""

    token: TokenInfo
    warnings: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class KeyStoreHealth:
    """What readiness and metrics need to know of a store's cache."""

    reachable: bool  # the last attempt to reach the store succeeded
    synced_at: float  # time.monotonic() of the last successful check for changes
    invalidation: str  # "notify", "poll" (notifications lost), or "none" (checked on each read)
    fallbacks: int  # times notifications were lost and polling took over


SCOPE_RE = re.compile(
    r"admin|(?:encrypt|decrypt|export|hmac|sign|verify):[A-Za-z0-9._*?\[\]!-]{1,64}"
)

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
    """``admin``, or ``<action>:<glob>`` over key names (fnmatch syntax), the action one of
    ``encrypt``, ``decrypt``, ``export``, ``hmac`` (HMACs and their verification), ``sign``,
    ``verify`` (signatures)."""
    return SCOPE_RE.fullmatch(scope) is not None


# Told of each change once it is committed: the operation (key_create, key_rotate, key_config,
# key_delete, key_trim, key_soft_delete, key_soft_delete_restore, token_create, token_revoke,
# token_renew) and what it names (never material or a secret). The audit trail listens
# (``sealflow.service.audit``); what called the write adds who asked.
ChangeHook = Callable[[str, dict[str, object]], None]

# Expired rows are kept this long after their expiry (``tokens list`` shows why a client was
# refused), then deleted by ``sweep_tokens``: when a token is created and when a server opens
# the store.
SWEEP_AFTER = 86400.0


class KeyStore(AppRoleStore, CertRoleStore, Protocol):
    on_change: ChangeHook | None  # set once, before the store is used from several threads
    lifetimes: Lifetimes  # likewise (``open_store`` sets it from the settings)

    def create_key(
        self,
        name: str,
        algorithm: Algorithm | KeyType,
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
        plaintext_backup: bool | None = None,
    ) -> KeyInfo:
        """Set any of a key's version rules, its deletion flag and its exportability (None:
        unchanged) in one transaction: ``set_min_decryption_version``'s rules, and
        InvalidRequest unless ``0 <= min_encryption_version <= latest`` and, when it is not 0,
        it is at least the min_decryption_version that results. ``exportable`` True makes
        every version of the key exportable from now on (its wrapping is unchanged);
        InvalidRequest for False on an exportable key: material may have left already.
        ``plaintext_backup`` (Transit's allow_plaintext_backup) likewise: True from now on,
        False refused once set. Each change is logged (key name, old and new)."""

    def restore_key(self, key: RestoredKey, force: bool = False) -> KeyInfo:
        """Transit's ``restore``: the key made again from a backup of it (``RestoredKey``), with
        its version numbers and material, exportable, in one transaction; its versions are
        stamped now, so the restored key is a new key (``KeyInfo.born``). KeyExists if the
        name is taken, unless ``force``: then the key there is deleted in the same transaction,
        which needs its ``deletion_allowed`` (DeletionNotAllowed), as a deletion does.
        InvalidRequest for versions not numbered 1 to N, material of the wrong length, or
        version rules out of range."""

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
        self,
        scopes: list[str],
        label: str = "",
        secret: str | None = None,
        *,
        ttl: int | None = None,
        explicit_max_ttl: int = 0,
        renewable: bool = True,
        num_uses: int = 0,
        parent: str = "",
        orphan: bool = True,
        expires: bool = True,
    ) -> tuple[TokenInfo, str]:
        """A new token: its info and the secret, which is returned once and stored only hashed.

        ``secret`` imports a token made elsewhere (a deployment secret) instead of drawing one;
        it must be ``valid_secret``. Its lifetime is ``lifetime``'s (``ttl`` None: the store's
        default); ``expires`` False makes a token that never expires whatever the settings
        (the first-start root token), and is not renewable. A token that never expires is
        never renewable. ``parent``: the accessor of the token that asks (stored for revoking
        children with their parent); ``orphan``: it outlives that parent. A child that is not
        an orphan lives within its parent: TokenNotFound if the parent is revoked or expired,
        and its ``explicit_max_ttl`` is cut to the parent's time left (``_lifetimes.within``),
        all in the transaction that writes it.

        InvalidRequest unless there is at least one scope and every scope is ``valid_scope``,
        and the lifetime's numbers are whole and not negative. Also sweeps tokens that expired
        more than ``SWEEP_AFTER`` seconds ago (``sweep_tokens``).
        """

    def creation_warnings(
        self,
        ttl: int | None,
        explicit_max_ttl: int = 0,
        renewable: bool = True,
        parent: TokenInfo | None = None,
    ) -> tuple[str, ...]:
        """Vault's warnings for a token created now with this lifetime (a TTL asked for and
        capped), as ``create_token`` decides it: for a caller that shows them. ``parent``: the
        token it is a (non-orphan) child of, whose time left caps it too."""

    def list_tokens(self) -> list[TokenInfo]:
        """Sorted by creation time; revoked and expired ones included (until swept)."""

    def get_token(self, token_id: str) -> TokenInfo:
        """The token of this accessor, read from the store itself (revoked and expired ones
        too: their fields say so). TokenNotFound if absent, or its row fails its check."""

    def revoke_token(self, token_id: str) -> TokenInfo:
        """Mark the token revoked (again is a no-op), and with it, in the same transaction,
        every descendant not created orphan (a ``token_revoke`` change each, the descendants'
        naming the token they went with). TokenNotFound if absent."""

    def renew_token(self, token_id: str, increment: int | None = None) -> Renewal:
        """Extend a token's expiry to now + ``increment`` seconds (None or 0: its ``ttl``),
        capped at its creation plus the smaller of its ``explicit_max_ttl`` and the store's
        ``max_ttl``, with Vault's warning when capped. One transaction; a ``token_renew``
        change. TokenNotFound if absent or revoked; TokenExpired if expired or used up;
        NotRenewable (Vault's text, ``lease is not renewable``) for a token that is not
        renewable; InvalidRequest for a negative increment."""

    def use_token(self, token_id: str) -> TokenInfo:
        """Count one use of a token with ``num_uses``, exactly, across every process: one
        transaction that refuses a token with none left (TokenExpired; TokenNotFound if
        absent or revoked). The token after the use; its last use also ends it
        (``expire_time`` set to now). A token without ``num_uses``: returned unchanged,
        nothing written."""

    def sweep_tokens(self, now: float | None = None) -> int:
        """Delete the rows of tokens that expired more than ``SWEEP_AFTER`` seconds before
        ``now``; how many. Revoked tokens that never expire are kept, as before."""

    def find_token(self, secret: str) -> TokenInfo | None:
        """The token with this secret unless revoked, or None; constant-time comparison. An
        expired or used-up token is returned too: ``TokenInfo.expired`` says so and every
        caller refuses it (with ``token_expired``, not as unknown). From memory: a renewal
        by another process shows once its change reaches this one (SQLite: the next read;
        PostgreSQL: its notification)."""

    def wrapping_public_pem(self) -> str:
        """The public half of the keystore's import wrapping key (RSA-4096, PEM), the key made
        on first use, once per keystore (``_imports``)."""

    def unwrap_import(self, ciphertext: str, hash_function: str = "SHA256") -> bytes:
        """The key material of a Transit import ``ciphertext`` (``_byok``); InvalidRequest."""

    def import_key(
        self,
        name: str,
        algorithm: Algorithm | KeyType,
        material: bytes,
        *,
        exportable: bool = False,
        allow_rotation: bool = False,
        auto_rotate_period: float | None = None,
        allow_plaintext_backup: bool = False,
    ) -> KeyInfo:
        """A new imported key of ``material`` (``_imports.Imports.import_key``)."""

    def import_versions(
        self,
        name: str,
        algorithm: Algorithm | KeyType,
        versions: Sequence[bytes | None],
        *,
        min_decryption_version: int = 1,
        min_encryption_version: int = 0,
        deletion_allowed: bool = False,
        exportable: bool = False,
        allow_rotation: bool = False,
        auto_rotate_period: float | None = None,
        allow_plaintext_backup: bool = False,
    ) -> KeyInfo:
        """A whole imported key, placeholders included, in one transaction
        (``_imports.Imports.import_versions``)."""

    def import_version(self, name: str, material: bytes) -> KeyInfo:
        """The next version of an imported key (``_imports.Imports.import_version``)."""

    def trim_key(self, name: str, min_available_version: int) -> KeyInfo:
        """Remove every version below ``min_available_version`` (``_lifecycle``)."""

    def soft_delete_key(self, name: str) -> tuple[KeyInfo, bool]:
        """Mark the key soft-deleted; whether it was already (``_lifecycle``)."""

    def undo_soft_delete(self, name: str) -> tuple[KeyInfo, bool]:
        """Lift a soft deletion; whether the key was not soft-deleted (``_lifecycle``)."""

    def import_public_key(self, name: str, kind: str, pem: str) -> PublicKeyInfo:
        """A public-key-only RSA key (``_public_keys``): a byok-export destination."""

    def public_key(self, name: str) -> PublicKeyInfo | None: ...

    def public_keys(self) -> list[PublicKeyInfo]: ...

    def configure_public_key(self, name: str, deletion_allowed: bool) -> PublicKeyInfo: ...

    def delete_public_key(self, name: str) -> None: ...

    def health(self) -> KeyStoreHealth:
        """Whether the store answers and how old the cache is (for /readyz and /metrics)."""

    def stale(self, max_age: float) -> bool:
        """Whether the store last heard from its database more than ``max_age`` seconds ago
        (a PostgreSQL replica cut off from it); cheap, asked on every request with a token.
        Never for a store that reads its database directly (SQLite)."""

    def snapshot(self) -> Snapshot:
        """Every row that matters, as stored, from one consistent snapshot of the store
        (``_snapshot``): read while servers write."""

    def restore(self, snapshot: Snapshot, replace: bool = False) -> None:
        """The snapshot's rows put in, in one transaction, and read back to compare before it
        commits. BackupRefused if the store holds rows and ``replace`` is not set (then its
        rows are deleted first); KeyStoreCorrupt if the read-back differs."""

    def close(self) -> None: ...


def export_material(
    store: KeyStore, name: str, version: int | None = None
) -> tuple[KeyInfo, int, bytes]:
    """The key, the version (latest by default) and its material, for export.

    KeySoftDeleted for a soft-deleted key; NotExportable unless the key is exportable (created
    so, or made so since); VersionRetired for a version below ``min_decryption_version``
    (retired for decryption, so not handed out either).
    """
    key = store.get_key(name)
    if key.soft_deleted:
        raise KeySoftDeleted(SOFT_DELETED)
    if not key.exportable:
        raise NotExportable(f"key {name!r} is not exportable")
    version = key.latest if version is None else version
    if version < key.min_decryption_version:
        raise VersionRetired(
            f"key {name!r} version {version} is below min_decryption_version"
            f" {key.min_decryption_version}"
        )
    return key, version, store.key_material(name, version)
