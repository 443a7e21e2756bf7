"""The ``transit`` master-key provider: a key in another Vault or OpenBao Transit engine wraps
the keystore's key-encryption key (Vault's "transit seal").

It is called at start-up and by ``rotate-master`` only, never on the request path, so it
speaks HTTP with the standard library (two small JSON calls; no client to install, and no
redirect is followed: the token goes to the configured address only). Each call has bounded
timeouts and is made once: an unreachable Transit stops start-up with one line instead of
hanging it. Messages name the address, mount and key, never the token or any key material.

The wrapped blob is Transit's ciphertext text (``vault:v<N>:<base64>``) as ASCII bytes: it
names the key version that sealed it, so Transit still decrypts it after the key is rotated.
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import socket
import ssl
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

from sealflow.service.config import Settings

from .errors import KeyStoreUnavailable

_T = TypeVar("_T")

_MAX_ANSWER = 64 * 1024  # Transit's answers here are a few hundred bytes
_MAX_TOKEN = 4096
_TOKEN = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no space: a header value as it is
_BLOB = re.compile(rb"vault:v[1-9][0-9]*:[A-Za-z0-9+/]+={0,2}")
_AEAD = "aes256-gcm96, aes128-gcm96, chacha20-poly1305 or xchacha20-poly1305"
# A ciphertext no key opens: the probe that tells a missing or non-AEAD key apart (see wrap).
_PROBE = "vault:v1:" + base64.b64encode(bytes(28)).decode()


class TransitSeal:
    __slots__ = (
        "_addr",
        "_base",
        "_host",
        "_key",
        "_mount",
        "_namespace",
        "_port",
        "_timeout",
        "_tls",
        "_token_file",
    )

    def __init__(
        self,
        addr: str,
        mount: str,
        key: str,
        token_file: Path,
        *,
        ca_file: Path | None = None,
        namespace: str | None = None,
        timeout: float = 5.0,
    ) -> None:
        parts = urlsplit(addr.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise KeyStoreUnavailable(
                f"SEALFLOW_MASTER_KEY_TRANSIT_ADDR must be an http:// or https:// address,"
                f" not {addr!r}"
            )
        if parts.username is not None or parts.password is not None:
            # It would show in every message; the token is the only credential.
            raise KeyStoreUnavailable("SEALFLOW_MASTER_KEY_TRANSIT_ADDR must not hold a user")
        try:
            port = parts.port
        except ValueError:
            raise KeyStoreUnavailable(
                f"SEALFLOW_MASTER_KEY_TRANSIT_ADDR has a bad port: {addr!r}"
            ) from None
        self._addr = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"
        self._host = parts.hostname
        self._port = port
        self._base = f"{parts.path.rstrip('/')}/v1/{quote(mount.strip('/'), safe='/')}"
        self._mount = mount.strip("/")
        self._key = key
        self._token_file = token_file
        self._namespace = namespace or None
        self._timeout = timeout
        self._tls = _tls_context(ca_file) if parts.scheme == "https" else None

    @classmethod
    def from_settings(cls, settings: Settings) -> TransitSeal:
        addr = _needed(settings.master_key_transit_addr, "ADDR", "the Transit server's address")
        key = _needed(settings.master_key_transit_key, "KEY", "the sealing key's name")
        token_file = _needed(
            settings.master_key_transit_token_file, "TOKEN_FILE", "a file holding the token"
        )
        return cls(
            addr,
            settings.master_key_transit_mount,
            key,
            token_file,
            ca_file=settings.master_key_transit_ca_file,
            namespace=settings.master_key_transit_namespace,
            timeout=settings.master_key_transit_timeout,
        )

    def describe(self) -> dict[str, str]:
        """Where the KEK is sealed, to keep beside it: never the token."""
        found = {"addr": self._addr, "mount": self._mount, "key": self._key}
        if self._namespace:
            found["namespace"] = self._namespace
        return found

    def wrap(self, kek: bytes, aad: bytes) -> bytes:
        """``kek`` sealed by the Transit key, bound to ``aad``: Transit's ``vault:vN:`` text."""
        context = _aad(aad)
        self._probe(context)
        data = self._call(
            "encrypt",
            {"plaintext": base64.b64encode(kek).decode(), "associated_data": context},
        )
        blob = data.get("ciphertext")
        if not isinstance(blob, str) or not _BLOB.fullmatch(blob.encode("ascii", "replace")):
            raise self._error("encrypt answered without a Transit ciphertext")
        return blob.encode("ascii")

    def unwrap(self, blob: bytes, aad: bytes) -> bytes:
        """The KEK sealed in ``blob`` by ``wrap`` with the same ``aad`` (any key version)."""
        if not _BLOB.fullmatch(blob):
            raise self._error("the wrapped KEK is not a Transit ciphertext (vault:v<N>:...)")
        data = self._call("decrypt", {"ciphertext": blob.decode(), "associated_data": _aad(aad)})
        plaintext = data.get("plaintext")
        try:
            if isinstance(plaintext, str):
                return base64.b64decode(plaintext, validate=True)
        except ValueError:
            pass
        raise self._error("decrypt answered without a plaintext")

    def _probe(self, context: str) -> None:
        """Transit's encrypt creates a key it does not have when the token may (upsert): a
        mistyped name would seal the KEK under a new key. A decrypt of a placeholder first
        refuses a missing or non-AEAD key, and a token that could not unwrap what it wraps."""
        body = {"ciphertext": _PROBE, "associated_data": context}
        status, words = self._send("decrypt", body)
        if status == 200:
            raise self._error("decrypt opened a placeholder: not a Transit engine")
        if status == 400 and "encryption key not found" not in words and "non-AEAD" not in words:
            return  # the placeholder did not open: the key is there, AEAD, and may decrypt
        raise self._error(_reason("decrypt", status, words, self._mount, self._key))

    def _call(self, operation: str, body: dict[str, str]) -> dict[str, Any]:
        """Transit's ``data`` of a 200 answer; any other answer refused with its words."""
        status, text = self._send(operation, body)
        if status != 200:
            raise self._error(_reason(operation, status, text, self._mount, self._key))
        try:
            data = json.loads(text)["data"]
        except (ValueError, KeyError, TypeError):
            data = None
        if not isinstance(data, dict):
            raise self._error(f"{operation} answered 200 without JSON data")
        return data

    def _send(self, operation: str, body: dict[str, str]) -> tuple[int, str]:
        """The status and, for a 200, the body; else Transit's words, never the token."""
        token = self._token()
        headers = {"X-Vault-Token": token, "Content-Type": "application/json"}
        if self._namespace:
            headers["X-Vault-Namespace"] = self._namespace
        path = f"{self._base}/{operation}/{quote(self._key, safe='')}"
        status, raw = self._post(path, json.dumps(body).encode(), headers)
        if status == 200:
            return status, raw.decode("utf-8", "replace")
        return status, _words(raw).replace(token, "[token]")

    def _post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        connection: http.client.HTTPConnection
        if self._tls is None:
            connection = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
        else:
            connection = http.client.HTTPSConnection(
                self._host, self._port, timeout=self._timeout, context=self._tls
            )
        try:
            connection.request("POST", path, body=body, headers=headers)
            # Closed here: an answer without a length (Go's plain 400 to an HTTP request on its
            # TLS port) would keep the socket open after a bounded read.
            with connection.getresponse() as answer:
                return answer.status, answer.read(_MAX_ANSWER)
        except ssl.SSLCertVerificationError as exc:
            raise self._error(f"TLS: {exc.verify_message or exc.reason}") from None
        except ssl.SSLError as exc:
            raise self._error(f"TLS: {exc.reason or type(exc).__name__}") from None
        except socket.gaierror as exc:
            raise self._error(f"cannot resolve {self._host}: {exc.strerror}") from None
        except TimeoutError:
            raise self._error(f"no answer within {self._timeout:g} s") from None
        except (OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "strerror", None) or type(exc).__name__
            raise self._error(f"cannot reach it: {reason}") from None
        finally:
            connection.close()

    def _token(self) -> str:
        where = f"SEALFLOW_MASTER_KEY_TRANSIT_TOKEN_FILE {self._token_file}"
        try:
            with self._token_file.open("rb") as f:
                raw = f.read(_MAX_TOKEN + 1)
        except OSError as exc:
            raise self._error(f"cannot read {where}: {exc.strerror}") from None
        token = raw.decode("latin-1").strip()
        if not token:
            raise self._error(f"{where} is empty")
        if len(raw) > _MAX_TOKEN or not _TOKEN.fullmatch(token):
            raise self._error(f"{where} does not hold one token (printable ASCII, one line)")
        return token

    def _error(self, reason: str) -> KeyStoreUnavailable:
        return KeyStoreUnavailable(
            f"transit master key {self._mount}/{self._key} at {self._addr}: {reason}"
        )


