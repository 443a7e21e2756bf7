"""``sealflow keys ...``, ``sealflow tokens ...`` and ``sealflow keystore migrate`` (its backup and
restore: ``_backup``): the keystore, from the command line.

They open the keystore directly (same settings as ``serve``), so they work with
the service running: it sees their writes on its next request.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sealflow.engine import Algorithm
from sealflow.service.audit import open_auditor
from sealflow.service.config import Settings
from sealflow.service.durations import parse_duration
from sealflow.service.keystore import (
    KeyInfo,
    KeyStore,
    KeyStoreUnavailable,
    TokenInfo,
    VersionUsage,
    audit_table,
    export_material,
    keystore_keys,
    load_master_key,
    migrate_keystore,
    migration_keys,
    next_rotation,
    open_store,
    redact,
)

from . import _backup, _master, _tables
from ._trail import recording, sinks


def _key_json(key: KeyInfo, store: KeyStore) -> dict[str, Any]:
    usage = store.usage(key.name)
    none = VersionUsage(0, 0)
    when = next_rotation(key)
    return {
        "name": key.name,
        "algorithm": None if key.key_type.aead is None else key.key_type.aead.value,
        "type": key.key_type.name,
        "exportable": key.exportable,
        "latest": key.latest,
        "min_decryption_version": key.min_decryption_version,
        "min_encryption_version": key.min_encryption_version,
        "deletion_allowed": key.deletion_allowed,
        "max_encryptions": key.max_encryptions,
        "auto_rotate_period": key.auto_rotate_period,
        "encryptions_left": max(key.max_encryptions - usage.get(key.latest, none).encryptions, 0),
        "next_rotation_at": None if when is None else _when(when),
        "versions": [
            {
                "version": v.version,
                "created_at": _when(v.created_at),
                "encryptions": usage.get(v.version, none).encryptions,
                "bytes": usage.get(v.version, none).bytes,
            }
            for v in key.versions
        ],
    }


def _token_json(token: TokenInfo) -> dict[str, Any]:
    end = token.expire_time
    return {
        "id": token.id,
        "scopes": list(token.scopes),
        "label": token.label,
        "created_at": _when(token.created_at),
        "revoked": token.revoked,
        "expire_time": None if end is None else _when(end),  # None: never expires
        "expired": token.expired(time.time()),
        "ttl": token.ttl,
        "explicit_max_ttl": token.explicit_max_ttl,
        "renewable": token.renewable,
        "num_uses": token.num_uses,
        "uses_left": max(token.num_uses - token.uses, 0) if token.num_uses else None,
        "parent": token.parent or None,
        "orphan": token.orphan,
    }


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _print(obj: object) -> None:
    print(json.dumps(obj, indent=2))


def _show(as_json: bool, obj: Any, table: Callable[[Any], str]) -> None:
    """What `list` and `show` print: a table for people, or with --json every field."""
    print(json.dumps(obj, indent=2) if as_json else table(obj))


def _keys(args: argparse.Namespace, store: KeyStore) -> None:
    limits = getattr(args, "max_encryptions", None), getattr(args, "auto_rotate_period", None)
    if args.action == "create":
        key = store.create_key(args.name, Algorithm(args.algorithm), args.exportable, *limits)
        _print(_key_json(key, store))
    elif args.action == "list":
        listed = [_key_json(k, store) for k in store.list_keys()]
        _show(args.json, listed, _tables.keys)
    elif args.action == "show":
        shown = _key_json(store.get_key(args.name), store)
        _show(args.json, shown, _tables.key)
    elif args.action == "rotate":
        _print(_key_json(store.rotate_key(args.name), store))
    elif args.action == "limits":
        _print(_key_json(store.set_limits(args.name, *limits), store))
    elif args.action == "policy":
        rules = args.min_encryption_version, args.deletion_allowed
        exportable = True if args.make_exportable else None
        _print(_key_json(store.configure(args.name, None, *rules, exportable=exportable), store))
    elif args.action == "delete":
        key = store.delete_key(args.name)
        print(f"deleted key {key.name} and its {len(key.versions)} versions", file=sys.stderr)
    elif args.action == "export":
        key, version, material = export_material(store, args.name, args.version)
        _print({"name": key.name, "version": version, "key": base64.b64encode(material).decode()})


def _tokens(args: argparse.Namespace, store: KeyStore) -> None:
    if args.action == "create":
        life = args.ttl, args.explicit_max_ttl, args.renewable
        for warning in store.creation_warnings(*life):
            print(f"warning: {warning}", file=sys.stderr)
        info, secret = store.create_token(
            args.scope,
            args.label,
            ttl=args.ttl,
            explicit_max_ttl=args.explicit_max_ttl,
            renewable=args.renewable,
            num_uses=args.num_uses,
        )
        end = "never expires" if info.expire_time is None else f"expires {_when(info.expire_time)}"
        print(f"token id {info.id}, scopes {' '.join(info.scopes)}, {end}", file=sys.stderr)
        print(secret)  # alone on stdout, so it can be captured
    elif args.action == "list":
        listed = [_token_json(t) for t in store.list_tokens()]
        _show(args.json, listed, _tables.tokens)
    elif args.action == "revoke":
        _print(_token_json(store.revoke_token(args.id)))


def _duration(text: str) -> int:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number, 0 or more")
    return int(text)


def migrate(args: argparse.Namespace) -> int:
    """``sealflow keystore migrate --from sqlite:PATH --to postgresql://...``"""
    if not args.source.startswith("sqlite:"):
        raise KeyStoreUnavailable("--from takes sqlite:PATH (the SQLite keystore file)")
    source = Path(args.source.removeprefix("sqlite:"))
    if not source.is_file():
        raise KeyStoreUnavailable(f"no SQLite keystore at {source}")
    if not args.target.startswith(("postgresql://", "postgres://")):
        raise KeyStoreUnavailable("--to takes a postgresql:// URL")
    settings = Settings(**args.settings)
    env = settings.master_key.get_secret_value() if settings.master_key else None
    # The SQLite keystore's own master key: the variable, --master-key-file, or the file
    # beside it (where `sealflow serve` keeps it in the data dir); or, for a keystore sealed by
    # another provider, that provider (its record goes with the rows).
    keys = migration_keys(
        settings,
        source,
        lambda: load_master_key(env, settings.master_key_file or source.with_name("master.key")),
    )
    done = migrate_keystore(source, args.target, keys.kek, keys.meta)
    print(
        f"copied {done.keys} keys ({done.versions} versions) and {done.tokens} tokens from"
        f" {source} to {redact(args.target)}; every key version and token verified",
        file=sys.stderr,
    )
    return 0


