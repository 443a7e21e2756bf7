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
    """One result per value, in order, as the answers come."""
    prefix, prelude = endpoint.target, endpoint.prelude
    inflight: deque[Exchange] = deque()
    sent: deque[Batch] = deque()
    first = 0
    try:
        for group in batches(values, *limits):
            batch = call.batch(prefix, prelude, group, first)
            first += batch.count
            inflight.append(_send(pool, endpoint, batch, fresh=False))
            sent.append(batch)
            if len(inflight) >= DEPTH:
                yield from _results(pool, endpoint, call, sent.popleft(), inflight.popleft())
        while inflight:
            yield from _results(pool, endpoint, call, sent.popleft(), inflight.popleft())
    finally:
        for ex in inflight:  # stopped early, or failed: their answers are not read
            pool.release(ex.conn, False)


def _results(
    pool: Pool, endpoint: Endpoint, call: Records, batch: Batch, ex: Exchange
) -> Iterator[Any]:
    results, error = call.results(_receive(pool, endpoint, batch, ex), batch)
    yield from results
    if error is not None:
        raise error


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
