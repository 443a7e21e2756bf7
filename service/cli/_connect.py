"""What the commands that talk to a running server share (``encrypt``, ``decrypt``, ``migrate
from-transit``): the client for ``--url`` and ``SEALFLOW_TOKEN``, and the server's words made
safe for a terminal."""

from __future__ import annotations

import argparse
import os
import re
import ssl

from sealflow.service.client import Client

from ._errors import ClientError

DEFAULT_URL = "http://127.0.0.1:8080"


def one_line(text: str) -> str:
    """The server's text goes to a terminal: one line, no control characters."""
    return "".join(c if c.isprintable() else " " for c in text)[:500]


def open_client(args: argparse.Namespace) -> Client:
    """The client for the service at --url, or a usage error."""
    token = os.environ.get("SEALFLOW_TOKEN", "").strip()
    if not token:
        raise ClientError("SEALFLOW_TOKEN is not set (export a token with the needed scope)", 2)
    if not re.fullmatch(r"[\x21-\x7e]+", token):
        raise ClientError("SEALFLOW_TOKEN has characters not allowed in an HTTP header", 2)
    url = args.url or os.environ.get("SEALFLOW_URL") or DEFAULT_URL
    cacert = getattr(args, "cacert", None)
    if cacert is not None and not os.path.exists(cacert):
        raise ClientError(f"--cacert {cacert!r}: no such file or directory", 2)
    try:
        return Client(
            url,
            token,
            verify=True if cacert is None else cacert,
            duplex=getattr(args, "duplex", True),
        )
    except (ValueError, OSError, ssl.SSLError) as e:
        raise ClientError(f"cannot use the service at {url}: {e}", 2) from None


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """--url and --cacert, for every command that talks to a running service."""
    parser.add_argument(
        "--url",
        metavar="URL",
        help=f"the service's URL (default: $SEALFLOW_URL or {DEFAULT_URL})",
    )
    parser.add_argument(
        "--cacert",
        metavar="FILE",
        help="trust the CA certificates in FILE (PEM) for an https:// service, instead of the "
        "system's",
    )
