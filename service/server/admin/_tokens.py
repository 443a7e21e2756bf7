"""Native token routes: create, list and revoke tokens (scope ``admin``), and a token's own
lookup, renewal and revocation (any token).

The front door requires ``admin`` from the head for every route here but ``/v1/tokens/self``
(``_front._manages_tokens``), before a byte of the body is read; ``admin`` is checked again by
``AdminDep``. Which scopes a token may grant, and a child's lifetime within its parent's, are
``_token_rules``' and the keystore's, the same as for Vault's ``auth/token/create``. A secret
appears once, in the answer to its creation; everything else names tokens by accessor. Every
write is the keystore's, recorded on the audit trail with who asked (``token_create``,
``token_renew``, ``token_revoke``).

Plain ``def`` routes: FastAPI runs them on its thread pool, so a keystore write never blocks
the event loop.
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

from sealflow.service.durations import parse_duration
from sealflow.service.keystore import TokenInfo, TokenNotFound, valid_accessor

from .. import _token_rules, errors
from ._deps import AdminDep, LogDep, ServicesDep, TokenDep
from ._keys import ErrorOut

_ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorOut, "description": what}
    for code, what in (
        (400, "bad_request: an invalid field or duration; not_renewable"),
        (401, "unauthorized, or token_expired"),
        (403, "forbidden: the token lacks admin, or a scope it would grant"),
        (404, "token_not_found"),
        (413, "too_large: the body exceeds 64 KiB"),
        (415, "unsupported_media_type: a body not declared as JSON"),
        (503, "keystore_unavailable"),
    )
}
router = APIRouter(prefix="/v1/tokens", tags=["tokens"], responses=_ERRORS)

Duration = StrictInt | str
_DURATION = "seconds, or Vault's duration text (90s, 30m, 1h, 1h30m)"
Accessor = Annotated[str, Path(max_length=64)]


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scopes: list[str] = Field(
        min_length=1, description="each one held by the caller (a glob covers narrower scopes)"
    )
    label: str = Field("", max_length=256)
    ttl: Duration | None = Field(None, description=f"{_DURATION}; default: the server's")
    explicit_max_ttl: Duration = Field(0, description=f"{_DURATION}; 0: none")
    renewable: StrictBool = True
    num_uses: StrictInt = Field(0, ge=0, description="requests it may make; 0: unlimited")
    orphan: StrictBool = Field(False, description="true: not revoked with the caller")


class TokenRenew(BaseModel):
    model_config = ConfigDict(extra="forbid")

    increment: Duration | None = Field(None, description=f"{_DURATION}; default: its ttl")


class TokenOut(BaseModel):
    accessor: str
    scopes: list[str]
    label: str
    created_at: float = Field(description="Unix time")
    expire_time: float | None = Field(description="Unix time; null: never expires")
    ttl: int = Field(description="seconds left; 0 for a token that never expires")
    creation_ttl: int = Field(description="what a renewal without an increment grants")
    explicit_max_ttl: int
    renewable: bool
    num_uses: int
    uses_left: int | None
    parent: str | None = Field(description="the accessor of the token that created it")
    orphan: bool
    revoked: bool
    expired: bool

    @classmethod
    def of(cls, token: TokenInfo) -> TokenOut:
        now = time.time()
        return cls(
            accessor=token.id,
            scopes=list(token.scopes),
            label=token.label,
            created_at=token.created_at,
            expire_time=token.expire_time,
            ttl=token.ttl_left(now),
            creation_ttl=token.ttl,
            explicit_max_ttl=token.explicit_max_ttl,
            renewable=token.renewable,
            num_uses=token.num_uses,
            uses_left=max(token.num_uses - token.uses, 0) if token.num_uses else None,
            parent=token.parent or None,
            orphan=token.orphan,
            revoked=token.revoked,
            expired=token.expired(now),
        )


class TokenCreated(TokenOut):
    token: str = Field(description="the secret: shown this once, stored only as a digest")
    warnings: list[str]


class TokenRenewed(TokenOut):
    warnings: list[str]


class TokenList(BaseModel):
    tokens: list[TokenOut]


@router.post("", status_code=201, summary="Create a token with scopes the caller holds")
def create_token(body: TokenCreate, svc: ServicesDep, token: AdminDep, log: LogDep) -> TokenCreated:
    lacking = _token_rules.missing(token, body.scopes)
    if lacking:
        raise errors.forbidden(" ".join(lacking))
    minted = _token_rules.mint(
        svc.store,
        token,
        body.scopes,
        body.label,
        ttl=_seconds(body.ttl, "ttl") or None,
        explicit_max_ttl=_seconds(body.explicit_max_ttl, "explicit_max_ttl"),
        renewable=body.renewable,
        num_uses=body.num_uses,
        orphan=body.orphan,
    )
    log.target_accessor = minted.token.id
    out = TokenOut.of(minted.token).model_dump()
    return TokenCreated(**out, token=minted.secret, warnings=list(minted.warnings))


@router.get("", summary="List tokens (no secrets; revoked and expired ones until swept)")
def list_tokens(svc: ServicesDep, _: AdminDep) -> TokenList:
    return TokenList(tokens=[TokenOut.of(t) for t in svc.store.list_tokens()])


@router.get("/self", summary="The caller's own token")
def lookup_self(token: TokenDep) -> TokenOut:
    return TokenOut.of(token)


@router.post("/self/renew", summary="Extend the caller's token, capped at its maximum")
def renew_self(body: TokenRenew, svc: ServicesDep, token: TokenDep) -> TokenRenewed:
    increment = _seconds(body.increment, "increment") or None
    renewal = svc.store.renew_token(token.id, increment)
    out = TokenOut.of(renewal.token).model_dump()
    return TokenRenewed(**out, warnings=list(renewal.warnings))


@router.delete("/self", status_code=204, summary="Revoke the caller's token and its children")
def revoke_self(svc: ServicesDep, token: TokenDep) -> Response:
    svc.store.revoke_token(token.id)
    return Response(status_code=204)


@router.delete("/{accessor}", status_code=204, summary="Revoke a token and its children")
def revoke_token(accessor: Accessor, svc: ServicesDep, _: AdminDep, log: LogDep) -> Response:
    if not valid_accessor(accessor):  # names no token, and stays out of the log
        raise TokenNotFound("no token has this accessor")
    log.target_accessor = accessor
    svc.store.revoke_token(accessor)
    return Response(status_code=204)


def _seconds(value: int | str | None, name: str) -> int:
    if value is None:
        return 0
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise errors.bad_request(f"{name}: {exc}") from None
