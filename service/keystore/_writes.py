"""Every write of a keystore, written once for every store: keys and their versions, limits,
version rules, deletion, tokens and usage reservations. A store gives its transaction and its
``Tables`` (its rows in its SQL dialect); the order of checks and writes is here, so the stores
cannot drift apart."""

from __future__ import annotations

import logging
import secrets
import time
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from typing import Generic, TypeVar

from sealflow.engine import Algorithm

from . import _lifetimes, _root_scopes, _token_lifetimes, _usage_rows
from ._approle import AppRoles
from ._base import (
    SWEEP_AFTER,
    ChangeHook,
    KeyInfo,
    Lifetimes,
    Renewal,
    RestoredKey,
    Slot,
    TokenInfo,
    VersionUsage,
    valid_accessor,
    valid_key_name,
    valid_scope,
    valid_secret,
)
from ._cert_roles import CertRoles
from ._dialect import Connection, Dialect
from ._imports import Imports, rotatable
from ._integrity import Integrity
from ._key_types import KeyType, fresh_material
from ._key_types import of as key_type_of
from ._lifecycle import Lifecycle, in_use
from ._public_keys import PublicKeys, held
from ._rows import MAX_VERSION, digest, limits_row, policy_row, stored_policy, token_info
from ._tables import Tables
from .errors import (
    DeletionNotAllowed,
    InvalidRequest,
    KeyExists,
    KeyNotFound,
    KeyStoreCorrupt,
    KeyStoreError,
    TokenExpired,
    TokenNotFound,
)

log = logging.getLogger("sealflow.keystore")
Db = TypeVar("Db", bound=Connection)


