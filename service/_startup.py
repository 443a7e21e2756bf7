"""Bring the service up: keystore, engine settings, self-test, provider choice, pools."""

from __future__ import annotations

import logging

from sealflow import engine

from . import _metrics
from ._budget import MemoryBudget
from ._masterkey import load_master_key
from ._sqlite import SQLiteKeyStore
from ._state import Services
from ._watchdog import Watchdog
from .config import Settings

log = logging.getLogger("sealflow")


# The service sees other processes' keystore writes within this many seconds.
SERVICE_STALENESS = 0.001


def open_store(settings: Settings, max_staleness: float = 0.0) -> SQLiteKeyStore:
    """The keystore, or KeyStoreUnavailable with a message saying what is wrong."""
    env = settings.master_key.get_secret_value() if settings.master_key else None
    master = load_master_key(env, None if env else settings.master_key_path)
    return SQLiteKeyStore(settings.keystore_path, master, max_staleness)


def start_services(settings: Settings) -> Services:
    engine.set_context_strategy(engine.ContextStrategy[settings.context_strategy.upper()])
    engine.set_provider(None if settings.provider == "auto" else settings.provider)
    engine.self_test()
    choice = engine.provider_choice()
    _metrics.publish_providers()
    for alg, classes in choice.items():
        log.info("provider", extra={"fields": {"algorithm": alg.value, **classes}})
    store = open_store(settings, SERVICE_STALENESS)
    crypto = engine.CryptoPool(threads=settings.crypto_threads or None)
    log.info(
        "ready",
        extra={
            "fields": {
                "context_strategy": settings.context_strategy,
                "crypto_threads": crypto.threads,
                "keystore": str(settings.keystore_path),
            }
        },
    )
    watchdog = Watchdog(settings.receive_timeout)
    budget = MemoryBudget(settings.max_buffered_bytes)
    return Services(settings, store, crypto, engine.BufferPool(), watchdog, budget)
