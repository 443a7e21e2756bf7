"""``Client.encrypt_many`` and ``decrypt_many`` on blocking sockets in the caller's thread,
two batches in flight: batch k+1 is sent before the answer to batch k is read, so the service
seals one batch while the client frames the next and cuts the last one's answer into results
(docs/BENCHMARKS.md, "Client: batches of records").

Each batch is one request of known length, answered whole after its body (request-then-
response, ``Content-Length``), on a connection of the small calls' pool (``_blocking``).
A batch found on a kept-alive connection the server had closed is sent once more on a new one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from ._blocking import Exchange, Pool
from ._errors import TransportError
from ._origin import Endpoint
from ._records import DEPTH, Batch, Records, Value, batches


def results(
    pool: Pool, endpoint: Endpoint, call: Records, values: Iterable[Value], limits: tuple[int, int]
) -> Iterator[Any]:
    """One result per value, in order, as the answers come.

    One generator between the caller and each batch's results, which it delegates to: a
    helper generator per batch put a second frame on every value's way out
    (docs/BENCHMARKS.md, "Issue 30, the records path")."""
    prefix, prelude = endpoint.target, endpoint.prelude
    inflight: deque[Exchange] = deque()
    sent: deque[Batch] = deque()
    groups = batches(values, *limits)
    first = 0
    try:
        while True:
            group = next(groups, None)
            if group is not None:
                batch = call.batch(prefix, prelude, group, first)
                first += batch.count
                inflight.append(_send(pool, endpoint, batch, fresh=False))
                sent.append(batch)
                if len(inflight) < DEPTH:
                    continue
            elif not inflight:
                return
            batch, ex = sent.popleft(), inflight.popleft()
            got, error = call.results(_receive(pool, endpoint, batch, ex), batch)
            yield from got
            if error is not None:
                raise error
    finally:
        for ex in inflight:  # stopped early, or failed: their answers are not read
            pool.release(ex.conn, False)


def _send(pool: Pool, endpoint: Endpoint, batch: Batch, *, fresh: bool) -> Exchange:
    conn = pool.acquire(fresh)
    ex = Exchange(conn, batch.body, len(batch.body), endpoint.timeout, None)
    try:
        ex.send()
    except BaseException:
        pool.release(conn, False)
        raise
    return ex


def _receive(pool: Pool, endpoint: Endpoint, batch: Batch, ex: Exchange) -> bytes:
    try:
        return _answer(pool, ex)
    except TransportError:
        if not ex.conn.reused or ex.responded:
            raise
    # A kept-alive connection the server had closed: once more on a new one.
    return _answer(pool, _send(pool, endpoint, batch, fresh=True))


def _answer(pool: Pool, ex: Exchange) -> bytes:
    """The answer's body; the service's error raised as its exception."""
    try:
        status = ex.start()
        if not 200 <= status < 300:
            raise ex.error()
        answer = b"".join(ex.body())
        ex.finish()
        return answer
    finally:
        pool.release(ex.conn, ex.reusable)
