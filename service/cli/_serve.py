"""``sealflow serve``: first-start provisioning, then uvicorn with the settings' values.

The server is imported only when this command runs: the other commands load none of it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from sealflow.service import config_file
from sealflow.service.config import Settings
from sealflow.service.keystore import audit_table, prepare

from ._flags import add_settings


def add_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser("serve", help="run the HTTP service (dev defaults with no flags)")
    serve.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="a TOML file of settings, each key a setting's name in lower case (port = 8443);"
        f" variables and flags override it (docs/OPERATIONS.md; {config_file.VARIABLE})",
    )
    add_settings(serve, list(Settings.model_fields))
    serve.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    from sealflow.service.server import _logging

    if args.config is not None:
        # Through the environment, as the flags below: the worker processes read it there.
        os.environ[config_file.VARIABLE] = str(args.config.absolute())
    settings = Settings(**args.settings)
    _logging.configure(settings.log_level)
    token = prepare(settings)
    if token is not None:
        print(f"Root token: {token}", flush=True)
        print(
            "The root token never expires (whatever --token-max-ttl says) and has every scope:"
            " keep it offline, and revoke it (`sealflow tokens revoke`) once other tokens do"
            " its work.",
            file=sys.stderr,
            flush=True,
        )
    # The audit table is checked here, before uvicorn: an SQLite keystore, or a role that may
    # not insert into it, is then a one-line error rather than a failed start of each worker.
    table = audit_table(settings)
    if table is not None:
        table.close()
    # The app factory reads its settings from the environment, in this
    # process and in every worker process.
    for name, value in args.settings.items():
        os.environ[f"SEALFLOW_{name.upper()}"] = str(value)
    if settings.workers > 1:
        # Each worker writes its metrics here; /metrics sums them. Wiped at start
        # so counters of earlier runs do not linger (prometheus_client's rule).
        metrics_dir = settings.data_dir / "metrics"
        shutil.rmtree(metrics_dir, ignore_errors=True)
        metrics_dir.mkdir(mode=0o700)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)

    from sealflow.service.server.http import serve

    serve(settings)
    return 0
