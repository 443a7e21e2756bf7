"""Budgets across the requests of one process: memory for buffered bodies, disk for spools.

A single-shot request holds its whole body (and its result) in memory until it
answers, and so does a Transit request (its JSON body, what parsing it makes, its answer);
``max_single_bytes`` and ``max_json_bytes`` bound one request, this bounds them together.
A request that would take the process over the budget gets 503 at once,
instead of the process running out of memory under a burst of large bodies.
Used from the event loop only, so plain integers suffice.
"""

from __future__ import annotations

from types import TracebackType

from . import _metrics, errors


class MemoryBudget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def hold(self) -> Hold:
        return Hold(self)


class Hold:
    """What one request has taken from the budget; all of it returns when the request ends."""

    __slots__ = ("_budget", "taken")

    def __init__(self, budget: MemoryBudget) -> None:
        self._budget = budget
        self.taken = 0

    def take(self, n: int) -> None:
        budget = self._budget
        if budget.used + n > budget.limit:
            raise errors.overloaded()
        budget.used += n
        self.taken += n

    def give_back(self, n: int) -> None:
        """Return n of what was taken, for memory freed before the request ends."""
        self._budget.used -= n
        self.taken -= n

    def __enter__(self) -> Hold:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._budget.used -= self.taken
        self.taken = 0


class SpoolBudget:
    """Disk bytes all spools of this process hold at once. Used from the event loop only."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, n: int) -> None:
        if self.used + n > self.limit:
            raise errors.spool_full()
        self.used += n
        _metrics.SPOOL_BYTES_IN_USE.inc(n)

    def give_back(self, n: int) -> None:
        self.used -= n
        _metrics.SPOOL_BYTES_IN_USE.dec(n)
