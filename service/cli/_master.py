"""``sealflow keystore init-master``: create the master key the configured provider uses
(docs/DEPLOY.md), never replacing one that is there; ``sealflow keystore rotate-master``: a new
key-encryption key, sealed by the same or another provider (docs/OPERATIONS.md)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from sealflow.service.audit import open_auditor
from sealflow.service.config import Settings
from sealflow.service.keystore import (
    HELD_KEYS,
    MASTER_KEY_PROVIDERS,
    KeyStoreError,
    KeyStoreUnavailable,
    Pkcs11Seal,
    Rotated,
    audit_table,
    create_master_key_file,
    current_provider,
    keystore_keys,
    rotate_master,
)

from ._trail import recording, sinks

# Every command that opens a keystore takes these (with the data dir and the keystore URL).
MASTER_KEY_SETTINGS = [
    "master_key_provider",
    "master_key_file",
    "master_key_pkcs11_library",
    "master_key_pkcs11_token_label",
    "master_key_pkcs11_key_label",
    "master_key_pkcs11_pin_file",
    "master_key_transit_addr",
    "master_key_transit_mount",
    "master_key_transit_key",
    "master_key_transit_token_file",
    "master_key_transit_ca_file",
    "master_key_transit_namespace",
    "master_key_transit_timeout",
]


def init_master(args: argparse.Namespace) -> int:
    settings = Settings(**args.settings)
    provider = settings.master_key_provider
    if provider == "pkcs11":
        seal = Pkcs11Seal.from_settings(settings)
        seal.create_key()
        names = seal.describe()
        print(
            f"created AES-256 key {names['key_label']!r} on PKCS#11 token"
            f" {names['token_label']!r} (sensitive, not extractable)",
            file=sys.stderr,
        )
        return 0
    if provider == "file":
        path = settings.master_key_path
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            create_master_key_file(path)
        except FileExistsError:
            raise KeyStoreUnavailable(f"{path} exists; nothing was created") from None
        print(f"created the master key file {path} (mode 0600)", file=sys.stderr)
        return 0
    if provider == "transit":
        raise KeyStoreUnavailable(
            "the transit master-key provider's key is made in the sealing Transit"
            " (docs/DEPLOY.md, Transit seal with OpenBao); nothing was created"
        )
    raise KeyStoreUnavailable(
        f"the {provider} master-key provider has no key to create here (SEALFLOW_MASTER_KEY is"
        " set by the deployment)"
    )


def rotate(args: argparse.Namespace) -> int:
    settings = Settings(**args.settings)
    # The provider sealing the keystore now is the one its record names, whatever is configured.
    here = settings.model_copy(update={"master_key_provider": current_provider(settings)})
    # The secret survives the rotation: the trail's key is the same before and after.
    auditor = open_auditor(here, keystore_keys(here).secret, audit_table(here))
    total = 0

    def batch(done: int) -> None:
        nonlocal total
        total += done
        print(f"rewrapped {done} rows ({total} in this run)", file=sys.stderr, flush=True)

    try:
        rotated = rotate_master(settings, args.to, args.batch_size, batch)
    except KeyStoreError:
        # What stopped it goes to stderr (``_main``); the trail says that it stopped.
        if auditor is not None:
            recording(auditor)("master_rotate", {"error": "rotation_incomplete"})
            auditor.close()
        raise
    _report(rotated)
    if auditor is None:
        return 0
    recording(auditor)("master_rotate", _fields(rotated))
    if auditor.close():
        return 0
    print(
        "sealflow: the key-encryption key was rotated, but its audit record could not be written"
        f" to the audit trail ({sinks(settings)})",
        file=sys.stderr,
    )
    return 1


def _fields(rotated: Rotated) -> dict[str, object]:
    """The audit record's fields: provider names and generations, never a key or a PIN."""
    return {
        "from_provider": rotated.old.provider,
        "to_provider": rotated.new.provider,
        "kek_generation": rotated.new.generation,
        "resumed": rotated.resumed,
        "rows": rotated.progress.rewritten,
    }


def _report(rotated: Rotated) -> None:
    old, new, progress = rotated.old, rotated.new, rotated.progress
    print(
        f"rotated the keystore's key-encryption key to generation {new.generation}, sealed by"
        f" the {new.names()} master-key provider ({progress.rewritten} rows rewrapped in this"
        " run)",
        file=sys.stderr,
    )
    for what in progress.refused:
        print(f"left as it was (fails its integrity check): {what}", file=sys.stderr)
    held = {old.provider, new.provider} <= HELD_KEYS  # both read the same key settings
    if held or (old.provider, old.identity) == (new.provider, new.identity):
        print(
            f"the {new.names()} master key seals the new key-encryption key as it sealed the"
            " old one: keep it",
            file=sys.stderr,
        )
        return
    print(
        f"the {old.names()} master key is no longer needed to open this keystore; keep it"
        " only as long as you keep backups made before this rotation (they open with it)",
        file=sys.stderr,
    )


def add_commands(store: Any, common: argparse.ArgumentParser) -> None:
    init = store.add_parser(
        "init-master",
        parents=[common],
        help="create the master key of the chosen provider: the AES-256 key on the PKCS#11"
        " token (sensitive, not extractable), or the master key file; refuses one that exists",
    )
    init.set_defaults(func=init_master)
    turn = store.add_parser(
        "rotate-master",
        parents=[common],
        help="replace the keystore's key-encryption key with a new random one, sealed by the"
        " provider it has now or by another (--to); resumable, safe to interrupt, safe while"
        " servers run",
    )
    turn.add_argument(
        "--to",
        choices=list(MASTER_KEY_PROVIDERS),
        help="the master-key provider to seal the new key with, configured by the same"
        " SEALFLOW_MASTER_KEY_* settings as serve (default: the one sealing it now, which the"
        " keystore records)",
    )
    turn.add_argument(
        "--batch-size",
        type=_rows,
        default=500,
        metavar="ROWS",
        help="rows rewrapped per transaction (default 500)",
    )
    turn.set_defaults(func=rotate)


def _rows(text: str) -> int:
    """A batch size: a whole number of rows, at least 1 (argparse says so and exits 2)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number, 1 or more")
    return int(text)
