"""What a running app holds: settings, keystore, crypto pool, buffers, readiness."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from sealflow import engine
from sealflow.service.config import Settings
from sealflow.service.keystore import KeyStore, UsageMeter

from ._audit import Trail
from ._budget import MemoryBudget, SpoolBudget
from ._watchdog import Watchdog

# Set by the server on the first shutdown signal: /readyz answers 503 from then on.
# Process-wide, like the signal that sets it.
DRAINING = threading.Event()


@dataclass(slots=True)
class Services:
    settings: Settings
    store: KeyStore
    crypto: engine.CryptoPool
    buffers: engine.BufferPool
    watchdog: Watchdog
    budget: MemoryBudget
    spool_budget: SpoolBudget
    usage: UsageMeter
    audit: Trail | None = None  # the audit trail, when a sink is set (``_audit``)
