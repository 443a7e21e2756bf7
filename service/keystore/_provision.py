"""Opening the keystore the settings name (and its audit table), and its first start: data dir,
master key, key ``default``, root token. The keys come from the master-key provider
(``_unlock``), one call per process."""

from __future__ import annotations

import logging
import os
import stat
import sys
import time
from contextlib import closing
from pathlib import Path

from sealflow.engine import Algorithm
from sealflow.service.config import Settings

from ._base import KeyStore, Lifetimes
from ._kek import Keys
from ._kek_rows import read_postgres
from ._masterkey import create_master_key_file, read_secret
from ._pg_audit import PostgresSink
from ._postgres import PostgresKeyStore, redact
from ._root_scopes import ROOT_SCOPES
from ._seals import HELD_KEYS
from ._sqlite import SQLiteKeyStore
from ._unlock import finish, new_keys, unlock
from .errors import KeyStoreUnavailable

log = logging.getLogger("sealflow.keystore")


def open_store(settings: Settings, max_staleness: float = 0.0, watch: bool = True) -> KeyStore:
    """The keystore the settings name, or KeyStoreUnavailable with a message saying what is wrong.

    ``max_staleness`` (SQLite): how many seconds old a cached read may be (0: check on every
    call). ``watch`` (PostgreSQL): keep the cache current from notifications (a server), or
    check for changes before every read (the CLI).
    """
    url = keystore_url(settings)
    unlocked = unlock(settings, url)
    store: KeyStore
    if url is None:
        store = SQLiteKeyStore(settings.keystore_path, unlocked.keys.kek, max_staleness)
    else:
        store = PostgresKeyStore(
            url, unlocked.keys.kek, watch=watch, poll_interval=settings.keystore_poll_interval
        )
    try:
        finish(settings, url, unlocked)
    except BaseException:
        store.close()
        raise
    store.lifetimes = lifetimes(settings)
    return store


def lifetimes(settings: Settings) -> Lifetimes:
    """The token lifetime rules the settings give (``SEALFLOW_TOKEN_DEFAULT_TTL``,
    ``SEALFLOW_TOKEN_MAX_TTL``)."""
    return Lifetimes(settings.token_default_ttl, settings.token_max_ttl)


def keystore_url(settings: Settings) -> str | None:
    """The PostgreSQL URL, or None for the SQLite keystore in the data dir."""
    if settings.keystore_url is not None:
        url = settings.keystore_url.get_secret_value().strip()
    elif settings.keystore_url_file is not None:
        path = settings.keystore_url_file
        url = read_secret(path, f"keystore URL file {path}").strip()
    else:
        return None
    if not url:
        return None
    if not url.startswith(("postgresql://", "postgres://")):
        raise KeyStoreUnavailable(
            "SEALFLOW_KEYSTORE_URL must be a postgresql:// URL (unset: SQLite in the data dir)"
        )
    return url


def audit_table(settings: Settings) -> PostgresSink | None:
    """The audit table's sink when ``SEALFLOW_AUDIT_POSTGRES`` is set, else None; open the
    keystore first (its schema makes the table). KeyStoreUnavailable, saying why, for an
    SQLite keystore or a role that may not insert into the table."""
    if not settings.audit_postgres:
        return None
    url = keystore_url(settings)
    if url is None:
        raise KeyStoreUnavailable(
            "SEALFLOW_AUDIT_POSTGRES=1 writes the audit trail to a table of the PostgreSQL"
            " keystore's database, and this keystore is SQLite (no SEALFLOW_KEYSTORE_URL):"
            " set the keystore URL, or use SEALFLOW_AUDIT_FILE"
        )
    return PostgresSink(url)


def describe(settings: Settings) -> str:
    """Where the keystore is, for logs: the SQLite path or the URL without its password."""
    url = keystore_url(settings)
    return str(settings.keystore_path) if url is None else redact(url)


def keystore_keys(settings: Settings) -> Keys:
    """The KEK and the stable secret of the keystore the settings name (the audit key and
    backups derive from the secret): from memory once this process has unsealed them."""
    return unlock(settings, keystore_url(settings)).keys


def keystore_record(settings: Settings) -> bytes:
    """The keystore's sealed key record, as a backup file carries it."""
    return unlock(settings, keystore_url(settings)).record.encode()


def _given_root_token(settings: Settings) -> str | None:
    if settings.root_token is not None:
        return settings.root_token.get_secret_value().strip()
    if settings.root_token_file is not None:
        path = settings.root_token_file
        return read_secret(path, f"root token file {path}").strip()
    return None


