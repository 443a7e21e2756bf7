from __future__ import annotations

from collections.abc import Iterator

import pytest

from sealflow import engine

from .postgres import Cluster, start_cluster

PROVIDERS = sorted(engine.PROVIDERS)
STRATEGIES = list(engine.ContextStrategy)


@pytest.fixture(
    params=[(p, s) for p in PROVIDERS for s in STRATEGIES],
    ids=[f"{p}-{s.name.lower()}" for p in PROVIDERS for s in STRATEGIES],
)
def impl(request: pytest.FixtureRequest) -> Iterator[tuple[str, engine.ContextStrategy]]:
    """Run the test once per provider and context strategy, restoring the defaults after."""
    provider, strategy = request.param
    before = engine.get_context_strategy()
    engine.set_provider(provider)
    engine.set_context_strategy(strategy)
    try:
        yield provider, strategy
    finally:
        engine.set_provider(None)
        engine.set_context_strategy(before)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Cluster]:
    """A PostgreSQL cluster of the tests' own (tests/postgres.py), for the whole session."""
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.remove()
