"""``sealflow encrypt`` / ``sealflow decrypt``: stream stdin or a file through the service.

The transfer is the client library's (``sealflow.service.client.Client``: full duplex,
typed errors); this module reads the arguments, opens the input and the output, draws the
progress bar and words failures.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import stat
import sys
import types
from typing import IO, Any, BinaryIO

from sealflow.service.client import DecryptionFailed, SealflowError, TransportError

from ._connect import add_connection_options, one_line, open_client
from ._errors import ClientError
from ._output import Output

_BAR_DELAY = 0.5  # short transfers get no bar
_EITHER = (
    " (either the connection was lost, or a later part of the input failed to decrypt and a "
    "proxy did not pass on the service's word for it; --no-duplex tells them apart)"
)
_DECRYPTION_FAILED = (
    "decryption failed: the input was modified or truncated, or sealed with another key or AAD"
)

# Even a disabled tqdm starts tqdm's monitor thread: without a terminal, use no tqdm at all.
_NO_BAR = types.SimpleNamespace(update=lambda n: None, close=lambda: None, n=0)


def _cut_off(e: BaseException) -> bool:
    """A full-duplex answer that ended early without the service's signal: a lost
    connection, or a later chunk that failed with the signal dropped by a proxy."""
    return isinstance(e, TransportError) and str(e).startswith("connection lost after")


def _bar(src: IO[bytes]) -> Any:
    """A progress bar on stderr when it is a terminal (tqdm takes 50 ms to import)."""
    if not sys.stderr.isatty():
        return _NO_BAR
    from tqdm import tqdm  # type: ignore[import-untyped]

    size = None
    with contextlib.suppress(OSError, ValueError):  # ValueError: no fd
        st = os.fstat(src.fileno())
        size = (st.st_size - src.tell()) or None if stat.S_ISREG(st.st_mode) else None
    return tqdm(total=size, unit="B", unit_scale=True, unit_divisor=1024, delay=_BAR_DELAY)


def _run(args: argparse.Namespace, command: str) -> int:
    # Standard input unbuffered (the buffer's raw file, when it has one): the client reads it
    # on a daemon thread, and a thread blocked in a *buffered* read holds that buffer's lock,
    # which the interpreter then cannot take at exit (a fatal error and SIGABRT when the
    # command ends early, a failed decrypt with input still coming).
    stdin: BinaryIO = getattr(sys.stdin.buffer, "raw", sys.stdin.buffer)
    src, out, ok = stdin, None, False
    bar: Any = _NO_BAR
    try:
        with open_client(args) as client:
            try:
                if args.input not in (None, "-"):
                    src = open(args.input, "rb")  # noqa: SIM115 (closed in the finally below)
                out = Output(args.output, binary=command == "encrypt")
            except OSError as e:
                raise ClientError(f"cannot open {e.filename!r}: {e.strerror}", 2) from None
            bar = _bar(src)
            progress = None if bar is _NO_BAR else lambda sent, _: bar.update(sent - bar.n)
            # surrogateescape gives back the exact argv bytes when they are not UTF-8.
            aad = None if args.aad is None else args.aad.encode("utf-8", "surrogateescape")
            # The file itself, not a wrapper: a regular file then goes by sendfile (see the
            # client). Its exceptions pass through the client unchanged, and the output's are
            # ClientErrors already: an OSError here is the input's.
            try:
                if command == "encrypt":
                    client.encrypt(
                        args.key, src, mode=args.mode, aad=aad, out=out, on_progress=progress
                    )
                else:
                    client.decrypt(src, key=args.key, aad=aad, out=out, on_progress=progress)
            except OSError as e:
                raise ClientError(f"cannot read the input: {e}") from None
        out.commit()
        ok = True
        return 0
    except (ClientError, SealflowError, KeyboardInterrupt) as e:
        bar.close()
        if isinstance(e, ClientError):
            code = e.code
        else:
            code = 130 if isinstance(e, KeyboardInterrupt) else 1
        what = (
            "" if code == 2 else f"{command} interrupted" if code == 130 else f"{command} failed: "
        )
        # One wording for a failed authentication, whichever transport: the service's 400
        # (request-then-response) or its in-band signal before the cut-off (full duplex).
        text = _DECRYPTION_FAILED if isinstance(e, DecryptionFailed) else one_line(str(e))
        if command == "decrypt" and args.duplex and _cut_off(e):
            text += _EITHER
        print(f"sealflow: {what}{text}", file=sys.stderr)
        return code
    finally:
        bar.close()
        if out is not None and not ok:
            out.discard()
        if src is not stdin:
            src.close()


def _encrypt(args: argparse.Namespace) -> int:
    return _run(args, "encrypt")


def _decrypt(args: argparse.Namespace) -> int:
    return _run(args, "decrypt")


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
            p.add_argument(
                "--mode",
                choices=("stream", "single"),
                default="stream",
                help="stream: sealed in 16 KiB chunks as it arrives, any size (default); "
                "single: one AEAD message, up to the service's single-shot limit",
            )
        else:
            p.add_argument("--key", metavar="NAME", help="require the envelope to use this key")
        p.add_argument("--aad", metavar="TEXT", help="additional authenticated data (UTF-8)")
        add_connection_options(p)
        p.add_argument(
            "--duplex",
            action=argparse.BooleanOptionalAction,
            default=True,
            help='full duplex (the default, the faster: docs/BENCHMARKS.md, "CLI transports"):'
            " the answer streams back while the input is sent; --no-duplex: the service "
            "answers once it has read the whole input (for proxies such as nginx)",
        )
        p.add_argument("-i", "--input", metavar="FILE", help="read FILE instead of stdin")
        p.add_argument(
            "-o",
            "--output",
            metavar="FILE",
            help="write FILE: a regular file is replaced only on success, a FIFO or character "
            "device is written in place, a symbolic link is refused; '-' is stdout"
            + (", even a terminal" if name == "encrypt" else ""),
        )
        p.set_defaults(func=func)
