"""``sealflow audit verify FILE...`` (or ``--postgres``: the keystore's audit table) and
``sealflow audit hmac VALUE``: the audit trail checked, and a value's HMAC to search it for
(docs/AUDIT.md).

Both need the audit key, so both open the master key as ``sealflow keys`` does (the same
flags and variables), and open the keystore with it: a wrong master key is refused there,
rather than making every checkpoint fail or every search find nothing. Unlike ``keys``, they
never make a keystore where there is none.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

from sealflow.service.audit import audit_key, hmac_field, verify, verify_rows
from sealflow.service.config import Settings
from sealflow.service.keystore import (
    AUDIT_TABLE,
    KeyStoreUnavailable,
    audit_rows,
    keystore_keys,
    keystore_url,
    open_store,
)


def _audit_key(args: argparse.Namespace) -> bytes:
    settings = Settings(**args.settings)
    path = settings.keystore_path
    # Opening a missing SQLite keystore would make a new one, under whatever key was given.
    if keystore_url(settings) is None and not path.exists():
        raise KeyStoreUnavailable(f"no keystore at {path} (--data-dir names its folder)")
    with closing(open_store(settings, watch=False)):
        pass
    return audit_key(keystore_keys(settings).secret)


def _verify(args: argparse.Namespace) -> int:
    if bool(args.files) == args.postgres:
        # Not both: a server that writes to a file and the table puts the same records in
        # each, and one chain read through both would repeat every record.
        print("sealflow: give the audit files to check, or --postgres, not both", file=sys.stderr)
        return 2  # a usage error, as argparse's
    url = keystore_url(Settings(**args.settings)) if args.postgres else None
    if args.postgres and url is None:
        raise KeyStoreUnavailable(
            "--postgres checks the audit table of a PostgreSQL keystore, and this keystore is"
            " SQLite (no SEALFLOW_KEYSTORE_URL)"
        )
    key = _audit_key(args)
    if url is not None:
        report = verify_rows(AUDIT_TABLE, audit_rows(url), key, args.strict)
    else:
        report = verify([Path(p) for p in args.files], key, args.strict)
    for tail in report.unsealed:
        print(f"{'error' if args.strict else 'warning'}: {tail}", file=sys.stderr)
    if report.error is not None:
        print(f"error: {report.error}", file=sys.stderr)
    if not report.ok:
        return 1
    span = f", {report.first}..{report.last}" if report.records else ""
    print(f"ok: {report.records} records{span}")
    return 0


def _hmac(args: argparse.Namespace) -> int:
    value: bytes | str = args.value
    if args.value == "-":
        # A token to search for stays out of ps and the shell's history; `echo` adds a newline.
        value = sys.stdin.buffer.read().removesuffix(b"\n").removesuffix(b"\r")
    print(hmac_field(_audit_key(args), value))
    return 0


def add_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    audit = commands.add_parser("audit", help="check audit files; search them").add_subparsers(
        dest="action", required=True
    )
    check = audit.add_parser(
        "verify",
        parents=[common],
        help="check the hash chains and checkpoints of audit files (give the rotated ones too),"
        " or of the audit table",
    )
    check.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="an audit file and its rotated files, in any order (they are read oldest first)",
    )
    check.add_argument(
        "--postgres",
        action="store_true",
        help="check the audit table of the PostgreSQL keystore instead (every replica's"
        " records; the keystore URL as for the keys command)",
    )
    check.add_argument(
        "--strict",
        action="store_true",
        help="also fail on records after a writer's last checkpoint (after a clean shutdown"
        " there are none)",
    )
    check.set_defaults(func=_verify)
    mac = audit.add_parser(
        "hmac",
        parents=[common],
        help="print the hmac-sha256 under which the audit files hold a value (an AAD, a"
        " Transit context, a token), to search for it",
    )
    mac.add_argument("value", metavar="VALUE", help="the value; - reads it from standard input")
    mac.set_defaults(func=_hmac)