class Writes(Imports, Lifecycle, PublicKeys, AppRoles, CertRoles, ABC, Generic[Db]):
    """The ``KeyStore``'s writes; a store adds its connections and its reads (its cache, kept
    fresh its own way) and sets ``_tables``."""

    _tables: Tables
    on_change: ChangeHook | None = None
    lifetimes: Lifetimes = Lifetimes()

    def _changed(self, operation: str, **fields: object) -> None:
        hook = self.on_change
        if hook is not None:
            hook(operation, fields)

    @abstractmethod
    def _transaction(self, changes: bool = True) -> AbstractContextManager[Db]:
        """One write transaction, the only writer of what it locks (SQLite: BEGIN IMMEDIATE;
        PostgreSQL: the changes row and the rows read FOR UPDATE), its driver's errors mapped.
        ``changes``: whether it changes what the caches hold (usage counts do not)."""

    def exclusive(self) -> AbstractContextManager[Db]:
        """A write transaction, serialised with every other write, for ``_rotation``."""
        return self._transaction()

    @property
    def integrity(self) -> Integrity:
        return self._tables.integrity

    @property
    def where(self) -> str:
        return self._tables.where

    @property
    def sql_dialect(self) -> Dialect:
        return self._tables.sql.dialect

    @abstractmethod
    def _connection(self) -> AbstractContextManager[Db]:
        """A connection for one statement, a transaction of its own, errors mapped."""

    @abstractmethod
    def get_key(self, name: str) -> KeyInfo:
        """The key as the store's reads see it (``KeyStore.get_key``)."""

    # -- keys

    def create_key(
        self,
        name: str,
        algorithm: Algorithm | KeyType,
        exportable: bool = False,
        max_encryptions: int | None = None,
        auto_rotate_period: float | None = None,
    ) -> KeyInfo:
        if not valid_key_name(name):
            raise InvalidRequest(f"invalid key name {name!r}")
        if isinstance(algorithm, Algorithm):
            algorithm = key_type_of(algorithm)
        if not isinstance(algorithm, KeyType):
            raise InvalidRequest(f"unknown algorithm {algorithm!r}")
        # Made before the transaction: an RSA key takes a while, and holds no lock meanwhile.
        material = fresh_material(algorithm)
        # As SQLite hands them back (exportable as 0 or 1), so the MAC verifies on reading.
        row = (name, algorithm.column, int(exportable), 1, time.time(), 0, 0)
        with self._transaction() as db:
            if held(self._tables, db, name) or not self._tables.insert_key(db, row):
                raise KeyExists(f"key {name!r} already exists")
            self._tables.add_version(db, name, 1, algorithm, exportable, material)
            if max_encryptions is not None or auto_rotate_period is not None:
                info = self._tables.locked_key(db, name)
                self._tables.write_limits(db, limits_row(info, max_encryptions, auto_rotate_period))
            info = self._tables.locked_key(db, name)
        self._changed("key_create", key=name, version=1)
        return info

    def _made(self, name: str) -> tuple[KeyType, bytes] | None:
        """A next version's material, made before the transaction that writes it (an RSA key
        takes a while, and no lock is held meanwhile); None if the key cannot be read now (the
        transaction then finds why)."""
        try:
            kind = self.get_key(name).key_type
        except KeyStoreError:
            return None
        return kind, fresh_material(kind)

    def rotate_key(self, name: str) -> KeyInfo:
        made = self._made(name)
        with self._transaction() as db:
            # Inside the transaction no other writer can take the same next version.
            info = self._tables.locked_key(db, name)
            in_use(info)
            if info.latest >= MAX_VERSION:
                raise InvalidRequest(f"key {name!r} has no version left")
            rotatable(info)
            # Wrapped under the creation flag, as every version before it (_integrity).
            kind, material = _material(info, made)
            self._tables.add_version(
                db, name, info.latest + 1, kind, info.created_exportable, material
            )
            if info.imported:  # as Transit: once rotated here, a key like any other
                self._tables.write_key_row(db, name, imported=False)
            info = self._tables.locked_key(db, name)
        self._changed("key_rotate", key=name, version=info.latest)
        return info

    def rotate_if_latest(self, name: str, version: int) -> KeyInfo:
        made = self._made(name)
        with self._transaction() as db:
            info = self._tables.locked_key(db, name)
            if info.latest != version or info.soft_deleted:  # a soft-deleted key rests
                return info
            rotatable(info)
            kind, material = _material(info, made)
            self._tables.add_version(
                db, name, info.latest + 1, kind, info.created_exportable, material
            )
            if info.imported:
                self._tables.write_key_row(db, name, imported=False)
            info = self._tables.locked_key(db, name)
        self._changed("key_rotate", key=name, version=info.latest, mode="automatic")
        log.warning(
            "key %r rotated automatically to version %d",
            name,
            info.latest,
            extra={"fields": {"key": name, "version": info.latest}},
        )
        return info

    def set_limits(
        self, name: str, max_encryptions: int | None = None, auto_rotate_period: float | None = None
    ) -> KeyInfo:
        with self._transaction() as db:
            info = in_use(self._tables.locked_key(db, name))
            self._tables.write_limits(db, limits_row(info, max_encryptions, auto_rotate_period))
            info = self._tables.locked_key(db, name)
        self._changed("key_config", key=name)
        return info

    def set_min_decryption_version(
        self, name: str, version: int, allow_lowering: bool = False
    ) -> KeyInfo:
        return self.configure(name, version, allow_lowering=allow_lowering)

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
        with self._transaction() as db:
            before = info = in_use(self._tables.locked_key(db, name))
            old = info.min_decryption_version
            least = old if min_decryption_version is None else min_decryption_version
            if (
                isinstance(least, bool)
                or not isinstance(least, int)
                or not 1 <= least <= info.latest
            ):
                raise InvalidRequest(
                    f"min_decryption_version must be between 1 and {info.latest}, not {least}"
                )
            if least < old and not allow_lowering:
                raise InvalidRequest(
                    f"lowering min_decryption_version of key {name!r} from {old} to {least}"
                    " makes retired versions decryptable again; it must be asked for"
                    " explicitly (allow_lowering)"
                )
            if least < info.min_available_version:  # trimmed versions never come back
                raise InvalidRequest(
                    "min decryption version should not be less then min available version"
                )
            row = policy_row(
                info, least, min_encryption_version, deletion_allowed, exportable, plaintext_backup
            )
            if least != old:
                self._tables.write_min_decryption(db, name, least)
            if row != stored_policy(info):
                self._tables.write_policy(db, row)
            info = self._tables.locked_key(db, name)
        _log_changes(before, info)
        self._changed("key_config", key=name)
        return info

    def restore_key(self, key: RestoredKey, force: bool = False) -> KeyInfo:
        name, alg = key.name, key.algorithm
        if not valid_key_name(name):
            raise InvalidRequest(f"invalid key name {name!r}")
        numbers = [version for version, _ in key.material]
        if not 1 <= len(numbers) <= MAX_VERSION or numbers != list(range(1, len(numbers) + 1)):
            raise InvalidRequest("the backup's versions must be numbered from 1 up, each once")
        if any(len(material) != alg.spec.key_len for _, material in key.material):
            raise InvalidRequest(f"the backup holds material of the wrong length for {alg.value}")
        with self._transaction() as db:
            try:
                old: KeyInfo | None = self._tables.locked_key(db, name)
            except KeyNotFound:
                old = None
            if old is not None and not force:
                raise KeyExists(f"key {name!r} already exists")
            if old is not None and not old.deletion_allowed:
                raise DeletionNotAllowed(f"deletion is not allowed for key {name!r}")
            if old is not None:
                self._tables.delete_key(db, name)
            now = time.time()
            if not self._tables.insert_key(db, (name, alg.value, 1, 1, now, 0, 0)):
                raise KeyExists(f"key {name!r} already exists")
            for version, material in key.material:
                self._tables.add_version(db, name, version, alg, True, material)
            info = self._tables.locked_key(db, name)
            least = key.min_decryption_version
            if isinstance(least, bool) or not 1 <= least <= info.latest:
                raise InvalidRequest(
                    f"min_decryption_version must be between 1 and {info.latest}, not {least}"
                )
            self._tables.write_min_decryption(db, name, least)
            rules = (key.min_encryption_version, key.deletion_allowed, None)
            row = policy_row(info, least, *rules, key.allow_plaintext_backup)
            self._tables.write_policy(db, row)
            if key.auto_rotate_period:
                self._tables.write_limits(db, limits_row(info, None, key.auto_rotate_period))
            info = self._tables.locked_key(db, name)
        if old is not None:
            self._changed("key_delete", key=name, version=old.latest)
        self._changed("key_restore", key=name, version=info.latest)
        return info

    def delete_key(self, name: str) -> KeyInfo:
        with self._transaction() as db:
            # Checked: a key whose rows fail their MAC (a forged deletion_allowed) is refused.
            info = self._tables.locked_key(db, name)
            if not info.deletion_allowed:
                raise DeletionNotAllowed(f"deletion is not allowed for key {name!r}")
            self._tables.delete_key(db, name)
        self._changed("key_delete", key=name, version=info.latest)
        log.warning(
            "key %r deleted with its %d versions (deletion_allowed was set)",
            name,
            len(info.versions),
            extra={"fields": {"key": name, "versions": len(info.versions)}},
        )
        return info

    # -- tokens

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
        if isinstance(scopes, str) or not scopes or not all(map(valid_scope, scopes)):
            raise InvalidRequest(f"a token needs one or more valid scopes, not {scopes!r}")
        if secret is not None and not valid_secret(secret):
            raise InvalidRequest("a given token must be 43 or more URL-safe base64 characters")
        life = _lifetimes.creation(self.lifetimes, ttl, explicit_max_ttl, renewable, expires)
        uses = _lifetimes.seconds(num_uses, "num_uses") if num_uses else 0
        if not isinstance(parent, str) or (parent and not valid_accessor(parent)):
            raise InvalidRequest(f"parent must be a token's accessor, not {parent!r}")
        token_id = "tok_" + secrets.token_hex(8)
        secret = secret if secret is not None else secrets.token_urlsafe(32)
        with self._transaction() as db:
            now = time.time()
            if parent and not orphan:
                # A child lives within its parent: refused once the parent is gone, and never
                # past its expiry (read in this transaction: a revocation of the parent either
                # came first, or comes after and takes this child with it).
                above = token_info(self._tables.checked_token(db, parent))
                if above.revoked or above.expired(now):
                    raise TokenNotFound(f"parent token {parent!r} is revoked or expired")
                explicit = _lifetimes.within(explicit_max_ttl, above, now)
                life = _lifetimes.creation(self.lifetimes, ttl, explicit, renewable, expires)
            row = self._token_row(token_id, secret, scopes, label, now, life, uses, parent, orphan)
            self._tables.insert_token(db, row)
            self._tables.sweep_tokens(db, now - SWEEP_AFTER)
        info = token_info(row)
        family = {"parent": info.parent, "orphan": info.orphan} if info.parent else {}
        self._changed(
            "token_create", target_accessor=info.id, target_label=label, **_life(info), **family
        )
        return info, secret

    @staticmethod
    def _token_row(
        token_id: str,
        secret: str,
        scopes: list[str],
        label: str,
        now: float,
        life: _lifetimes.Creation,
        uses: int,
        parent: str,
        orphan: bool,
    ) -> tuple[object, ...]:
        # As SQLite hands them back (flags 0 or 1, expire_at a float), so the MAC verifies.
        return (
            token_id,
            digest(secret),
            " ".join(scopes),
            label,
            now,
            None,
            life.ttl,
            now + life.ttl if life.ttl else None,
            life.explicit_max_ttl,
            int(life.renewable),
            uses,
            0,
            parent,
            int(orphan or not parent),
        )

    def creation_warnings(
        self,
        ttl: int | None,
        explicit_max_ttl: int = 0,
        renewable: bool = True,
        parent: TokenInfo | None = None,
    ) -> tuple[str, ...]:
        """Vault's warnings for a token created with this lifetime now (a TTL capped); what
        ``create_token`` will decide, for a route that answers with them."""
        if parent is not None:
            explicit_max_ttl = _lifetimes.within(explicit_max_ttl, parent, time.time())
        return _lifetimes.creation(self.lifetimes, ttl, explicit_max_ttl, renewable).warnings

    def get_token(self, token_id: str) -> TokenInfo:
        with self._connection() as db:
            try:
                return token_info(self._tables.checked_token(db, token_id))
            except KeyStoreCorrupt:
                raise TokenNotFound(f"token {token_id!r} not found") from None

    def revoke_token(self, token_id: str) -> TokenInfo:
        with self._transaction() as db:
            rows = self._tables.revoke_token(db, token_id)
        info = token_info(rows[0])
        self._changed("token_revoke", target_accessor=info.id, target_label=info.label)
        for child in map(token_info, rows[1:]):
            self._changed(
                "token_revoke",
                target_accessor=child.id,
                target_label=child.label,
                revoked_with=info.id,
            )
        return info

    def renew_token(self, token_id: str, increment: int | None = None) -> Renewal:
        with self._transaction() as db:
            row = self._tables.checked_token(db, token_id)
            now = time.time()
            end, ttl, warnings = _lifetimes.renewal(token_info(row), self.lifetimes, increment, now)
            info = token_info(self._tables.update_token(db, row, expire_at=end))
        self._changed("token_renew", target_accessor=info.id, target_label=info.label, ttl=ttl)
        return Renewal(info, warnings)

    def use_token(self, token_id: str) -> TokenInfo:
        # Not a change the caches must hear of: a token with uses always comes here, to the
        # row, and the row decides.
        with self._transaction(changes=False) as db:
            row = self._tables.checked_token(db, token_id)
            info = token_info(row)
            if not info.num_uses:
                return info
            now = time.time()
            if info.revoked:
                raise TokenNotFound(f"token {token_id!r} is revoked")
            if info.expired(now):
                raise TokenExpired(f"token {token_id!r} has expired or is used up")
            uses = info.uses + 1
            # The last use ends it: swept like an expired token.
            end = now if uses >= info.num_uses else None
            return token_info(self._tables.update_token(db, row, uses=uses, expire_at=end))

    def sweep_tokens(self, now: float | None = None) -> int:
        before = (time.time() if now is None else now) - SWEEP_AFTER
        with self._transaction() as db:
            swept = self._tables.sweep_tokens(db, before)
        if swept:
            log.info(
                "swept %d tokens expired more than %d s ago",
                swept,
                SWEEP_AFTER,
                extra={"fields": {"tokens": swept}},
            )
        return swept

    def _upgrade_token_macs(self) -> None:
        """At open: the token rows of a keystore made before lifetimes MAC'd again, once
        (``_token_lifetimes``). A read when done already, which is every open but one."""
        with self._connection() as db:
            if _token_lifetimes.done(db, self._tables):
                return
        with self._transaction() as db:
            done, failed = _token_lifetimes.upgrade(db, self._tables)
        if done or failed:
            log.warning(
                "keystore tokens given lifetimes: %d token rows MAC'd again over their lifetime"
                " columns (no expiry, as before); %d rows that fail their check left refused;"
                " older sealflow releases refuse every token of this keystore now",
                done,
                len(failed),
                extra={"fields": {"tokens": done, "refused": failed}},
            )

    def _grant_root_export(self) -> None:
        """At open: the scopes added since a keystore was made to its root token, once each
        (``_root_scopes``). A read when done already, which is every open but one."""
        with self._connection() as db:
            if _root_scopes.granted(db, self._tables):
                return
        with self._transaction() as db:
            changed = _root_scopes.grant(db, self._tables)
        for token_id, added in changed:
            log.warning(
                "root token %s given %s (the root token has every scope)",
                token_id,
                added,
                extra={"fields": {"token": token_id}},
            )

    # -- usage (``_usage_rows``): no change to what the caches hold

    def reserve_usage(self, slot: Slot, want: int, limit: int, nbytes: int = 0) -> tuple[int, int]:
        with self._transaction(changes=False) as db:
            return _usage_rows.reserve(db, self._tables.sql, slot, want, limit, nbytes)

    def release_usage(self, slot: Slot, count: int, nbytes: int = 0) -> None:
        with self._connection() as db:
            _usage_rows.release(db, self._tables.sql, slot, count, nbytes)

    def reserved(self, slots: list[Slot]) -> dict[Slot, int]:
        if not slots:
            return {}
        with self._connection() as db:
            return _usage_rows.reserved(db, self._tables.sql, slots)

    def usage(self, name: str) -> dict[int, VersionUsage]:
        with self._connection() as db:
            return _usage_rows.usage(db, self._tables.sql, name)


