"""sealflow's HTTP protocol in-process, the way uvicorn tests its own protocols: a fake
transport, real parsing, the real app (keystore, plan, routes) behind it."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from sealflow.service.config import Settings
from sealflow.service.keystore import prepare
from sealflow.service.server import http
from sealflow.service.server.app import create_app

from .wire import Wire


class Conn:
    def __init__(self, protocol: http.HttpProtocol, wire: Wire) -> None:
        self.protocol = protocol
        self.wire = wire

    def send(self, data: bytes) -> None:
        self.protocol.data_received(data)

    async def turn(self, seconds: float = 0.02) -> None:
        """Let the loop run: tasks, held answers, timers due by then."""
        await asyncio.sleep(seconds)

    async def answers(self, n: int, within: float = 10.0) -> list[int]:
        """The statuses written once there are n of them (or the deadline passed)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while len(self.wire.statuses()) < n and loop.time() < deadline:
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.01)  # anything written after the n-th comes too
        return self.wire.statuses()


@dataclasses.dataclass
class Service:
    token: str
    state: dict[str, Any]
    config: uvicorn.Config
    server_state: ServerState
    seen: list[tuple[str, str]]  # (method, path) of the requests that reached the ASGI app

    def connect(self, **options: Any) -> Conn:
        state = dict(self.state)
        state[http.OPTIONS] = dataclasses.replace(state[http.OPTIONS], **options)
        protocol = http.HttpProtocol(
            self.config, self.server_state, state, asyncio.get_running_loop()
        )
        wire = Wire()
        protocol.connection_made(wire)  # type: ignore[arg-type]
        return Conn(protocol, wire)


Run = Callable[[Callable[[Service], Awaitable[None]]], None]


@pytest.fixture
def run(tmp_path: Path) -> Run:
    """run(test): the test, an async function of a running ``Service``, on a fresh loop."""

    def runner(test: Callable[[Service], Awaitable[None]], **settings: Any) -> None:
        asyncio.run(_with_service(tmp_path, test, settings))

    return runner


async def _with_service(
    tmp_path: Path, test: Callable[[Service], Awaitable[None]], settings: dict[str, Any]
) -> None:
    async with service(tmp_path, **settings) as svc:
        await test(svc)


@asynccontextmanager
async def service(tmp_path: Path, **settings: Any) -> AsyncIterator[Service]:
    config_settings = Settings(data_dir=tmp_path / "data", **settings)
    token = prepare(config_settings)
    assert token is not None
    app = create_app(config_settings)
    seen: list[tuple[str, str]] = []

    async def watched(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.append((scope["method"], scope["path"]))
        await app(scope, receive, send)

    config = uvicorn.Config(
        watched, http=http.HttpProtocol, timeout_keep_alive=5, proxy_headers=False, lifespan="off"
    )
    config.load()
    async with app.router.lifespan_context(app) as state:
        yield Service(token, dict(state or {}), config, ServerState(), seen)
