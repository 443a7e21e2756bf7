"""The service's calls, sans-IO: what each method of ``Client`` and ``AsyncClient`` sends (a
``Plan``) and, for the admin calls, how the answer reads. The two clients differ only in how
they move the bytes, so that their methods cannot drift apart (tests/service/client/
test_namespace.py holds their signatures side by side)."""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from ._keys import ExportedKey, Key
from ._plan import Mode, Plan, decrypt_plan, encrypt_plan, plan
from ._records import Errors, Records
from ._tokens import Token, tokens

T = TypeVar("T")

_OCTETS = b"Content-Type: application/octet-stream\r\n"
_JSON = b"Content-Type: application/json\r\n"


def _headers(aad: bytes | str | None) -> bytes:
    if aad is None:
        return _OCTETS
    raw = aad.encode() if isinstance(aad, str) else bytes(aad)
    return _OCTETS + b"X-AAD: " + base64.b64encode(raw) + b"\r\n"


@functools.lru_cache(maxsize=1024)
def _key(name: str) -> str:
    return f"/v1/keys/{quote(name, safe='')}"


def encrypt(
    key: str, length: int | None, mode: Mode | None, aad: bytes | str | None, duplex: bool
) -> Plan:
    return encrypt_plan(f"{_key(key)}/encrypt", length, _headers(aad), mode, duplex)


def decrypt(key: str | None, length: int | None, aad: bytes | str | None, duplex: bool) -> Plan:
    path = "/v1/decrypt" if key is None else f"{_key(key)}/decrypt"
    return decrypt_plan(path, length, _headers(aad), duplex)


def encrypt_many(key: str, aad: bytes | str | None) -> Records:
    return Records(f"{_key(key)}/encrypt?mode=records", _headers(aad), key)


def decrypt_many(key: str | None, aad: bytes | str | None, errors: Errors) -> Records:
    if errors not in ("raise", "return"):
        raise ValueError(f"errors must be 'raise' or 'return', not {errors!r}")
    path = "/v1/decrypt" if key is None else f"{_key(key)}/decrypt"
    return Records(path + "?mode=records", _headers(aad), None, errors)


@dataclass(frozen=True)
class Admin(Generic[T]):
    """An admin call: its plan, its JSON body (or none), and what its answer means."""

    plan: Plan
    body: bytes
    read: Callable[[Any], T]

    def result(self, answer: bytes) -> T:
        return self.read(json.loads(answer) if answer else None)  # None: a 204 (delete_key)


def _admin(
    method: str,
    path: str,
    read: Callable[[Any], T],
    body: dict[str, Any] | None = None,
    *,
    idempotent: bool = True,
) -> Admin[T]:
    data = b"" if body is None else json.dumps(body).encode()
    headers = b"" if body is None else _JSON
    return Admin(plan(method, path, len(data), headers, idempotent=idempotent), data, read)


def _keys(answer: Any) -> list[Key]:
    return [Key.from_json(k) for k in answer["keys"]]


def _nothing(answer: Any) -> None:
    return None


def create_key(name: str, algorithm: str, exportable: bool) -> Admin[Key]:
    body = {"name": name, "algorithm": algorithm, "exportable": exportable}
    return _admin("POST", "/v1/keys", Key.from_json, body, idempotent=False)


def list_keys() -> Admin[list[Key]]:
    return _admin("GET", "/v1/keys", _keys)


def get_key(name: str) -> Admin[Key]:
    return _admin("GET", _key(name), Key.from_json)


def rotate_key(name: str) -> Admin[Key]:
    return _admin("POST", f"{_key(name)}/rotate", Key.from_json, idempotent=False)


def update_key(name: str, allow_lowering: bool, fields: Mapping[str, object]) -> Admin[Key]:
    """Only the fields that are given (not None) change."""
    body: dict[str, Any] = {k: v for k, v in fields.items() if v is not None}
    if allow_lowering:
        body["allow_lowering"] = True
    return _admin("PATCH", _key(name), Key.from_json, body)


def delete_key(name: str) -> Admin[None]:
    return _admin("DELETE", _key(name), _nothing, idempotent=False)


def export_key(name: str, version: int | None) -> Admin[ExportedKey]:
    query = "" if version is None else f"?version={int(version)}"
    return _admin("GET", f"{_key(name)}/export{query}", ExportedKey.from_json)


def wrapping_key() -> Admin[str]:
    return _admin("GET", "/v1/wrapping-key", lambda answer: str(answer["public_key"]))


def import_key(
    name: str, versions: Sequence[str | None], fields: Mapping[str, object]
) -> Admin[Key]:
    """A whole key: each version's import ciphertext, None for a retired placeholder."""
    body: dict[str, Any] = {
        "versions": [{"placeholder": True} if c is None else {"ciphertext": c} for c in versions],
        **{k: v for k, v in fields.items() if v is not None},
    }
    return _admin("POST", f"{_key(name)}/import", Key.from_json, body, idempotent=False)


def create_token(
    scopes: Sequence[str],
    label: str,
    ttl: int | str | None,
    explicit_max_ttl: int | str,
    renewable: bool,
    num_uses: int,
    orphan: bool,
) -> Admin[Token]:
    fields = {
        "scopes": list(scopes),
        "label": label,
        "ttl": ttl,
        "explicit_max_ttl": explicit_max_ttl,
        "renewable": renewable,
        "num_uses": num_uses,
        "orphan": orphan,
    }
    body = {k: v for k, v in fields.items() if v is not None}
    return _admin("POST", "/v1/tokens", Token.from_json, body, idempotent=False)


def list_tokens() -> Admin[list[Token]]:
    return _admin("GET", "/v1/tokens", tokens)


def revoke_token(accessor: str | None) -> Admin[None]:
    """Revoke the token named by ``accessor`` (and its children); None: the caller's own."""
    path = "/v1/tokens/self" if accessor is None else f"/v1/tokens/{quote(accessor, safe='')}"
    return _admin("DELETE", path, _nothing, idempotent=False)


def lookup_token() -> Admin[Token]:
    return _admin("GET", "/v1/tokens/self", Token.from_json)


def renew_token(increment: int | str | None) -> Admin[Token]:
    body = {"increment": increment}
    return _admin("POST", "/v1/tokens/self/renew", Token.from_json, body, idempotent=False)


def transit_decrypt(mount: str, name: str, ciphertext: str, context: bytes | None) -> Admin[bytes]:
    """Transit's decrypt of one ciphertext (``associated_data``, when given, base64)."""
    body: dict[str, Any] = {"ciphertext": ciphertext}
    if context is not None:
        body["associated_data"] = base64.b64encode(context).decode()
    path = f"/v1/{quote(mount.strip('/'), safe='/')}/decrypt/{quote(name, safe='')}"
    return _admin("POST", path, _plaintext, body)


def _plaintext(answer: Any) -> bytes:
    return base64.b64decode(answer["data"]["plaintext"], validate=True)
