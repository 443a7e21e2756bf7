"""Opening the keystore the settings name, and its first start: data dir, master key, key
``default``, root token."""

from __future__ import annotations

import contextlib
import sys

from sealflow.engine import Algorithm
from sealflow.service.config import Settings

from ._masterkey import create_master_key_file, load_master_key, read_secret
from ._sqlite import SQLiteKeyStore
from .errors import KeyExists

ROOT_SCOPES = ["admin", "encrypt:*", "decrypt:*"]


def open_store(settings: Settings, max_staleness: float = 0.0) -> SQLiteKeyStore:
    """The keystore, or KeyStoreUnavailable with a message saying what is wrong.

    ``max_staleness``: how many seconds old a cached read may be (0: check on every call).
    """
    env = settings.master_key.get_secret_value() if settings.master_key else None
    master = load_master_key(env, None if env else settings.master_key_path)
    return SQLiteKeyStore(settings.keystore_path, master, max_staleness)


def _given_root_token(settings: Settings) -> str | None:
    if settings.root_token is not None:
        return settings.root_token.get_secret_value().strip()
    if settings.root_token_file is not None:
        path = settings.root_token_file
        return read_secret(path, f"root token file {path}").strip()
    return None


def prepare(settings: Settings) -> str | None:
    """Make the data dir usable; return a new root token (to print) if the keystore had none.

    A root token given in the settings is installed instead, and not returned.

    Raises KeyStoreUnavailable (with a message saying what is wrong) if the
    keystore or the master key cannot be used.
    """
    settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if (
        settings.master_key is None
        and not settings.master_key_path.exists()
        # A keystore without its master key is an error to report, not a new start.
        and not settings.keystore_path.exists()
    ):
        create_master_key_file(settings.master_key_path)
        print(
            f"WARNING: dev mode: created the master key file {settings.master_key_path} "
            "(mode 0600). Anyone who reads it can unwrap every key. In production set "
            "SEALFLOW_MASTER_KEY or SEALFLOW_MASTER_KEY_FILE from a secret store.",
            file=sys.stderr,
        )
    store = open_store(settings)
    try:
        # A store without tokens is a new one (or one nobody could use): give it a
        # key to try and the one token that can create the others.
        if store.list_tokens():
            return None
        if not any(key.name == "default" for key in store.list_keys()):
            # Replicas starting together on a new shared volume race here: one wins.
            with contextlib.suppress(KeyExists):
                store.create_key("default", Algorithm.AES_256_GCM)
        given = _given_root_token(settings)
        _, secret = store.create_token(ROOT_SCOPES, label="root", secret=given)
        return None if given else secret
    finally:
        store.close()
