"""``sealflow approle role ...`` and ``sealflow approle secret-id ...``: AppRole roles and their
secret ids in the keystore, as the HTTP routes under ``/v1/auth/approle`` manage them
(docs/TRANSIT.md, AppRole), for a host that can open the keystore (like ``sealflow tokens``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from sealflow.service.keystore import KeyStore, RoleInfo, SecretIdInfo

from . import _manage


def _role_json(role: RoleInfo) -> dict[str, Any]:
    return {
        "name": role.name,
        "role_id": role.role_id,
        "scopes": list(role.token_policies),
        "token_ttl": role.token_ttl,
        "token_max_ttl": role.token_max_ttl,
        "token_num_uses": role.token_num_uses,
        "secret_id_ttl": role.secret_id_ttl,
        "secret_id_num_uses": role.secret_id_num_uses,
        "secret_id_bound_cidrs": list(role.secret_id_bound_cidrs),
        "bind_secret_id": role.bind_secret_id,
    }


def _secret_json(info: SecretIdInfo) -> dict[str, Any]:
    return {
        "accessor": info.accessor,
        "role": info.role,
        "num_uses": info.num_uses,
        "uses_left": info.uses_left,
        "expires": None if info.expire_time is None else _manage._when(info.expire_time),
        "cidrs": list(info.cidrs),
        "metadata": json.loads(info.metadata),
    }


def _role(args: argparse.Namespace, store: KeyStore) -> None:
    if args.action == "create":
        fields: dict[str, Any] = {"token_policies": args.scope}
        for name in (
            "token_ttl",
            "token_max_ttl",
            "token_num_uses",
            "secret_id_ttl",
            "secret_id_num_uses",
        ):
            if getattr(args, name) is not None:
                fields[name] = getattr(args, name)
        if args.secret_id_cidr:
            fields["secret_id_bound_cidrs"] = args.secret_id_cidr
        _manage._print(_role_json(store.write_role(args.name, fields)))
    elif args.action == "show":
        role = store.get_role(args.name)
        _manage._print(
            {
                **_role_json(role),
                "secret_ids": [_secret_json(s) for s in store.list_secret_ids(role.name)],
            }
        )
    elif args.action == "list":
        _manage._print([_role_json(r) for r in store.list_roles()])
    elif args.action == "delete":
        if not store.delete_role(args.name):
            raise SystemExit(f"sealflow: no role {args.name!r}")
        print(f"deleted role {args.name} and its secret ids", file=sys.stderr)


def _secret_id(args: argparse.Namespace, store: KeyStore) -> None:
    if args.action == "create":
        metadata = dict(pair.partition("=")[::2] for pair in args.metadata)
        info, secret = store.create_secret_id(
            args.role, metadata=metadata, cidrs=args.cidr, ttl=args.ttl, num_uses=args.num_uses
        )
        print(f"secret id accessor {info.accessor} of role {info.role}", file=sys.stderr)
        print(secret)  # alone on stdout, so it can be captured
    elif args.action == "destroy":
        if not store.destroy_secret_id(args.role, accessor=args.accessor):
            raise SystemExit(f"sealflow: no secret id {args.accessor!r} of role {args.role!r}")
        print(f"destroyed secret id {args.accessor}", file=sys.stderr)


def add_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    approle = commands.add_parser(
        "approle", help="manage machine logins: roles and their secret ids"
    ).add_subparsers(dest="kind", required=True)
    roles = approle.add_parser("role", help="manage roles").add_subparsers(
        dest="action", required=True
    )
    create = roles.add_parser(
        "create",
        parents=[common],
        help="create a role, or change the settings given of an existing one; prints its role id",
    )
    create.add_argument("name")
    create.add_argument(
        "--scope",
        action="append",
        required=True,
        help="a scope the tokens of a login get (as `tokens create --scope`); repeatable",
    )
    durations = (
        ("--token-ttl", "how long a login's token lives (default: SEALFLOW_TOKEN_DEFAULT_TTL)"),
        ("--token-max-ttl", "the longest a login's token may live, renewals included"),
        ("--secret-id-ttl", "how long a new secret id lives (default: never expires)"),
    )
    for flag, text in durations:
        create.add_argument(
            flag, type=_manage._duration, default=None, metavar="DURATION", help=text
        )
    counts = (
        ("--token-num-uses", "how many requests a login's token may make (default: unlimited)"),
        ("--secret-id-num-uses", "how many logins a new secret id allows (default: unlimited)"),
    )
    for flag, text in counts:
        create.add_argument(flag, type=_manage._count, default=None, metavar="N", help=text)
    create.add_argument(
        "--secret-id-cidr",
        action="append",
        default=[],
        metavar="CIDR",
        help="logins with this role only from these client addresses; repeatable",
    )
    roles.add_parser("list", parents=[common], help="list roles")
    roles.add_parser(
        "show", parents=[common], help="show a role and its secret ids (never their secrets)"
    ).add_argument("name")
    roles.add_parser(
        "delete", parents=[common], help="delete a role and every secret id of it"
    ).add_argument("name")
    secrets = approle.add_parser("secret-id", help="manage secret ids").add_subparsers(
        dest="action", required=True
    )
    make = secrets.add_parser(
        "create", parents=[common], help="create a secret id of a role; prints it once"
    )
    make.add_argument("role")
    make.add_argument(
        "--ttl",
        type=_manage._duration,
        default=None,
        metavar="DURATION",
        help="how long it lives (default: the role's; never longer)",
    )
    make.add_argument(
        "--num-uses",
        type=_manage._count,
        default=None,
        metavar="N",
        help="how many logins it allows (default: the role's)",
    )
    make.add_argument(
        "--cidr",
        action="append",
        default=[],
        help="logins with it only from these client addresses; repeatable",
    )
    make.add_argument(
        "--metadata",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="shown on its lookup and on the tokens of its logins; repeatable",
    )
    destroy = secrets.add_parser(
        "destroy", parents=[common], help="destroy a secret id, named by its accessor"
    )
    destroy.add_argument("role")
    destroy.add_argument("accessor")
    for sub, handle in ((roles, _role), (secrets, _secret_id)):
        for parser in sub.choices.values():
            parser.set_defaults(func=_manage.run, handle=handle)
