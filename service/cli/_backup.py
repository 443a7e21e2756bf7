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
    backup_keystore,
    describe,
    keystore_url,
    master_key,
    open_store,
    read_backup,
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
        auditor = open_auditor(settings, master_key(settings), audit_table(settings))
        snapshot = backup_keystore(store, master_key(settings), Path(args.file), args.force)
    finally:
        store.close()
    where = describe(settings)
    print(f"backed up {_summary(snapshot)} from {where} to {args.file}", file=sys.stderr)
    return _recorded(settings, auditor, "keystore_backup")


def restore(args: argparse.Namespace) -> int:
    settings = Settings(**args.settings)
    master = master_key(settings)
    # Checked whole before the target is touched: a changed byte restores nothing.
    snapshot = read_backup(Path(args.file), master)
    url = keystore_url(settings)
    if url is None:
        restore_sqlite(settings.keystore_path, master, snapshot, args.replace_existing)
    else:
        restore_postgres(url, master, snapshot, args.replace_existing)
    print(
        f"restored {_summary(snapshot)} from {args.file} into {describe(settings)}; every row"
        " read back and compared",
        file=sys.stderr,
    )
    # After the restore: a new PostgreSQL keystore has its audit table only now.
    auditor = open_auditor(settings, master, audit_table(settings))
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
        help="save a consistent copy of the whole keystore, sealed under the master key, to a"
        " new file (mode 0600); safe while servers run",
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