def run(args: argparse.Namespace) -> int:
    settings = Settings(**args.settings)
    store = open_store(settings, watch=False)
    try:
        # After the store: opening it makes the audit table. A trail that cannot be opened
        # stops the command before it changes anything.
        auditor = open_auditor(settings, keystore_keys(settings).secret, audit_table(settings))
    except BaseException:
        store.close()
        raise
    if auditor is not None:
        store.on_change = recording(auditor)
    try:
        handle = getattr(args, "handle", None) or (_keys if args.command == "keys" else _tokens)
        handle(args, store)
    finally:
        store.close()
        recorded = auditor is None or auditor.close()
    if not recorded:
        # The change is made (it committed first); its record is not, and that must show.
        print(
            "sealflow: the change was made, but its audit record could not be written to"
            f" the audit trail ({sinks(settings)})",
            file=sys.stderr,
        )
        return 1
    return 0


def _with_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help="print JSON (every field, for scripts) instead of a table",
    )


def add_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    keys = commands.add_parser("keys", help="manage keys in the keystore").add_subparsers(
        dest="action", required=True
    )
    create = keys.add_parser("create", parents=[common], help="create a key (version 1)")
    create.add_argument("name")
    create.add_argument(
        "--algorithm",
        choices=[a.value for a in Algorithm],
        default=Algorithm.AES_256_GCM.value,
        help="the AEAD the key seals with (default aes-256-gcm); it never changes, rotations "
        "included",
    )
    create.add_argument(
        "--exportable", action="store_true", help="allow export (`keys policy` can add it later)"
    )
    limits = keys.add_parser(
        "limits", parents=[common], help="change a key's usage limits (automatic rotation)"
    )
    limits.add_argument("name")
    for parser in (create, limits):
        parser.add_argument(
            "--max-encryptions",
            type=int,
            metavar="N",
            help="sealings per version before an automatic rotation (default 2^32)",
        )
        parser.add_argument(
            "--auto-rotate-period",
            type=float,
            metavar="SECONDS",
            help="seconds a version is used before an automatic rotation (0: never)",
        )
    policy = keys.add_parser(
        "policy", parents=[common], help="change a key's Transit policy (docs/TRANSIT.md)"
    )
    policy.add_argument("name")
    policy.add_argument(
        "--min-encryption-version",
        type=int,
        metavar="N",
        help="the lowest version Transit's encrypt may be asked for (0: any)",
    )
    allow = policy.add_mutually_exclusive_group()
    allow.add_argument(
        "--allow-deletion",
        dest="deletion_allowed",
        action="store_const",
        const=True,
        help="let `keys delete` (or Transit's DELETE) remove the key",
    )
    allow.add_argument(
        "--forbid-deletion",
        dest="deletion_allowed",
        action="store_const",
        const=False,
        help="refuse deletion again (the default for a new key)",
    )
    policy.add_argument(
        "--make-exportable",
        action="store_true",
        help="let every version of the key be exported from now on (cannot be undone)",
    )
    keys.add_parser(
        "delete",
        parents=[common],
        help="delete a key and all its versions' material (needs --allow-deletion first)",
    ).add_argument("name")
    _with_json(keys.add_parser("list", parents=[common], help="list keys"))
    show = keys.add_parser("show", parents=[common], help="show a key and its versions")
    show.add_argument("name", help="the key's name")
    _with_json(show)
    keys.add_parser("rotate", parents=[common], help="add a version").add_argument(
        "name", help="the key's name"
    )
    export = keys.add_parser("export", parents=[common], help="print an exportable key's material")
    export.add_argument("name")
    export.add_argument(
        "--version",
        type=int,
        default=None,
        metavar="N",
        help="the version to export (default: the latest)",
    )

    tokens = commands.add_parser("tokens", help="manage API tokens").add_subparsers(
        dest="action", required=True
    )
    tcreate = tokens.add_parser("create", parents=[common], help="create a token; prints it once")
    tcreate.add_argument(
        "--scope",
        action="append",
        required=True,
        help="admin, or ACTION:<glob> over key names, ACTION one of encrypt, decrypt, export,"
        " hmac, sign, verify (admin implies neither data access nor export); repeatable",
    )
    tcreate.add_argument(
        "--label",
        default="",
        metavar="TEXT",
        help="a name for people (shown by `tokens list` and in the audit trail); not secret",
    )
    tcreate.add_argument(
        "--ttl",
        type=_duration,
        default=None,
        metavar="DURATION",
        help="how long it lives, and what a renewal gives it: 90s, 30m, 1h, 768h or seconds"
        " (default: SEALFLOW_TOKEN_DEFAULT_TTL; when that is 0 and no maximum is set, it"
        " never expires)",
    )
    tcreate.add_argument(
        "--explicit-max-ttl",
        type=_duration,
        default=0,
        metavar="DURATION",
        help="the longest it may live from its creation, renewals included (default 0: only"
        " SEALFLOW_TOKEN_MAX_TTL limits it)",
    )
    tcreate.add_argument(
        "--renewable",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="whether it may be renewed before it expires (default: yes; a token that never"
        " expires is never renewable)",
    )
    tcreate.add_argument(
        "--num-uses",
        type=_count,
        default=0,
        metavar="N",
        help="how many requests it may make, counted exactly by every server (default 0:"
        " unlimited)",
    )
    _with_json(
        tokens.add_parser("list", parents=[common], help="list tokens (never their secrets)")
    )
    tokens.add_parser("revoke", parents=[common], help="revoke a token").add_argument("id")
    store = commands.add_parser(
        "keystore", help="move, back up or restore a keystore; create its master key"
    ).add_subparsers(dest="action", required=True)
    move = store.add_parser(
        "migrate",
        parents=[common],
        help="copy an SQLite keystore into an empty PostgreSQL one, verbatim, and verify it",
    )
    move.add_argument(
        "--from",
        dest="source",
        required=True,
        metavar="sqlite:PATH",
        help="the SQLite keystore file to copy from (left unchanged)",
    )
    move.add_argument(
        "--to",
        dest="target",
        required=True,
        metavar="postgresql://...",
        help="the URL of an empty PostgreSQL keystore to copy into",
    )
    move.set_defaults(func=migrate)
    _backup.add_commands(store, common)
    _master.add_commands(store, common)
    for sub in (keys, tokens):
        for parser in sub.choices.values():
            parser.set_defaults(func=run)
