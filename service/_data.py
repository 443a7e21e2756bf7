"""The data-path routes: encrypt and decrypt raw bodies (SPEC section 4).

The routes check the token, the scope, the key and the headers, then return a
streaming ASGI response (``_transfer``) that reads the body itself: nothing of
the body is read before authentication.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request

from . import _auth, _errors
from ._deps import LogDep, ServicesDep, TokenDep
from ._envelope import Mode
from ._keystore import NAME_RE, KeyNotFound
from ._transfer import Decrypt, Encrypt

MAX_AAD = 8192

router = APIRouter(prefix="/v1", tags=["data"])

KeyName = Annotated[str, Path(description="key name", max_length=64)]

_RAW = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
_ERROR = {
    "content": {"application/json": {"example": {"error": {"code": "...", "message": "..."}}}}
}


def _aad(request: Request) -> bytes:
    header = request.headers.get("x-aad")
    if header is None:
        return b""
    try:
        aad = base64.b64decode(header + "=" * (-len(header) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise _errors.bad_request("X-AAD is not valid base64") from None
    if len(aad) > MAX_AAD:
        raise _errors.bad_request(f"X-AAD exceeds {MAX_AAD} bytes")
    return aad


def _length(request: Request) -> int | None:
    value = request.headers.get("content-length")
    # The server has already refused a malformed Content-Length.
    return None if value is None else int(value)


_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": _RAW, "description": "the envelope or the plaintext, streamed"},
    400: {"description": "decryption_failed, malformed_envelope or bad_request", **_ERROR},
    401: {"description": "missing or invalid token", **_ERROR},
    403: {"description": "scope missing, or version_retired", **_ERROR},
    404: {"description": "key_not_found", **_ERROR},
    408: {"description": "body not received in time", **_ERROR},
    413: {"description": "single-shot body over the limit", **_ERROR},
    503: {"description": "too many concurrent requests", **_ERROR},
}
# The body is raw bytes read by the response itself, so OpenAPI is told about it here.
_DATA_ROUTE: dict[str, Any] = {
    "responses": _RESPONSES,
    "openapi_extra": {"requestBody": {"required": True, "content": _RAW}},
    "status_code": 200,
}


@router.post(
    "/keys/{name}/encrypt",
    summary="Seal a body under the key's latest version",
    response_class=Encrypt,
    **_DATA_ROUTE,
)
async def encrypt(
    name: KeyName,
    request: Request,
    svc: ServicesDep,
    token: TokenDep,
    log: LogDep,
    mode: Annotated[Literal["stream", "single"], Query()] = "stream",
) -> Encrypt:
    _auth.require(token, "encrypt", name)
    if NAME_RE.fullmatch(name) is None:
        raise _errors.key_not_found(name)
    try:
        key = svc.store.get_key(name)
        material = svc.store.key_material(name, key.latest)
    except KeyNotFound:
        raise _errors.key_not_found(name) from None
    aad, length = _aad(request), _length(request)
    chosen = Mode.STREAM if mode == "stream" else Mode.SINGLE
    if chosen is Mode.SINGLE and length is not None and length > svc.settings.max_single_bytes:
        raise _errors.too_large(svc.settings.max_single_bytes)
    log.update(key=name, version=key.latest, mode=mode)
    return Encrypt(svc, log, aad, length, key, material, chosen)


@router.post(
    "/keys/{name}/decrypt",
    summary="Open an envelope sealed under this key",
    response_class=Decrypt,
    **_DATA_ROUTE,
)
async def decrypt(
    name: KeyName, request: Request, svc: ServicesDep, token: TokenDep, log: LogDep
) -> Decrypt:
    _auth.require(token, "decrypt", name)
    return Decrypt(svc, log, _aad(request), _length(request), token, name)


@router.post(
    "/decrypt",
    summary="Open an envelope under the key its prefix names",
    response_class=Decrypt,
    **_DATA_ROUTE,
)
async def decrypt_any(request: Request, svc: ServicesDep, token: TokenDep, log: LogDep) -> Decrypt:
    return Decrypt(svc, log, _aad(request), _length(request), token, None)
