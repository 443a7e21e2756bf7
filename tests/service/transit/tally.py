"""The real usage meter, with what was counted through it kept: tests that answer one request
two ways (test_column.py, test_groups.py) compare the sealings and bytes each way counted."""

from __future__ import annotations

import dataclasses
from collections import Counter

from sealflow.service.keystore import Lease, UsageMeter
from sealflow.service.server._state import Services


class Tally:
    """The real meter, with what was counted through it kept per (key, version)."""

    def __init__(self, meter: UsageMeter) -> None:
        self.meter = meter
        self.seen: Counter[tuple[str, int, str]] = Counter()

    def lease(
        self, name: str, version: int | None = None, n: int = 1, derived: bool = False
    ) -> Lease:
        lease = self.meter.lease(name, version, n, derived)
        self.seen[name, lease.version, "sealings"] += lease.sealings
        return lease

    def ready(self, name: str, n: int = 1) -> bool:
        return self.meter.ready(name, n)

    def on_loop(self) -> bool:
        return self.meter.on_loop()

    def add_bytes(self, lease: Lease, nbytes: int) -> None:
        self.seen[lease.key.name, lease.version, "bytes"] += nbytes
        self.meter.add_bytes(lease, nbytes)


def counting(svc: Services) -> tuple[Services, Tally]:
    """``svc`` with its meter wrapped in a ``Tally``, and the tally."""
    tally = Tally(svc.usage)
    return dataclasses.replace(svc, usage=tally), tally  # type: ignore[arg-type]
