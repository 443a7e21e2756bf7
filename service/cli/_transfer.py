"""``sealflow encrypt`` / ``sealflow decrypt``: stream stdin or a file through the service.

The transfer itself is ``sealflow.service.client.exchange`` (full duplex); this module reads
the arguments, opens the input and the output, draws the progress bar and words failures.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import errno
import fcntl
import os
import re
import stat
import sys
import tempfile
import types
from typing import IO, Any
from urllib.parse import quote, urlsplit

from tqdm import tqdm  # type: ignore[import-untyped]

from sealflow.service.client import ClientError, exchange

_BAR_DELAY = 0.5  # short transfers get no bar
_DEFAULT_URL = "http://127.0.0.1:8080"

# Even a disabled tqdm starts tqdm's monitor thread: without a terminal, use no tqdm at all.
_NO_BAR = types.SimpleNamespace(update=lambda n: None, close=lambda: None)


class _Output:
    """stdout, or a temporary file beside --output that replaces it only on success."""

    def __init__(self, path: str | None) -> None:
        self.path, self.tmp, self.rewind = path, "", -1
        if path is None or path == "-":
            self.f: IO[bytes] = sys.stdout.buffer
            with contextlib.suppress(OSError, ValueError):  # ValueError: no fd (tests)
                fd = self.f.fileno()
                st = os.fstat(fd)
                if stat.S_ISREG(st.st_mode):
                    # On failure truncate back to where our output starts: `>>` appends.
                    append = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND
                    self.rewind = st.st_size if append else self.f.tell()
            return
        if os.path.isdir(path):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        folder, name = os.path.split(os.path.abspath(path))
        fd, self.tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=folder)
        self.f = os.fdopen(fd, "wb")

    def write(self, data: bytes) -> None:
        try:
            self.f.write(data)
        except OSError as e:
            raise ClientError(f"cannot write the output: {e}") from None

    def commit(self) -> None:
        try:
            self.f.flush()
            if self.path and self.tmp:
                os.fsync(self.f.fileno())
                self.f.close()
                os.replace(self.tmp, self.path)
        except OSError as e:
            raise ClientError(f"cannot write the output: {e}") from None

    def discard(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            if self.tmp:
                self.f.close()
                os.unlink(self.tmp)
            elif self.rewind >= 0:
                self.f.flush()
                self.f.seek(self.rewind)
                self.f.truncate()


def _settings(args: argparse.Namespace) -> tuple[str, list[tuple[str, str]]]:
    """The URL and the request headers, or a usage error."""
    token = os.environ.get("SEALFLOW_TOKEN", "").strip()
    if not token:
        raise ClientError("SEALFLOW_TOKEN is not set (export a token with the needed scope)", 2)
    # h11 would quote a bad header value, the token, in its error: refuse it first.
    if not re.fullmatch(r"[\x21-\x7e]+", token):
        raise ClientError("SEALFLOW_TOKEN has characters not allowed in an HTTP header", 2)
    url = (args.url or os.environ.get("SEALFLOW_URL") or _DEFAULT_URL).rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
        raise ClientError(f"the URL must look like http(s)://host[:port][/prefix], not {url!r}", 2)
    headers = [
        ("Authorization", f"Bearer {token}"),
        ("Content-Type", "application/octet-stream"),
        # Lets the server refuse (401, 403, 404) before a large body is sent for nothing.
        ("Expect", "100-continue"),
    ]
    if args.aad is not None:
        # surrogateescape gives back the exact argv bytes when they are not UTF-8.
        aad = args.aad.encode("utf-8", "surrogateescape")
        headers.append(("X-AAD", base64.b64encode(aad).decode()))
    return url, headers


def _run(args: argparse.Namespace, command: str, target: str) -> int:
    src, out, ok = sys.stdin.buffer, None, False
    bar: Any = _NO_BAR
    try:
        url, headers = _settings(args)
        try:
            if args.input not in (None, "-"):
                src = open(args.input, "rb")  # noqa: SIM115 (closed in the finally below)
            out = _Output(args.output)
        except OSError as e:
            raise ClientError(f"cannot open {e.filename!r}: {e.strerror}", 2) from None
        size = None
        with contextlib.suppress(OSError, ValueError):  # ValueError: no fd (a test's BytesIO)
            st = os.fstat(src.fileno())
            # Zero may be a /proc file that does have content: those go chunked.
            size = (st.st_size - src.tell()) or None if stat.S_ISREG(st.st_mode) else None
        headers.append(("Content-Length", str(size)) if size else ("Transfer-Encoding", "chunked"))
        if sys.stderr.isatty():
            bar = tqdm(total=size, unit="B", unit_scale=True, unit_divisor=1024, delay=_BAR_DELAY)
        asyncio.run(exchange(url, urlsplit(url).path + target, headers, src, out, bar))
        out.commit()
        ok = True
        return 0
    except (ClientError, KeyboardInterrupt) as e:
        bar.close()
        code = e.code if isinstance(e, ClientError) else 130
        what = (
            "" if code == 2 else f"{command} interrupted" if code == 130 else f"{command} failed: "
        )
        print(f"sealflow: {what}{e}", file=sys.stderr)
        return code
    finally:
        bar.close()
        if out is not None and not ok:
            out.discard()
        if src is not sys.stdin.buffer:
            src.close()


def _encrypt(args: argparse.Namespace) -> int:
    return _run(args, "encrypt", f"/v1/keys/{quote(args.key, safe='')}/encrypt?mode={args.mode}")


def _decrypt(args: argparse.Namespace) -> int:
    key = f"/keys/{quote(args.key, safe='')}" if args.key else ""
    return _run(args, "decrypt", f"/v1{key}/decrypt")


def add_client_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``encrypt`` and ``decrypt`` (token from SEALFLOW_TOKEN) on the subparsers."""
    for name, func in (("encrypt", _encrypt), ("decrypt", _decrypt)):
        p = commands.add_parser(
            name,
            help=f"{name} stdin or --input through the service to stdout or --output",
            description=f"{name.capitalize()} through the service; the token is SEALFLOW_TOKEN.",
        )
        if name == "encrypt":
            p.add_argument("--key", required=True, metavar="NAME", help="key to seal under")
            p.add_argument("--mode", choices=("stream", "single"), default="stream")
        else:
            p.add_argument("--key", metavar="NAME", help="require the envelope to use this key")
        p.add_argument("--aad", metavar="TEXT", help="additional authenticated data (UTF-8)")
        p.add_argument("--url", help=f"service URL (default: $SEALFLOW_URL or {_DEFAULT_URL})")
        p.add_argument("-i", "--input", metavar="FILE", help="read FILE instead of stdin")
        p.add_argument("-o", "--output", metavar="FILE", help="write FILE, only on success")
        p.set_defaults(func=func)
