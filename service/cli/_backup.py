"""``sealflow keystore backup FILE`` and ``sealflow keystore restore FILE``: the keystore the
settings name (as ``sealflow keys``) to a sealed file, and back (docs/OPERATIONS.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sealflow.service.audit import Auditor, open_auditor
from sealflow.service.config import Settings
from sealflow.service.keystore import (
    KeyStoreUnavailable,
    Snapshot,
    audit_table,
    backup_keys,
    backup_keystore,
    backup_record,
    describe,
    keystore_keys,
    keystore_record,
    keystore_url,
    open_backup,
    open_store,
    read_backup_file,
    restore_postgres,
    restore_sqlite,
)

from ._trail import recording, sinks


def _summary(snapshot: Snapshot) -> str:
    keys, versions, tokens, roles = (
        snapshot.count(table) for table in ("keys", "key_versions", "tokens", "approle_roles")
    )
    return (
        f"keystore {snapshot.keystore_id.hex()}: {keys} keys ({versions} versions),"
        f" {tokens} tokens, {roles} AppRole roles"
    )


def backup(args: argparse.Namespace) -> int:
    settings = Settings(**args.settings)
    if keystore_url(settings) is None and not settings.keystore_path.exists():
        raise KeyStoreUnavailable(f"no keystore at {settings.keystore_path}")
    store = open_store(settings, watch=False)
    try:
        # Before the backup: a trail that cannot be opened stops the command first.
        keys = keystore_keys(settings)  # unsealed by open_store: from memory
        auditor = open_auditor(settings, keys.secret, audit_table(settings))
        snapshot = backup_keystore(
            store, keys.secret, Path(args.file), args.force, keystore_record(settings)
        )
    finally:
        store.close()
    where = describe(settings)
    print(f"backed up {_summary(snapshot)} from {where} to {args.file}", file=sys.stderr)
    return _recorded(settings, auditor, "keystore_backup")


def restore(args: argparse.Namespace) -> int:
    settings = Settings(**args.settings)
    data = read_backup_file(Path(args.file))
    # The keys it was sealed under: the KEK its rows are wrapped under, the secret it opens with.
    keys = backup_keys(settings, backup_record(data, args.file), args.file)
    # Checked whole before the target is touched: a changed byte restores nothing.
    snapshot = open_backup(keys.secret, data, args.file)
    url = keystore_url(settings)
    if url is None:
        restore_sqlite(settings.keystore_path, keys.kek, snapshot, args.replace_existing)
    else:
        restore_postgres(url, keys.kek, snapshot, args.replace_existing)
    print(
        f"restored {_summary(snapshot)} from {args.file} into {describe(settings)}; every row"
        " read back and compared",
        file=sys.stderr,
    )
    # After the restore: a new PostgreSQL keystore has its audit table only now.
    auditor = open_auditor(settings, keys.secret, audit_table(settings))
    return _recorded(settings, auditor, "keystore_restore")


def _recorded(settings: Settings, auditor: Auditor | None, operation: str) -> int:
    """The command's change record (origin cli) on the trail the settings set, if any; 1, with
    a message, if it could not be written (what it records is done)."""
    if auditor is None:
        return 0
    recording(auditor)(operation, {})
    if auditor.close():
        return 0
    print(
        f"sealflow: done, but its audit record could not be written to the audit trail"
        f" ({sinks(settings)})",
        file=sys.stderr,
    )
    return 1


def add_commands(store: Any, common: argparse.ArgumentParser) -> None:
    save = store.add_parser(
        "backup",
        parents=[common],
        help="save a consistent copy of the whole keystore, sealed under its keys (the master"
        " key provider unseals them), to a new file (mode 0600); safe while servers run",
    )
    save.add_argument("file", metavar="FILE")
    save.add_argument("--force", action="store_true", help="replace FILE if it exists")
    save.set_defaults(func=backup)
    load = store.add_parser(
        "restore",
        parents=[common],
        help="put a backup into a new, empty keystore (SQLite or PostgreSQL, whichever it came"
        " from); refuses a changed file",
    )
    load.add_argument("file", metavar="FILE")
    load.add_argument(
        "--replace-existing",
        action="store_true",
        help="delete every key, token and role of a keystore that is not empty and put the"
        " backup's in their place",
    )
    load.set_defaults(func=restore)
