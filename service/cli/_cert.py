"""``sealflow cert role ...``: certificate roles of the cert auth method in the keystore, as the
HTTP routes under ``/v1/auth/cert/certs`` manage them (docs/TRANSIT.md, Cert), for a host that
can open the keystore (like ``sealflow approle``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sealflow.service.keystore import CertRoleInfo, KeyStore

from . import _manage

# The rule flags and the role fields they set.
_RULES = (
    ("--allowed-common-name", "allowed_common_names", "the subject's common name"),
    ("--allowed-dns-san", "allowed_dns_sans", "a DNS name among the SANs"),
    ("--allowed-email-san", "allowed_email_sans", "an email address among the SANs"),
    ("--allowed-uri-san", "allowed_uri_sans", "a URI among the SANs"),
    ("--allowed-ou", "allowed_organizational_units", "an organizational unit of the subject"),
)


def _role_json(role: CertRoleInfo) -> dict[str, Any]:
    return {
        "name": role.name,
        "display_name": role.display_name,
        "certificate": role.certificate,
        **{field: list(getattr(role, field)) for _, field, _ in _RULES},
        "scopes": list(role.token_policies),
        "token_ttl": role.token_ttl,
        "token_max_ttl": role.token_max_ttl,
    }


def _role(args: argparse.Namespace, store: KeyStore) -> None:
    if args.action == "create":
        fields: dict[str, Any] = {"token_policies": args.scope}
        if args.certificate is not None:
            fields["certificate"] = _read(args.certificate)
        for _, field, _ in _RULES:
            if getattr(args, field):
                fields[field] = getattr(args, field)
        for name in ("token_ttl", "token_max_ttl", "display_name"):
            if getattr(args, name) is not None:
                fields[name] = getattr(args, name)
        _manage._print(_role_json(store.write_cert_role(args.name, fields)))
    elif args.action == "show":
        _manage._print(_role_json(store.get_cert_role(args.name)))
    elif args.action == "list":
        _manage._print([_role_json(r) for r in store.list_cert_roles()])
    elif args.action == "delete":
        if not store.delete_cert_role(args.name):
            raise SystemExit(f"sealflow: no certificate role {args.name!r}")
        print(f"deleted certificate role {args.name}", file=sys.stderr)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SystemExit(f"sealflow: cannot read {path}: {exc}") from None


def add_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    cert = commands.add_parser(
        "cert", help="manage logins by TLS client certificate: certificate roles"
    ).add_subparsers(dest="kind", required=True)
    roles = cert.add_parser("role", help="manage certificate roles").add_subparsers(
        dest="action", required=True
    )
    create = roles.add_parser(
        "create",
        parents=[common],
        help="create a certificate role, or change the settings given of an existing one",
    )
    create.add_argument("name")
    create.add_argument(
        "--certificate",
        type=Path,
        metavar="PEM",
        help="the CA that must have signed a client's certificate, or that certificate itself"
        " (required to create a role)",
    )
    create.add_argument(
        "--scope",
        action="append",
        required=True,
        help="a scope the tokens of a login get (as `tokens create --scope`); repeatable",
    )
    for flag, field, what in _RULES:
        create.add_argument(
            flag,
            dest=field,
            action="append",
            default=[],
            metavar="GLOB",
            help=f"logins only with {what} matching one of these (* matches anything); repeatable",
        )
    create.add_argument(
        "--token-ttl",
        type=_manage._duration,
        default=None,
        metavar="DURATION",
        help="how long a login's token lives (default: SEALFLOW_TOKEN_DEFAULT_TTL)",
    )
    create.add_argument(
        "--token-max-ttl",
        type=_manage._duration,
        default=None,
        metavar="DURATION",
        help="the longest a login's token may live, renewals included",
    )
    create.add_argument(
        "--display-name", default=None, metavar="NAME", help="default: the role's name"
    )
    roles.add_parser("list", parents=[common], help="list certificate roles")
    roles.add_parser("show", parents=[common], help="show a certificate role").add_argument("name")
    roles.add_parser("delete", parents=[common], help="delete a certificate role").add_argument(
        "name"
    )
    for parser in roles.choices.values():
        parser.set_defaults(func=_manage.run, handle=_role)
