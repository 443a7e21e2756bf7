"""``sealflow keys ...`` and ``sealflow tokens ...``: the keystore, from the command line.

They open the keystore directly (same settings as ``serve``), so they work with
the service running: it sees their writes on its next request.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from typing import Any

from sealflow.engine import Algorithm
from sealflow.service.config import Settings
from sealflow.service.keystore import KeyInfo, KeyStore, TokenInfo, export_material, open_store


def _key_json(key: KeyInfo) -> dict[str, Any]:
    return {
        "name": key.name,
        "algorithm": key.algorithm.value,
        "exportable": key.exportable,
        "latest": key.latest,
        "min_decryption_version": key.min_decryption_version,
        "versions": [
            {"version": v.version, "created_at": _when(v.created_at)} for v in key.versions
        ],
    }


def _token_json(token: TokenInfo) -> dict[str, Any]:
    return {
        "id": token.id,
        "scopes": list(token.scopes),
        "label": token.label,
        "created_at": _when(token.created_at),
        "revoked": token.revoked,
    }


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _print(obj: object) -> None:
    print(json.dumps(obj, indent=2))


def _keys(args: argparse.Namespace, store: KeyStore) -> None:
    if args.action == "create":
        _print(_key_json(store.create_key(args.name, Algorithm(args.algorithm), args.exportable)))
    elif args.action == "list":
        _print([_key_json(k) for k in store.list_keys()])
    elif args.action == "show":
        _print(_key_json(store.get_key(args.name)))
    elif args.action == "rotate":
        _print(_key_json(store.rotate_key(args.name)))
    elif args.action == "export":
        key, version, material = export_material(store, args.name, args.version)
        _print({"name": key.name, "version": version, "key": base64.b64encode(material).decode()})


def _tokens(args: argparse.Namespace, store: KeyStore) -> None:
    if args.action == "create":
        info, secret = store.create_token(args.scope, args.label)
        print(f"token id {info.id}, scopes {' '.join(info.scopes)}", file=sys.stderr)
        print(secret)  # alone on stdout, so it can be captured
    elif args.action == "list":
        _print([_token_json(t) for t in store.list_tokens()])
    elif args.action == "revoke":
        _print(_token_json(store.revoke_token(args.id)))


def run(args: argparse.Namespace) -> int:
    store = open_store(Settings(**args.settings), watch=False)
    try:
        (_keys if args.command == "keys" else _tokens)(args, store)
    finally:
        store.close()
    return 0


def add_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    keys = commands.add_parser("keys", help="manage keys in the keystore").add_subparsers(
        dest="action", required=True
    )
    create = keys.add_parser("create", parents=[common], help="create a key (version 1)")
    create.add_argument("name")
    create.add_argument(
        "--algorithm", choices=[a.value for a in Algorithm], default=Algorithm.AES_256_GCM.value
    )
    create.add_argument("--exportable", action="store_true", help="allow export (cannot change)")
    keys.add_parser("list", parents=[common], help="list keys")
    for action, what in (("show", "show a key"), ("rotate", "add a version")):
        keys.add_parser(action, parents=[common], help=what).add_argument("name")
    export = keys.add_parser("export", parents=[common], help="print an exportable key's material")
    export.add_argument("name")
    export.add_argument("--version", type=int, default=None)

    tokens = commands.add_parser("tokens", help="manage API tokens").add_subparsers(
        dest="action", required=True
    )
    tcreate = tokens.add_parser("create", parents=[common], help="create a token; prints it once")
    tcreate.add_argument(
        "--scope",
        action="append",
        required=True,
        help="admin, encrypt:<glob> or decrypt:<glob> over key names; repeatable",
    )
    tcreate.add_argument("--label", default="")
    tokens.add_parser("list", parents=[common], help="list tokens (never their secrets)")
    tokens.add_parser("revoke", parents=[common], help="revoke a token").add_argument("id")
    for sub in (keys, tokens):
        for parser in sub.choices.values():
            parser.set_defaults(func=run)
