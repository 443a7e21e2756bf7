"""The write sequences both stores share: a rotation, a rotation only while a version is still
the latest (automatic rotation), new limits, a key's version rules and deletion flag, a
deletion. Each store supplies its transaction, its locked
read of a key and its row writes (the SQL dialects differ); the order of checks and writes is
written here once, so the two stores cannot drift apart."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from typing import Generic, TypeVar

from sealflow.engine import Algorithm

from ._base import KeyInfo
from ._rows import MAX_VERSION, limits_row, policy_row
from .errors import DeletionNotAllowed, InvalidRequest

log = logging.getLogger("sealflow.keystore")
Db = TypeVar("Db")


class VersionWrites(ABC, Generic[Db]):
    @abstractmethod
    def _transaction(self) -> AbstractContextManager[Db]:
        """One write transaction, the only writer of what it locks (SQLite: BEGIN IMMEDIATE;
        PostgreSQL: the changes row and the key's row locks)."""

    @abstractmethod
    def _locked_key(self, db: Db, name: str) -> KeyInfo: ...

    @abstractmethod
    def _add_version(
        self, db: Db, name: str, version: int, alg: Algorithm, exportable: bool
    ) -> None: ...

    @abstractmethod
    def _write_limits(self, db: Db, row: tuple[str, int, float]) -> None: ...

    @abstractmethod
    def _write_min_decryption(self, db: Db, name: str, version: int) -> None:
        """The key's row with a new min_decryption_version, MAC'd again (the row was checked
        by ``_locked_key``: a refused row is never re-signed)."""

    @abstractmethod
    def _write_policy(self, db: Db, row: tuple[str, int, int]) -> None: ...

    @abstractmethod
    def _delete_rows(self, db: Db, name: str) -> None:
        """Every row of the key: usage, limits, policy, versions (the wrapped material), the
        key's own row."""

    def rotate_key(self, name: str) -> KeyInfo:
        with self._transaction() as db:
            # Inside the transaction no other writer can take the same next version.
            info = self._locked_key(db, name)
            if info.latest >= MAX_VERSION:
                raise InvalidRequest(f"key {name!r} has no version left")
            self._add_version(db, name, info.latest + 1, info.algorithm, info.exportable)
            return self._locked_key(db, name)

    def rotate_if_latest(self, name: str, version: int) -> KeyInfo:
        with self._transaction() as db:
            info = self._locked_key(db, name)
            if info.latest != version:
                return info
            self._add_version(db, name, info.latest + 1, info.algorithm, info.exportable)
            info = self._locked_key(db, name)
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
            info = self._locked_key(db, name)
            self._write_limits(db, limits_row(info, max_encryptions, auto_rotate_period))
            return self._locked_key(db, name)

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
    ) -> KeyInfo:
        with self._transaction() as db:
            before = info = self._locked_key(db, name)
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
            row = policy_row(info, least, min_encryption_version, deletion_allowed)
            if least != old:
                self._write_min_decryption(db, name, least)
            if row != (name, info.min_encryption_version, int(info.deletion_allowed)):
                self._write_policy(db, row)
            info = self._locked_key(db, name)
        _log_changes(before, info)
        return info

    def delete_key(self, name: str) -> KeyInfo:
        with self._transaction() as db:
            # Checked: a key whose rows fail their MAC (a forged deletion_allowed) is refused.
            info = self._locked_key(db, name)
            if not info.deletion_allowed:
                raise DeletionNotAllowed(f"deletion is not allowed for key {name!r}")
            self._delete_rows(db, name)
        log.warning(
            "key %r deleted with its %d versions (deletion_allowed was set)",
            name,
            len(info.versions),
            extra={"fields": {"key": name, "versions": len(info.versions)}},
        )
        return info


def _log_changes(before: KeyInfo, after: KeyInfo) -> None:
    """One line per rule changed; a lowering of min_decryption_version as a warning (retired
    versions decrypt again), as is allowing deletion."""
    for field in ("min_decryption_version", "min_encryption_version", "deletion_allowed"):
        old, new = getattr(before, field), getattr(after, field)
        if old == new:
            continue
        louder = (field == "min_decryption_version" and new < old) or (
            field == "deletion_allowed" and new
        )
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
