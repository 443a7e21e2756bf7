"""``sealflow keystore backup`` and ``restore``: a keystore's snapshot to a sealed file, and back
into an empty SQLite file or PostgreSQL database (either, whichever store it came from).

The file is written whole or not at all: to a temporary file in the same directory, created
mode 0600, then linked into place (refusing a file that is there) or, with ``force``, renamed
over it. It only ever holds the sealed snapshot (``_backup_file``).
"""

from __future__ import annotations

import os
import tempfile
from contextlib import closing
from pathlib import Path

from ._backup_file import open_backup, seal_backup
from ._base import KeyStore
from ._postgres import PostgresKeyStore
from ._snapshot import Snapshot
from ._sqlite import SQLiteKeyStore
from .errors import BackupRefused, KeyStoreUnavailable


def backup(
    store: KeyStore, secret: bytes, path: Path, force: bool = False, record: bytes | None = None
) -> Snapshot:
    """Seal the store's snapshot into ``path`` under the keystore's stable secret (with its
    sealed key ``record``, format 2); the snapshot, for a report."""
    if os.path.lexists(path) and not force:
        raise BackupRefused(f"{path} exists: give --force to replace it")
    snapshot = store.snapshot()
    _write_private(path, seal_backup(secret, snapshot, record), force)
    return snapshot


def read_backup_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise KeyStoreUnavailable(f"cannot read {path}: {exc.strerror}") from None


def read_backup(path: Path, secret: bytes) -> Snapshot:
    """The snapshot sealed in ``path``, checked whole (BackupRefused) before anything is used."""
    return open_backup(secret, read_backup_file(path), str(path))


def restore_sqlite(path: Path, master_key: bytes, snapshot: Snapshot, replace: bool) -> None:
    """Into a new keystore file at ``path``, made whole in one step (``_sqlite_file.create``),
    or, with ``replace``, in place of everything in the file that is there."""
    if not os.path.lexists(path):
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        made = SQLiteKeyStore.create_new(path, master_key, lambda new: new.restore(snapshot))
        if made:
            return
    with closing(SQLiteKeyStore(path, master_key)) as store:
        store.restore(snapshot, replace)


def restore_postgres(url: str, master_key: bytes, snapshot: Snapshot, replace: bool) -> None:
    """Into the database at ``url``: its schema made if it has none, then the rows."""
    with closing(PostgresKeyStore(url, master_key, watch=False)) as store:
        store.restore(snapshot, replace)


def _write_private(path: Path, data: bytes, force: bool) -> None:
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".new", dir=path.parent)
    except OSError as exc:
        raise KeyStoreUnavailable(f"cannot write {path}: {exc.strerror}") from None
    tmp = Path(name)  # mkstemp creates it 0600: never readable by others, not for a moment
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if force:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # never replaces a file that appeared meanwhile
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except FileExistsError:
        raise BackupRefused(f"{path} exists: give --force to replace it") from None
    except OSError as exc:
        raise KeyStoreUnavailable(f"cannot write {path}: {exc.strerror}") from None
    finally:
        tmp.unlink(missing_ok=True)
