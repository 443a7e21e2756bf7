"""The source of ``sealflow migrate from-transit``: a Vault or OpenBao Transit engine, over
its HTTP API with the standard library (a dozen JSON calls per key; no client to install).

Errors carry the source's status and its own words, never the token or a body we sent.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

_TIMEOUT = 60.0


class SourceError(Exception):
    """A call the source refused or could not answer."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class TransitSource:
    def __init__(self, addr: str, token: str, mount: str, cafile: str | None = None) -> None:
        self._base = addr.rstrip("/") + "/v1/" + quote(mount.strip("/"), safe="/") + "/"
        self._token = token
        self._context = ssl.create_default_context(cafile=cafile)

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 (the URL is the operator's --addr)
            self._base + path, data=data, method=method
        )
        request.add_header("X-Vault-Token", self._token)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(  # noqa: S310
                request, timeout=_TIMEOUT, context=self._context
            ) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as e:
            raise SourceError(f"{e.code}: {_words(e.read())}", e.code) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise SourceError(f"cannot reach the source: {reason}") from None
        return json.loads(raw)["data"] if raw.strip() else None

    def list_keys(self) -> list[str]:
        try:
            data = self._call("GET", "keys?list=true")
        except SourceError as e:
            if e.status == 404:  # Transit's answer when it holds no key
                return []
            raise
        return sorted(str(name) for name in data["keys"])

    def key(self, name: str) -> dict[str, Any]:
        data: dict[str, Any] = self._call("GET", f"keys/{_seg(name)}")
        return data

    def import_public_key(self, name: str, pem: str) -> None:
        body = {"type": "rsa-4096", "public_key": pem}
        self._call("POST", f"keys/{_seg(name)}/import", body)

    def delete_key(self, name: str) -> None:
        self._call("POST", f"keys/{_seg(name)}/config", {"deletion_allowed": True})
        self._call("DELETE", f"keys/{_seg(name)}")

    def byok_export(self, destination: str, name: str, version: int) -> str:
        """One version of ``name`` wrapped for the RSA key ``destination`` (SHA-256 OAEP)."""
        path = f"byok-export/{_seg(destination)}/{_seg(name)}/{version}?hash=SHA256"
        return str(self._call("GET", path)["keys"][str(version)])

    def export_material(self, name: str, version: int) -> bytes:
        data = self._call("GET", f"export/encryption-key/{_seg(name)}/{version}")
        return base64.b64decode(data["keys"][str(version)], validate=True)

    def encrypt(self, name: str, plaintext: bytes, version: int) -> str:
        body = {"plaintext": base64.b64encode(plaintext).decode(), "key_version": version}
        return str(self._call("POST", f"encrypt/{_seg(name)}", body)["ciphertext"])


def _seg(name: str) -> str:
    return quote(name, safe="")


def _words(body: bytes) -> str:
    """Transit's ``errors``, one line."""
    try:
        errors = json.loads(body)["errors"]
        text = "; ".join(str(e) for e in errors) or "no reason given"
    except (ValueError, KeyError, TypeError):
        text = body[:200].decode("utf-8", "replace") or "no reason given"
    return " ".join(text.split())[:500]
