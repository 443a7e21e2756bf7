"""How many connections a process may keep open, from its descriptor limit (``RLIMIT_NOFILE``).

A process's descriptors are shared by everything it opens; the connections get what is left
once the rest is set aside:

- ``BASE`` for what the process always holds: standard streams, the listener, the event
  loop's own descriptors, the keystore (SQLite's file, WAL and shared memory; or PostgreSQL's
  pool of at most 4 and its LISTEN connection), log and metrics files;
- one spool file per request in flight (``MAX_CONCURRENT_REQUESTS``): each may spool to a
  file of its own at once.

Connections the kernel has queued (the listen backlog, 2048) need no room of their own here:
under uvloop, which ``serve`` runs, each accepted one reaches the gate (``_gate``), which sheds
one to make room, before descriptors run short. Measured: 2,049 connections queued while the
process was stopped, against 1,024 descriptors, all went through the gate and no accept
failed.

``MAX_CONNECTIONS`` set explicitly wins; ``unsafe`` says when the cap leaves less than this
room (a value set too high, or a descriptor limit too low for even the floor of 16).
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

from sealflow.service.config import Settings

BASE = 64
# Connections allowed however few descriptors there are: a process with fewer is misconfigured
# (the start-up log says so), and a cap of 0 would serve nobody.
_FLOOR = 16


@dataclass(frozen=True, slots=True)
class Capacity:
    descriptors: int  # RLIMIT_NOFILE's soft limit (what the process may open)
    connections: int  # the cap (``_gate``)
    safe: int  # the largest cap that leaves the room above (below 0: none would)

    @property
    def unsafe(self) -> bool:
        return self.connections > self.safe


def descriptor_limit() -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def capacity(settings: Settings, descriptors: int | None = None) -> Capacity:
    limit = descriptor_limit() if descriptors is None else descriptors
    safe = limit - BASE - settings.max_concurrent_requests
    return Capacity(limit, settings.max_connections or max(_FLOOR, safe), safe)