def _material(info: KeyInfo, made: tuple[KeyType, bytes] | None) -> tuple[KeyType, bytes]:
    """The material made for a rotation if the key is still of the type it was made for (a
    key deleted and made again meanwhile may not be), else fresh material now."""
    if made is not None and made[0] == info.key_type:
        return made
    return info.key_type, fresh_material(info.key_type)


def _life(token: TokenInfo) -> dict[str, object]:
    """A new token's lifetime for its change record: what it has of one (a token that never
    expires and has no use limit, as every token before lifetimes, adds nothing)."""
    fields: dict[str, object] = {}
    if token.ttl:
        fields.update(
            ttl=token.ttl, explicit_max_ttl=token.explicit_max_ttl, renewable=token.renewable
        )
    if token.num_uses:
        fields["num_uses"] = token.num_uses
    return fields


def _log_changes(before: KeyInfo, after: KeyInfo) -> None:
    """One line per rule changed; a lowering of min_decryption_version as a warning (retired
    versions decrypt again), as are allowing deletion, export and plaintext backup."""
    flags = ("deletion_allowed", "exportable", "allow_plaintext_backup")
    for field in ("min_decryption_version", "min_encryption_version", *flags):
        old, new = getattr(before, field), getattr(after, field)
        if old == new:
            continue
        louder = (field == "min_decryption_version" and new < old) or (field in flags and new)
        log.log(
            logging.WARNING if louder else logging.INFO,
            "%s of key %r %s from %s to %s",
            field,
            after.name,
            "lowered" if louder and field == "min_decryption_version" else "changed",
            old,
            new,
            extra={"fields": {"key": after.name, "setting": field, "old": old, "new": new}},
        )
