"""``sealflow healthcheck``: is the service on this host ready? (the image's HEALTHCHECK).

It asks ``/readyz`` where ``sealflow serve`` listens with the same settings (variables, a
``--config`` file, flags): the port, and HTTPS when a TLS certificate is set. Only the standard
library's HTTP client, so the image needs no curl. The certificate is not checked: the probe
talks to its own host over loopback and sends nothing secret, and a certificate names the
service's public host, not 127.0.0.1.
"""

from __future__ import annotations

import argparse
import http.client
import os
import ssl
import sys
from pathlib import Path

from sealflow.service import config_file
from sealflow.service.config import Settings

from ._flags import add_settings

# Where a wildcard listener is reached from this host.
_LOOPBACK = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}  # noqa: S104


def add_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    check = commands.add_parser(
        "healthcheck",
        help="exit 0 if the service on this host answers /readyz with 200 (for HEALTHCHECK)",
    )
    check.add_argument(
        "--config", type=Path, metavar="FILE", help="the settings file `sealflow serve` was given"
    )
    check.add_argument(
        "--timeout",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="how long to wait for the connection and the answer (default 2)",
    )
    add_settings(check, ["host", "port", "tls_cert", "tls_key"])
    check.set_defaults(func=_healthcheck)


def _healthcheck(args: argparse.Namespace) -> int:
    if args.config is not None:
        os.environ[config_file.VARIABLE] = str(args.config.absolute())
    settings = Settings(**args.settings)
    host = _LOOPBACK.get(settings.host, settings.host)
    connection: http.client.HTTPConnection
    if settings.tls_cert is None:
        connection = http.client.HTTPConnection(host, settings.port, timeout=args.timeout)
    else:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        connection = http.client.HTTPSConnection(
            host, settings.port, timeout=args.timeout, context=context
        )
    scheme = "http" if settings.tls_cert is None else "https"
    url = f"{scheme}://{host}:{settings.port}/readyz"
    try:
        connection.request("GET", "/readyz")
        status = connection.getresponse().status
    except (OSError, http.client.HTTPException) as exc:
        print(f"sealflow healthcheck: {url}: {exc}", file=sys.stderr)
        return 1
    finally:
        connection.close()
    if status != 200:
        print(f"sealflow healthcheck: {url}: status {status}", file=sys.stderr)
        return 1
    return 0
