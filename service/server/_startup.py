"""Bring the service up: keystore, engine settings, self-test, provider choice, pools."""

from __future__ import annotations

import logging

from sealflow import engine
from sealflow.service.config import Settings
from sealflow.service.keystore import UsageMeter, describe, keystore_keys, open_store

from . import _audit, _compiled, _metrics
from ._budget import MemoryBudget, SpoolBudget
from ._state import Services
from ._watchdog import Watchdog

log = logging.getLogger("sealflow")


# The service sees other processes' keystore writes within this many seconds.
SERVICE_STALENESS = 0.001


def start_services(settings: Settings) -> Services:
    _compiled.check()
    engine.set_context_strategy(engine.ContextStrategy[settings.context_strategy.upper()])
    engine.set_provider(None if settings.provider == "auto" else settings.provider)
    engine.self_test()
    store = open_store(settings, SERVICE_STALENESS)
    crypto = engine.CryptoPool(threads=settings.crypto_threads or None)
    if settings.provider == "auto":  # for as many jobs at once as the pool runs
        engine.calibrate(threads=crypto.parallelism)
    choice = engine.provider_choice()
    _metrics.publish_providers()
    for alg, classes in choice.items():
        log.info("provider", extra={"fields": {"algorithm": alg.value, **classes}})
    log.info(
        "ready",
        extra={
            "fields": {
                "context_strategy": settings.context_strategy,
                "crypto_threads": crypto.threads,
                "keystore": describe(settings),
            }
        },
    )
    watchdog = Watchdog(settings.receive_timeout)
    budget = MemoryBudget(settings.max_buffered_bytes)
    spool_budget = SpoolBudget(settings.max_spool_bytes)
    trail = _audit.open_trail(settings, keystore_keys(settings).secret)
    if trail is not None:
        store.on_change = trail.change  # set before the usage meter's thread starts
    usage = UsageMeter(store)
    return Services(
        settings, store, crypto, engine.BufferPool(), watchdog, budget, spool_budget, usage, trail
    )
