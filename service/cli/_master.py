"""``sealflow keystore init-master``: create the master key the configured provider uses
(docs/DEPLOY.md), never replacing one that is there."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from sealflow.service.config import Settings
from sealflow.service.keystore import KeyStoreUnavailable, Pkcs11Seal, create_master_key_file

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


def add_commands(store: Any, common: argparse.ArgumentParser) -> None:
    init = store.add_parser(
        "init-master",
        parents=[common],
        help="create the master key of the chosen provider: the AES-256 key on the PKCS#11"
        " token (sensitive, not extractable), or the master key file; refuses one that exists",
    )
    init.set_defaults(func=init_master)
