"""Route dependencies as ``Annotated`` aliases, so routes declare typed parameters only.

All are ``async def``: FastAPI would run a plain ``def`` dependency on its
thread pool, a thread hop per request for work that takes microseconds.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from sealflow.service.keystore import TokenInfo

from .. import _auth
from .._logging import AccessRecord
from .._state import Services

# auto_error=False: a missing or malformed header is our 401 in our error format.
_bearer = HTTPBearer(auto_error=False, description="a sealflow token")


async def _services(request: Request) -> Services:
    svc: Services = request.app.state.services
    return svc


ServicesDep = Annotated[Services, Depends(_services)]


async def _token(
    request: Request,
    svc: ServicesDep,
    _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> TokenInfo:
    # HTTPBearer documents the scheme in OpenAPI. The front door has authenticated the
    # request already, before reading its body (and refused it unless it has admin).
    token: TokenInfo | None = request.scope.get("sealflow.token")
    if token is None:  # not through the front door (an app embedded elsewhere)
        token = _auth.authenticate(svc.store, request.headers.get("authorization"))
    return token


TokenDep = Annotated[TokenInfo, Depends(_token)]


async def _admin(token: TokenDep) -> TokenInfo:
    _auth.require_admin(token)
    return token


AdminDep = Annotated[TokenInfo, Depends(_admin)]


async def _log(request: Request) -> AccessRecord:
    """The request's access-log record, filled in by the route (see _front)."""
    log: AccessRecord = request.scope["sealflow.log"]
    return log


LogDep = Annotated[AccessRecord, Depends(_log)]
