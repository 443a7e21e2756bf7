"""The write sequences both stores share: a rotation, a rotation only while a version is still
the latest (automatic rotation), new limits. Each store supplies its transaction, its locked
read of a key and its row writes (the SQL dialects differ); the order of checks and writes is
written here once, so the two stores cannot drift apart."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from typing import Generic, TypeVar

from sealflow.engine import Algorithm

from ._base import KeyInfo
from ._rows import MAX_VERSION, limits_row
from .errors import InvalidRequest

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
