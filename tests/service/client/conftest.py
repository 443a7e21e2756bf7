"""Clients of the session's real server (tests/service/conftest.py starts it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sealflow import Client
from tests.service.conftest import Server


@pytest.fixture
def api(server: Server) -> Iterator[Client]:
    """A ``Client`` of the session's server with its root token (every scope)."""
    with Client(server.url, server.token) as client:
        yield client
