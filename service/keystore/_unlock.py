"""The keys of the keystore the settings name: its sealed key record read, and unsealed by the
configured master-key provider (``_seals``, ``_kek``), before the store opens."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sealflow.service.config import Settings

from . import _kek, _kek_rows
from ._kek import NEXT_META, RECORD_META, Keys, Record
from ._key_seal import KeySeal
from ._postgres import redact
from ._seals import HELD_KEYS, seal_for
from .errors import KeyStoreUnavailable


@dataclass(frozen=True, slots=True)
class Unlocked:
    """The keys, the record they came from, and whether the keystore still lacks the record
    (made before providers: written once the store has opened with the keys)."""

    keys: Keys
    record: Record
    pending: bool


def unlock(settings: Settings, url: str | None) -> Unlocked:
    """The keys of the keystore at ``url`` (None: the SQLite file in the data dir), or
    KeyStoreUnavailable with one line saying why the provider cannot give them."""
    name = settings.master_key_provider
    where = str(settings.keystore_path) if url is None else redact(url)
    if url is None:
        exists, value = _kek_rows.read_sqlite(settings.keystore_path)
    else:
        exists, value = _kek_rows.read_postgres(url, where)
    if value is not None:
        record = Record.decode(value, where)
        why = _kek.mismatch(record, name)
        if why is not None:
            raise KeyStoreUnavailable(f"keystore {where}: {why}")
        return Unlocked(_kek.unseal(seal_for(settings), name, record), record, False)
    if not exists and name not in HELD_KEYS:
        raise KeyStoreUnavailable(f"no keystore at {where} (`sealflow serve` creates one)")
    seal = seal_for(settings)
    keys = Keys.of_master_key(_kek.held_key(seal, name, where))
    record = _kek.seal(seal, name, keys)
    _kek.remember(seal, name, record, keys)
    return Unlocked(keys, record, True)


def new_keys(settings: Settings) -> tuple[Keys, dict[str, bytes]]:
    """Keys for a keystore about to be made, and the metadata row that holds them sealed: the
    master key itself under ``file``/``env`` (``_kek``), else a random KEK and secret."""
    name = settings.master_key_provider
    seal = seal_for(settings)
    held = name in HELD_KEYS
    keys = Keys.of_master_key(_kek.held_key(seal, name, "new")) if held else Keys.new()
    record = _kek.seal(seal, name, keys)
    _kek.remember(seal, name, record, keys)
    return keys, {RECORD_META: record.encode()}


def finish(settings: Settings, url: str | None, unlocked: Unlocked) -> None:
    """Write the record of a keystore made before providers, once its keys opened it."""
    if not unlocked.pending:
        return
    value = unlocked.record.encode()
    if url is None:
        _kek_rows.write_sqlite(settings.keystore_path, value)
    else:
        _kek_rows.write_postgres(url, redact(url), value)


def backup_keys(settings: Settings, value: bytes | None, where: str) -> Keys:
    """The keys a backup file was sealed under: its record unsealed by the configured provider,
    or, for a file of format 1, the master key (the keystore's secret before providers)."""
    name = settings.master_key_provider
    if value is None:
        return Keys.of_master_key(_kek.held_key(seal_for(settings), name, where))
    record = Record.decode(value, where)
    why = _kek.mismatch(record, name)
    if why is not None:
        raise KeyStoreUnavailable(f"backup {where}: {why}")
    return _kek.unseal(seal_for(settings), name, record)


def migration_keys(settings: Settings, source: Path, held: Callable[[], bytes]) -> Migration:
    """The KEK of the SQLite keystore at ``source`` and the record to give its PostgreSQL copy:
    a keystore sealed by a key file (or made before providers) opens with ``held()``, its own
    master key, as before; one sealed by another provider with that provider."""
    if _kek_rows.read_sqlite(source, NEXT_META)[1] is not None:
        # Its rows are under two KEKs: run rotate-master again to finish, then migrate.
        raise KeyStoreUnavailable(
            f"keystore {source}: a rotate-master is under way; finish it first (run it again)"
        )
    _, value = _kek_rows.read_sqlite(source)
    if value is None:
        return Migration(held(), {})
    record = Record.decode(value, str(source))
    if record.provider in HELD_KEYS:
        keys = _kek.unseal(KeySeal(record.provider, held()), record.provider, record)
    else:
        keys = backup_keys(settings, record.encode(), str(source))
    return Migration(keys.kek, {RECORD_META: record.encode()})


@dataclass(frozen=True, slots=True)
class Migration:
    kek: bytes = field(repr=False)
    meta: dict[str, bytes]
