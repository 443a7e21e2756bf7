"""HTTPS: the server's certificate and key, the client CAs, and their reload on SIGHUP.

uvicorn asks for its listener's ``SSLContext`` through its public ``ssl_context_factory``
(``listener``, called in every serving process: each worker makes its own). That first context
stays the listener's for the life of the process; what a reload changes is the *current*
context, built whole from the files as they are then (``load``). The listener's SNI callback,
which OpenSSL calls for every ClientHello, with a server name or without, moves each new
connection onto the current context (``SSLObject.context``) before the server's certificate is
chosen or the client's verified: new handshakes see the new files, connections already made
keep the context they were made with, and nothing is closed.

A reload (``reload``, on SIGHUP: ``install_hangup``) builds its context before it is used, so a
file that cannot be read, is not PEM, a key that does not match its certificate or a client CA
file with no certificate leaves the current context in use; one log line says what was loaded,
or why nothing was.

With client CAs the server asks every client for a certificate (``--tls-client-auth``
optional: one that sends none still connects; required: the handshake fails) and verifies one
that is sent against the CAs of that moment; it issues no session tickets, so a TLS 1.3
connection is verified in a full handshake, against the CAs then loaded (a TLS 1.2 client may
still resume a session from OpenSSL's session-ID cache: docs/SERVICE.md, "Noticed").
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import logging
import os
import signal
import ssl
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from uvicorn.config import STARTUP_FAILURE

log = logging.getLogger("sealflow")


@dataclass(frozen=True, slots=True)
class Files:
    """Where the TLS material is (the settings' paths): read at start and on each reload.
    Plain data, so that uvicorn can hand the factory to its worker processes."""

    cert: Path
    key: Path
    client_ca: Path | None = None
    client_auth: Literal["optional", "required"] = "optional"


class TlsError(Exception):
    """Files that make no context; the message says which and why (never their content)."""


@dataclass(frozen=True, slots=True)
class Loaded:
    """A context built from the files, and what the log says of it."""

    context: ssl.SSLContext
    subject: str
    serial: str
    not_after: datetime.datetime
    fingerprint: str  # SHA-256 of the server certificate's DER, lowercase hex
    client_cas: int  # certificates in the client CA file (0: none asked for)

    def fields(self, files: Files) -> dict[str, object]:
        fields: dict[str, object] = {
            "cert": str(files.cert),
            "key": str(files.key),
            "subject": self.subject,
            "serial": self.serial,
            "not_after": self.not_after.isoformat(),
            "fingerprint": self.fingerprint,
            "pid": os.getpid(),
        }
        if files.client_ca is not None:
            fields["client_ca"] = str(files.client_ca)
            fields["client_cas"] = self.client_cas
            fields["client_auth"] = files.client_auth
        return fields


def load(files: Files) -> Loaded:
    """A server context from the files as they are now, or ``TlsError``."""
    certs = _certificates(files.cert)
    with _reading(files.key):
        files.key.open("rb").close()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        # No password: an encrypted key fails here rather than prompting on a terminal.
        context.load_cert_chain(files.cert, files.key, password=_no_password)
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise TlsError(f"the key {files.key} does not match the certificate") from None
        raise TlsError(f"{files.key}: not a usable PEM private key ({exc.reason})") from None
    except OSError as exc:
        raise TlsError(f"cannot read {exc.filename or files.key}: {exc.strerror}") from None
    cas: list[x509.Certificate] = []
    if files.client_ca is not None:
        cas = _certificates(files.client_ca)
        context.load_verify_locations(cadata=b"".join(ca.public_bytes(Encoding.DER) for ca in cas))
        required = files.client_auth == "required"
        context.verify_mode = ssl.CERT_REQUIRED if required else ssl.CERT_OPTIONAL
        # A resumed session skips verification: each connection is verified in full instead,
        # against the CAs loaded when it is made.
        context.num_tickets = 0
        context.options |= ssl.OP_NO_TICKET
    leaf = certs[0]
    return Loaded(
        context=context,
        subject=leaf.subject.rfc4514_string(),
        serial=format(leaf.serial_number, "x"),
        not_after=leaf.not_valid_after_utc,
        fingerprint=hashlib.sha256(leaf.public_bytes(Encoding.DER)).hexdigest(),
        client_cas=len(cas),
    )


def _certificates(path: Path) -> list[x509.Certificate]:
    with _reading(path):
        pem = path.read_bytes()
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise TlsError(f"{path} holds no PEM certificate") from None


class _reading:
    """Turns a file's OSError into a ``TlsError`` naming it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, OSError):
            raise TlsError(f"cannot read {self.path}: {exc.strerror}") from None


def _no_password() -> bytes:
    return b""


class Tls:
    """The process's TLS: the listener's context and the current one new handshakes get."""

    def __init__(self, files: Files, loaded: Loaded) -> None:
        self.files = files
        self.loaded = loaded
        self.listener = loaded.context
        self.listener.sni_callback = self._pick

    def _pick(self, conn: ssl.SSLObject, name: str | None, context: ssl.SSLContext) -> None:
        current = self.loaded.context
        if current is not context:
            conn.context = current

    def reload(self) -> bool:
        """Build a context from the files and make it current; on failure keep the one in use.
        Either way one log line."""
        files = self.files
        try:
            loaded = load(files)
        except TlsError as exc:
            fields = {
                "cert": str(files.cert),
                "key": str(files.key),
                "error": str(exc),
                "serial": self.loaded.serial,  # the certificate that stays
                "pid": os.getpid(),
            }
            if files.client_ca is not None:
                fields["client_ca"] = str(files.client_ca)
            log.error(
                "TLS reload failed: the certificate, key and client CAs in use stay",
                extra={"fields": fields},
            )
            return False
        self.loaded = loaded
        _log_loaded("TLS reloaded", loaded, files)
        return True


# This process's TLS, once uvicorn has asked for the listener's context (None: plain HTTP).
_active: Tls | None = None


def listener(files: Files, config: Any, default: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
    """uvicorn's ``ssl_context_factory`` (with ``files`` bound): the listener's context, made
    once in each process that serves. uvicorn's own ``default`` is not used."""
    global _active
    try:
        loaded = load(files)
    except TlsError as exc:  # the files changed since ``serve`` checked them
        log.error("TLS: %s", exc)
        # uvicorn's code for a worker that cannot start: its supervisor stops, not retries.
        sys.exit(STARTUP_FAILURE)
    _active = Tls(files, loaded)
    return _active.listener  # logged by ``install_hangup``, once logging is set up


def _log_loaded(message: str, loaded: Loaded, files: Files) -> None:
    fields = loaded.fields(files)
    if loaded.not_after <= datetime.datetime.now(datetime.UTC):
        fields["expired"] = True
        log.warning(message + " (the certificate has expired)", extra={"fields": fields})
    else:
        log.info(message, extra={"fields": fields})


def reload() -> None:
    """SIGHUP: reload the TLS files, or say there are none."""
    if _active is None:
        log.info(
            "SIGHUP: TLS is off (no --tls-cert), nothing to reload",
            extra={"fields": {"pid": os.getpid()}},
        )
        return
    _active.reload()


def install_hangup() -> Callable[[], None]:
    """Handle SIGHUP on the running loop (``reload``), from the app's lifespan; returns what
    removes the handler. Only on the main thread (in-process tests run elsewhere).

    Also logs what the listener's context was made of: uvicorn makes it before it loads the
    app, whose factory sets logging up (in a worker process nothing is logged before that)."""
    if _active is not None:
        _log_loaded("TLS certificate loaded", _active.loaded, _active.files)
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, reload)

    def remove() -> None:
        loop.remove_signal_handler(signal.SIGHUP)

    return remove
