"""What every part of the keystore's writes (``_writes.Writes`` and the mixins it is made of:
imports, lifecycle, public keys, AppRole, certificate roles) asks of the store it is mixed into:
its connections and its change hook, declared once."""

from __future__ import annotations

from abc import abstractmethod
from contextlib import AbstractContextManager

from ._dialect import Connection


class StoreAccess:
    @abstractmethod
    def _transaction(self, changes: bool = True) -> AbstractContextManager[Connection]: ...

    @abstractmethod
    def _connection(self) -> AbstractContextManager[Connection]: ...

    @abstractmethod
    def _changed(self, operation: str, **fields: object) -> None: ...