def prepare(settings: Settings) -> str | None:
    """Make the data dir usable; return the root token (to print) if this start made the keystore.

    A keystore is created only where there is no file, and created whole: with key
    ``default`` and the root token in it, or not at all. A root token given in the settings
    is installed instead, and not returned. A file that is there is never replaced, so
    emptying or deleting rows of a keystore cannot make a start hand out a new root token.

    Raises KeyStoreUnavailable (with a message saying what is wrong) if the
    keystore or the master key cannot be used.
    """
    url = keystore_url(settings)
    settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if url is not None:
        return _prepare_postgres(settings, url)
    path = settings.keystore_path
    if (
        settings.master_key_provider == "file"
        and settings.master_key is None
        and not settings.master_key_path.exists()
        # A keystore without its master key is an error to report, not a new start.
        and not os.path.lexists(path)
    ):
        create_master_key_file(settings.master_key_path)
        print(
            f"WARNING: dev mode: created the master key file {settings.master_key_path} "
            "(mode 0600). Anyone who reads it can unwrap every key. In production set "
            "SEALFLOW_MASTER_KEY or SEALFLOW_MASTER_KEY_FILE from a secret store.",
            file=sys.stderr,
        )
    _warn_if_open(settings)
    issued: list[str] = []
    if not os.path.lexists(path):
        given = _given_root_token(settings)
        keys, meta = new_keys(settings)

        def provision(store: SQLiteKeyStore) -> None:
            _provision(store, given, issued)

        # False: replicas starting together on a new shared volume raced, and another won.
        if not SQLiteKeyStore.create_new(path, keys.kek, provision, meta) or given:
            issued.clear()
    # Checks it (and upgrades schema 1, and seals the keys of a keystore made before providers).
    with closing(open_store(settings)) as store:
        _warn_if_no_token(store, str(path))
    return issued[0] if issued else None


def _prepare_postgres(settings: Settings, url: str) -> str | None:
    """The same for a PostgreSQL keystore: the schema and its first contents in one
    transaction, by whichever replica gets there first. The master key must be given:
    replicas on several hosts share it, so none may make one up."""
    env = settings.master_key.get_secret_value() if settings.master_key else ""
    from_file = settings.master_key_provider == "file"
    if from_file and not env.strip() and not settings.master_key_path.exists():
        raise KeyStoreUnavailable(
            "a shared keystore (SEALFLOW_KEYSTORE_URL) needs its master key, the same on every"
            " replica: set SEALFLOW_MASTER_KEY or SEALFLOW_MASTER_KEY_FILE; no master key"
            f" at {settings.master_key_path}"
        )
    _warn_if_open(settings)
    given = _given_root_token(settings)
    issued: list[str] = []

    def provision(store: PostgresKeyStore) -> None:
        _provision(store, given, issued)

    exists, _ = read_postgres(url, redact(url))
    if not exists:
        keys, meta = new_keys(settings)
        try:
            PostgresKeyStore(url, keys.kek, provision=provision, meta=meta, watch=False).close()
        except KeyStoreUnavailable:
            # Another replica made it first, under keys of its own: open it with those below.
            if settings.master_key_provider in HELD_KEYS or not read_postgres(url, redact(url))[0]:
                raise
    with closing(open_store(settings, watch=False)) as store:
        _warn_if_no_token(store, redact(url))
    return issued[0] if issued and not given else None


def _provision(store: KeyStore, given: str | None, issued: list[str]) -> None:
    store.create_key("default", Algorithm.AES_256_GCM)
    # Never expires, whatever SEALFLOW_TOKEN_MAX_TTL says: the way in to a new keystore.
    issued.append(store.create_token(ROOT_SCOPES, "root", given, expires=False)[1])


def _warn_if_no_token(store: KeyStore, where: str) -> None:
    """At a server's start: expired tokens swept (``SWEEP_AFTER``), and a warning if no token
    is left that could be used."""
    store.sweep_tokens()
    now = time.time()
    if all(token.revoked or token.expired(now) for token in store.list_tokens()):
        log.warning(
            "keystore %s has no usable token; create one with"
            " `sealflow tokens create --scope admin`",
            where,
        )


def _warn_if_open(settings: Settings) -> None:
    """One warning per secret place that group or others may open."""
    places: list[tuple[str, Path, int]] = [("data directory", settings.data_dir, 0o700)]
    env = settings.master_key.get_secret_value() if settings.master_key else None
    if settings.master_key_provider == "file" and (not env or not env.strip()):
        places.append(("master key file", settings.master_key_path, 0o600))
    pin_file = settings.master_key_pkcs11_pin_file
    if settings.master_key_provider == "pkcs11" and pin_file is not None:
        places.append(("PKCS#11 PIN file", pin_file, 0o600))
    for what, path, private in places:
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except OSError:
            continue  # a missing or unreadable file is reported when it is read
        if mode & 0o077:
            log.warning(
                "%s %s is open to group or others (mode %04o); chmod %o %s",
                what,
                path,
                mode,
                private,
                path,
                extra={"fields": {"path": str(path), "mode": f"{mode:04o}"}},
            )
