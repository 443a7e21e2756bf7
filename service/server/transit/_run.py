"""A Transit data request (encrypt, decrypt, rewrap) run group by group, in bounded memory.

A plan reads and checks the whole request first (``_items.read``: the JSON, the number of
items, every item's fields), so that a request refused is refused before any key is used. Then
the memory its answer may take is taken from the budget at once (``answer_bound``): a batch
that starts is never refused half done, with sealings counted for results never sent. Then the
groups come one at a time: each checked and leased on the event loop (in a thread when a lease
may need the keystore: ``Plan.waits``), sealed or opened on the crypto pool (inline when
small), and encoded; between two groups the event loop serves other requests. What a batch
holds at once is its body, its answer so far and one group (docs/TRANSIT.md, Limits).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar, cast

from .._budget import Hold
from .._state import Services
from ._batch import Answer, Part, answer
from ._items import Reading
from ._wire import Body

# What one item's result may add to the answer beyond its entry in the request: a result's
# fixed fields and a ciphertext's 40 bytes of nonce and tag in base64 (an encrypt), or the
# longest of Transit's per-item errors, against the 16 bytes of the smallest entry.
ROW_BYTES = 160
_ENVELOPE = 4096  # the envelope around the results, warnings included
P = TypeVar("P", bound="Plan")
Step = tuple[int, Callable[[], Part]]  # a single request's step: the bytes it seals, the call


class Plan(Protocol):
    fields: Body  # the request's top-level fields (a batch's without batch_input)
    count: int  # its items
    batch: bool  # from batch_input (else a single request, answered without the wrapping)
    partial: bool  # whether a failed item makes the batch's status 400

    def steps(self) -> Iterator[tuple[int, Callable[[], Part | None]]]:
        """Each group's work in order: the bytes a step seals or opens (the crypto pool's
        measure) and the call that does it; a group's last step returns its part of the
        answer (the others None). The next step is asked for once the last one is done."""
        ...

    def waits(self) -> bool:
        """Whether making its steps may need the keystore (a lease not served from what
        this process holds): then they are made off the event loop (``run``)."""
        ...


def answer_bound(size: int, count: int) -> int:
    """The most a request of ``size`` bytes and ``count`` items may answer."""
    return size + ROW_BYTES * count + _ENVELOPE


async def run(svc: Services, reading: Reading[Plan], hold: Hold, size: int) -> Answer:
    """The request read (``reading``: the plan's making, in steps), then run group by group,
    another request's turn between two steps of reading and between two groups."""
    plan = await _read(reading)
    hold.take(answer_bound(size, plan.count))
    parts: list[Part] = []
    ended = 0  # groups ended when the last step began
    steps = plan.steps()
    # Nothing that waits on the database runs on the event loop: a plan whose leases may need
    # the keystore has its steps made (checked and leased) in a thread, one at a time.
    waits = plan.waits()
    while True:
        found = await asyncio.to_thread(next, steps, None) if waits else next(steps, None)
        if found is None:
            break
        n, step = found
        if len(parts) > ended:
            ended = len(parts)
            await asyncio.sleep(0)
        done = await svc.crypto.run(n, step)
        if done is not None:
            parts.append(done)
    return _finish(plan, parts)


def run_now(reading: Reading[Plan], hold: Hold, size: int) -> Answer:
    """``run`` on the spot, every step on the event loop (a small request: one group)."""
    plan = planned(reading)
    hold.take(answer_bound(size, plan.count))
    done = (step() for _, step in plan.steps())
    return _finish(plan, [part for part in done if part is not None])


async def run_single(
    svc: Services, hold: Hold, size: int, waits: bool, make: Callable[[], Step]
) -> Answer:
    """``run`` for a single request (one item, no ``batch_input``: ``_items.single``), without
    a plan: the memory its answer may take taken, its one step made (checked and leased; in a
    thread when ``waits``, as ``Plan.waits``), then run."""
    hold.take(answer_bound(size, 1))
    n, step = await asyncio.to_thread(make) if waits else make()
    return 200, (await svc.crypto.run(n, step))[0]


def run_single_now(hold: Hold, size: int, make: Callable[[], Step]) -> Answer:
    """``run_single`` on the spot (the fast answer)."""
    hold.take(answer_bound(size, 1))
    return 200, make()[1]()[0]


def planned(reading: Reading[P]) -> P:
    """What ``reading`` reads, read on the spot."""
    while True:
        try:
            next(reading)
        except StopIteration as done:
            return cast(P, done.value)


async def _read(reading: Reading[P]) -> P:
    while True:
        try:
            next(reading)
        except StopIteration as done:
            return cast(P, done.value)
        await asyncio.sleep(0)


def _finish(plan: Plan, parts: list[Part]) -> Answer:
    if not plan.batch:
        return 200, parts[0][0]
    return answer(plan.fields, parts, plan.count, plan.partial)