def _needed(value: _T | None, suffix: str, what: str) -> _T:
    if value is None or value == "":
        name = f"SEALFLOW_MASTER_KEY_TRANSIT_{suffix}"
        flag = "--" + name.removeprefix("SEALFLOW_").lower().replace("_", "-")
        raise KeyStoreUnavailable(f"the transit master-key provider needs {name} ({flag}): {what}")
    return value


def _tls_context(ca_file: Path | None) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cafile=None if ca_file is None else str(ca_file))
    except ssl.SSLError:  # an OSError too: first
        raise KeyStoreUnavailable(
            f"SEALFLOW_MASTER_KEY_TRANSIT_CA_FILE {ca_file} holds no PEM certificate"
        ) from None
    except OSError as exc:
        raise KeyStoreUnavailable(
            f"cannot read SEALFLOW_MASTER_KEY_TRANSIT_CA_FILE {ca_file}: {exc.strerror}"
        ) from None


def _aad(aad: bytes) -> str:
    # Transit skips its AEAD check when associated_data is empty, and would then seal under an
    # RSA key that ignores it: the binding must always be there.
    if not aad:
        raise ValueError("the transit seal needs non-empty associated data")
    return base64.b64encode(aad).decode()


def _words(raw: bytes) -> str:
    """Transit's error text on one line, short: ``{"errors": [...]}`` or the body itself."""
    try:
        errors = json.loads(raw)["errors"]
        text = "; ".join(str(e) for e in errors)
    except (ValueError, KeyError, TypeError):
        # Not Transit's shape: a proxy's page, or plain text as Go's "HTTP to HTTPS" answer.
        text = raw.decode("utf-8", "replace")
    # Multierror's wrapper ("1 error occurred:\n\t* permission denied\n\n") to its words.
    text = re.sub(r"\d+ errors? occurred:\s*\*?", "", text)
    text = " ".join(text.replace("\t*", ";").split()).strip("; ")
    return text[:200] or "no error text"


def _reason(operation: str, status: int, words: str, mount: str, key: str) -> str:
    if status == 403:
        return (
            f"refused ({words}): the token is invalid or expired, or its policy lacks update on"
            f" {mount}/encrypt/{key} and {mount}/decrypt/{key}"
        )
    if status == 400 and "encryption key not found" in words:
        return f"no such key ({words})"
    if status == 400 and "non-AEAD" in words:
        return f"the key is not an AEAD key ({words}); the sealing key must be {_AEAD}"
    if status == 400 and "message authentication failed" in words:
        return (
            f"the wrapped KEK does not open ({words}): another key, other associated data,"
            " or a changed blob"
        )
    if status == 404:
        return f"no Transit engine at {mount} ({status}: {words})"
    return f"{operation} answered {status}: {words}"
