"""Transit's key lifecycle, written once for every store (``Writes`` inherits this): ``trim_key``
removes the versions below a number, the one way a version row goes while its key lives, and a
soft deletion freezes a key (every use refused, ``_rows.usable``) until it is restored, with
every version it had.

Both live in the key's policy row, MAC'd (``_integrity.POLICY_LIFECYCLE_ROW``): neither a trim
nor a soft deletion can be undone, nor ``min_decryption_version`` lowered, without the master
key. Each is told to ``on_change`` (the audit trail) by key and versions, never material.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from ._base import KeyInfo
from ._rows import stored_policy
from ._store_access import StoreAccess
from ._tables import Tables
from .errors import SOFT_DELETED, InvalidRequest, KeySoftDeleted

log = logging.getLogger("sealflow.keystore")


def in_use(info: KeyInfo) -> KeyInfo:
    """The key, unless it is soft-deleted (KeySoftDeleted, OpenBao's words)."""
    if info.soft_deleted:
        raise KeySoftDeleted(SOFT_DELETED)
    return info


def trim_refusal(info: KeyInfo, wanted: int) -> str | None:
    """Why OpenBao refuses to trim ``info`` to ``wanted``, in its words and order, or None."""
    rules = (
        (wanted < info.min_available_version, "cannot be decremented"),
        (
            info.min_encryption_version == 0,
            "cannot be set when minimum encryption version is not set",
        ),
        (
            info.min_decryption_version == 0,
            "cannot be set when minimum decryption version is not set",
        ),
        # OpenBao's spelling, "minmum", kept: clients may match it.
        (wanted > info.min_encryption_version, "cannot be greater than minmum encryption version"),
        (wanted > info.min_decryption_version, "cannot be greater than minimum decryption version"),
        (wanted < 0, "cannot be negative"),
        (wanted == 0, "should be positive"),
    )
    for refused, words in rules:
        if refused:
            return f"minimum available version {words}"
    return None


class Lifecycle(StoreAccess):
    _tables: Tables

    def trim_key(self, name: str, min_available_version: int) -> KeyInfo:
        """Remove every version below ``min_available_version``, with its material and usage,
        and record the number, in one transaction. KeyNotFound; KeySoftDeleted; InvalidRequest
        in OpenBao's words (``trim_refusal``): both minimum versions set first, and the number
        at most each of them, never lower than before."""
        if isinstance(min_available_version, bool) or not isinstance(min_available_version, int):
            raise InvalidRequest(
                f"min_available_version must be an integer, not {min_available_version!r}"
            )
        with self._transaction() as db:
            info = in_use(self._tables.locked_key(db, name))
            refusal = trim_refusal(info, min_available_version)
            if refusal is not None:
                raise InvalidRequest(refusal)
            dropped = [v.version for v in info.versions if v.version < min_available_version]
            self._tables.trim(db, name, min_available_version)
            row = stored_policy(replace(info, min_available_version=min_available_version))
            self._tables.write_policy(db, row)
            info = self._tables.locked_key(db, name)
        # As the audit schema names versions: one as ``version``, several as ``versions``.
        gone: dict[str, object] = {}
        if len(dropped) == 1:
            gone["version"] = dropped[0]
        elif dropped:
            gone["versions"] = dropped
        self._changed("key_trim", key=name, **gone)
        if dropped:
            log.warning(
                "key %r trimmed: versions %s removed with their material",
                name,
                dropped,
                extra={"fields": {"key": name, "versions": dropped}},
            )
        return info

    def soft_delete_key(self, name: str) -> tuple[KeyInfo, bool]:
        """Mark the key soft-deleted (one transaction); the key, and whether it was already
        (then nothing is written). KeyNotFound."""
        return self._mark(name, True, "key_soft_delete")

    def undo_soft_delete(self, name: str) -> tuple[KeyInfo, bool]:
        """Lift the key's soft deletion (one transaction); the key, and whether it was not
        soft-deleted (then nothing is written). KeyNotFound."""
        return self._mark(name, False, "key_soft_delete_restore")

    def _mark(self, name: str, deleted: bool, operation: str) -> tuple[KeyInfo, bool]:
        with self._transaction() as db:
            info = self._tables.locked_key(db, name)
            if info.soft_deleted == deleted:
                return info, True
            self._tables.write_policy(db, stored_policy(replace(info, soft_deleted=deleted)))
            info = self._tables.locked_key(db, name)
        self._changed(operation, key=name)
        log.warning(
            "key %r %s",
            name,
            "soft-deleted: every use refused until restored" if deleted else "restored",
            extra={"fields": {"key": name, "soft_deleted": deleted}},
        )
        return info, False
