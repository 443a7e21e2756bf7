"""Per-request metrics: requests, their latency, body bytes and fast answers (SPEC section 7).

A request only adds to plain numbers here: a ``.labels().inc()`` and an ``observe()`` per
request would be a sizeable share of a small request's budget (docs/BENCHMARKS.md, "The
per-request budget"). A custom collector, prometheus_client's public API for values kept
outside it, builds the four families from those numbers when scraped (``_families``: the same
names, labels, buckets and help as native metrics fed each request).

Several workers (``PROMETHEUS_MULTIPROC_DIR``): a scrape reaches one worker, which sees the
others' metrics only in prometheus_client's files, and only metric objects write those (a
custom collector works in its own process alone). So each worker also adds what its numbers
grew by to counters of the same shape (``publish``, with ``Counter.inc``: every second and
before a scrape), and the scrape builds the same families from those counters summed over every
worker (``EveryWorker``). Counters rather than a native Histogram: its only public write,
``observe()``, takes one value, so it cannot take a second's counts at once; calling it for
each request, on the request path or replayed at ``publish``, costs what the plain numbers
save. The counters are registered on no registry and never exposed under their own names.
"""

from __future__ import annotations

import bisect
import itertools
import math
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, multiprocess
from prometheus_client.core import (
    REGISTRY,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_BOUNDS = (*_BUCKETS, math.inf)  # the histogram's bucket bounds, +Inf last
_LE = tuple("+Inf" if bound == math.inf else repr(float(bound)) for bound in _BOUNDS)
_METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"))


@dataclass(slots=True)
class _Counts:
    """This process's numbers, or every worker's summed at a scrape."""

    # (route, method, status) -> [requests]
    requests: dict[tuple[str, str, int], list[int]] = field(default_factory=dict)
    # route -> [count per bucket..., sum of seconds]
    latency: dict[str, list[float]] = field(default_factory=dict)
    # (algorithm, operation) -> [bytes in, bytes out]
    body: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    lane: list[int] = field(default_factory=lambda: [0])  # requests the lane answered
    # When each exposed series was first counted (this process only; multiprocess mode has none).
    created: dict[tuple[str, ...], float] = field(default_factory=dict)


_here = _Counts()
_here.created[("lane",)] = time.time()
_requests, _latency, _body, _lane = _here.requests, _here.latency, _here.body, _here.lane


def _method(method: str) -> str:
    return method if method in _METHODS else "other"


def count_request(route: str, method: str, status: int, seconds: float) -> None:
    # A list per key, not an int: the key is hashed once (the update is then list[0] += 1).
    requests = _requests.get((route, method, status))
    if requests is None:
        requests = _requests[route, method, status] = [0]
        _here.created.setdefault(("requests", route, _method(method), str(status)), time.time())
    requests[0] += 1
    latency = _latency.get(route)
    if latency is None:
        latency = _latency[route] = [0.0] * (len(_BOUNDS) + 1)
        _here.created["latency", route] = time.time()
    latency[bisect.bisect_left(_BOUNDS, seconds)] += 1
    latency[-1] += seconds


def count_lane() -> None:
    _lane[0] += 1


def count_bytes(algorithm: str, operation: str, received: int, sent: int) -> None:
    totals = _body.get((algorithm, operation))
    if totals is None:
        totals = _body[algorithm, operation] = [0, 0]
        _here.created["bytes", algorithm, operation] = time.time()
    totals[0] += received
    totals[1] += sent


def _families(counts: _Counts) -> Iterator[Metric]:
    """The four families, as native metrics fed the same requests would expose them."""
    created = counts.created.get
    requests = CounterMetricFamily(
        "sealflow_requests",
        "HTTP requests by route, method and status",
        labels=("route", "method", "status"),
    )
    merged: dict[tuple[str, str, str], int] = {}  # methods outside the fixed set are one label
    for (route, method, status), (n,) in list(counts.requests.items()):
        labels = (route, _method(method), str(status))
        merged[labels] = merged.get(labels, 0) + n
    for labels, n in merged.items():
        requests.add_metric(labels, float(n), created(("requests", *labels)))
    yield requests

    help_text = "HTTP request latency, first byte received to last byte sent"
    latency = HistogramMetricFamily(
        "sealflow_request_duration_seconds", help_text, labels=("route",)
    )
    when: list[tuple[str, float]] = []
    for route, slots in list(counts.latency.items()):
        *buckets, seconds = slots
        latency.add_metric(
            (route,), list(zip(_LE, itertools.accumulate(buckets), strict=True)), seconds
        )
        if (t := created(("latency", route))) is not None:
            when.append((route, t))
    yield latency
    if when:
        # HistogramMetricFamily takes no creation time; the text format shows a histogram's as
        # this gauge family of its own, which is what a native Histogram's gives too.
        latency_created = GaugeMetricFamily(
            "sealflow_request_duration_seconds_created", help_text, labels=("route",)
        )
        for route, t in when:
            latency_created.add_metric((route,), t)
        yield latency_created

    body = CounterMetricFamily(
        "sealflow_bytes",
        "Body bytes by algorithm, operation and direction (in: request, out: response)",
        labels=("algorithm", "operation", "direction"),
    )
    for (algorithm, operation), totals in list(counts.body.items()):
        t = created(("bytes", algorithm, operation))
        for direction, total in zip(("in", "out"), totals, strict=True):
            if total:  # a direction appears once it has bytes
                body.add_metric((algorithm, operation, direction), float(total), t)
    yield body

    yield CounterMetricFamily(
        "sealflow_lane_requests",
        "Requests with a whole-body plan answered by the HTTP protocol itself, the fast answer"
        " (of the requests counted in sealflow_requests_total)",
        value=float(counts.lane[0]),
        created=created(("lane",)),
    )


class _ThisProcess(Collector):
    def collect(self) -> Iterator[Metric]:
        return _families(_here)


REGISTRY.register(_ThisProcess())

# Multiprocess mode: this worker's numbers, as counters in prometheus_client's files.
_SLOTS = (*map(str, range(len(_BOUNDS))), "sum")  # a latency list's items
_SHARED_REQUESTS = Counter(
    "sealflow_shared_requests", "", ["route", "method", "status"], registry=None
)
_SHARED_LATENCY = Counter("sealflow_shared_latency", "", ["route", "slot"], registry=None)
_SHARED_BYTES = Counter(
    "sealflow_shared_bytes", "", ["algorithm", "operation", "direction"], registry=None
)
_SHARED_LANE = Counter("sealflow_shared_lane", "", registry=None)
_SHARED = frozenset(
    (
        "sealflow_shared_requests",
        "sealflow_shared_latency",
        "sealflow_shared_bytes",
        "sealflow_shared_lane",
    )
)
_published: dict[tuple[str, ...], float] = {}  # what publish has added so far, per series


def _grown(key: tuple[str, ...], total: float) -> float:
    new = total - _published.get(key, 0)
    if new:
        _published[key] = total
    return new


def publish() -> None:
    """Multiprocess mode: add what this process's numbers grew by since the last call to the
    shared counters (idempotent: adds only what is new)."""
    if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
        return
    for (route, method, status), (n,) in list(_requests.items()):
        if new := _grown(("requests", route, method, str(status)), n):
            _SHARED_REQUESTS.labels(route, _method(method), str(status)).inc(new)
    for route, slots in list(_latency.items()):
        for slot, total in zip(_SLOTS, slots, strict=True):
            if new := _grown(("latency", route, slot), total):
                _SHARED_LATENCY.labels(route, slot).inc(new)
    for (algorithm, operation), totals in list(_body.items()):
        for direction, count in zip(("in", "out"), totals, strict=True):
            if grown := _grown(("bytes", algorithm, operation, direction), count):
                _SHARED_BYTES.labels(algorithm, operation, direction).inc(grown)
    if lane := _grown(("lane",), _lane[0]):
        _SHARED_LANE.inc(lane)


def _summed(families: Iterable[Metric]) -> _Counts:
    """The shared counters, summed over every worker by prometheus_client, as numbers again."""
    counts = _Counts()
    for family in families:
        for sample in family.samples:
            labels, value = sample.labels, sample.value
            if family.name == "sealflow_shared_requests":
                key = (labels["route"], labels["method"], int(labels["status"]))
                counts.requests[key] = [int(value)]
            elif family.name == "sealflow_shared_latency":
                slots = counts.latency.setdefault(labels["route"], [0.0] * len(_SLOTS))
                slots[_SLOTS.index(labels["slot"])] = value
            elif family.name == "sealflow_shared_bytes":
                totals = counts.body.setdefault((labels["algorithm"], labels["operation"]), [0, 0])
                totals[("in", "out").index(labels["direction"])] = int(value)
            elif family.name == "sealflow_shared_lane":
                counts.lane[0] = int(value)
    return counts


class EveryWorker(Collector):
    """Every worker's metrics from prometheus_client's files, the four families rebuilt from
    the shared counters (register it on a registry of its own for each scrape)."""

    def collect(self) -> Iterator[Metric]:
        files = CollectorRegistry()
        multiprocess.MultiProcessCollector(files)  # type: ignore[no-untyped-call]
        shared = []
        for family in files.collect():
            if family.name in _SHARED:
                shared.append(family)
            else:
                yield family
        yield from _families(_summed(shared))
