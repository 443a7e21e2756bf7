"""Request counts are plain numbers exposed by a custom collector (server/_request_metrics.py):
a scrape must show what native metrics given an ``inc()`` and an ``observe()`` per request would
show, in one process and, through the shared counters, summed over several worker processes."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest

from sealflow.service.server import _metrics, _request_metrics

ROUTE = "/test/fold/{n}"
BUCKETS = _request_metrics._BUCKETS
ROOT = Path(__file__).resolve().parents[3]


def samples(registry: CollectorRegistry, name: str, route: str) -> dict[str, float]:
    return {
        f"{s.name}{s.labels.get('le', '')}": s.value
        for family in registry.collect()
        if family.name == name
        for s in family.samples
        if s.labels.get("route") == route and not s.name.endswith("_created")
    }


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        # Values on a bucket's bound belong to that bucket (le: less than or equal).
        st.sampled_from(BUCKETS) | st.floats(min_value=0, max_value=60),
        max_size=40,
    )
)
def test_latency_equals_observed(seconds: list[float]) -> None:
    reference = CollectorRegistry()
    observed = Histogram("reference_seconds", "", ["route"], buckets=BUCKETS, registry=reference)
    name = "sealflow_request_duration_seconds"
    before = samples(REGISTRY, name, ROUTE)
    for value in seconds:
        _metrics.count_request(ROUTE, "POST", 200, value)
        observed.labels(ROUTE).observe(value)
    after = samples(REGISTRY, name, ROUTE)
    for key, value in samples(reference, "reference_seconds", ROUTE).items():
        ours = key.replace("reference_seconds", name)
        assert after.get(ours, 0.0) - before.get(ours, 0.0) == pytest.approx(value), key


def test_requests_and_bytes_are_counted_once() -> None:
    def total(name: str, **labels: str) -> float:
        return sum(
            float(s.value)
            for family in REGISTRY.collect()
            for s in family.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )

    requests = total("sealflow_requests_total", route=ROUTE, status="503")
    sent = total("sealflow_bytes_total", algorithm="test-alg", direction="out")
    for _ in range(3):
        _metrics.count_request(ROUTE, "POST", 503, 0.001)
        _metrics.count_bytes("test-alg", "encrypt", 10, 7)
    for _ in range(2):  # a scrape reads the numbers, it adds nothing
        assert total("sealflow_requests_total", route=ROUTE, status="503") == requests + 3
        assert total("sealflow_bytes_total", algorithm="test-alg", direction="out") == sent + 21


def work(seed: int) -> None:
    """Run in a process of its own: requests counted by sealflow and, per request, by native
    metrics of the same shape named ``x<name>``; then (seed 0, or one process alone) print
    what a scrape shows. In multiprocess mode a worker publishes half-way, at the end, and once
    more (which must add nothing)."""
    requests = Counter(
        "xsealflow_requests",
        "HTTP requests by route, method and status",
        ["route", "method", "status"],
    )
    latency = Histogram(
        "xsealflow_request_duration_seconds",
        "HTTP request latency, first byte received to last byte sent",
        ["route"],
        buckets=BUCKETS,
    )
    body = Counter(
        "xsealflow_bytes",
        "Body bytes by algorithm, operation and direction (in: request, out: response)",
        ["algorithm", "operation", "direction"],
    )
    lane = Counter(
        "xsealflow_lane_requests",
        "Requests with a whole-body plan answered by the HTTP protocol itself, the fast answer"
        " (of the requests counted in sealflow_requests_total)",
    )
    rnd = random.Random(seed)
    for i in range(300 if seed else 0):
        route = rnd.choice(("/v1/keys/{name}/encrypt", "/v1/decrypt", "/readyz"))
        method = rnd.choice(("POST", "GET", "BREW", "PROPFIND"))
        status = rnd.choice((200, 400, 503))
        # Dyadic, so that sums are exact whatever the order they are added in.
        seconds = rnd.randrange(1, 1 << 12) / (1 << rnd.randrange(8, 22))
        _metrics.count_request(route, method, status, seconds)
        requests.labels(route, method if method in ("POST", "GET") else "other", status).inc()
        latency.labels(route).observe(seconds)
        algorithm, operation = rnd.choice(("aes-256-gcm", "chacha20-poly1305")), "encrypt"
        received, sent = rnd.choice((0, rnd.randrange(10_000))), rnd.randrange(1, 10_000)
        _metrics.count_bytes(algorithm, operation, received, sent)
        if received:  # a direction appears once it has bytes
            body.labels(algorithm, operation, "in").inc(received)
        body.labels(algorithm, operation, "out").inc(sent)
        if i % 3 == 0:
            _metrics.count_lane()
            lane.inc()
        if i == 150:
            _request_metrics.publish()
    _request_metrics.publish()
    _request_metrics.publish()
    if seed == 0 or "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
        print(generate_latest(_metrics.registry()).decode())


def families(text: str) -> dict[str, list[str]]:
    """Exposition lines by family: HELP and TYPE, then the samples sorted, times created masked."""
    found: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in filter(None, text.splitlines()):
        if line.startswith("# HELP "):
            lines = found.setdefault(line.split()[2], [])
        if "_created" in line.split(" ", 1)[0]:
            line = line.rsplit(" ", 1)[0] + " <created>"
        lines.append(line)
    return {name: [*lines[:2], *sorted(lines[2:])] for name, lines in found.items()}


@pytest.mark.parametrize("workers", [1, 2])
def test_exposition_is_what_native_metrics_give(workers: int, tmp_path: Path) -> None:
    env = dict(os.environ)
    if workers > 1:
        env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path)
    seeds = [*range(1, workers + 1), 0] if workers > 1 else [1]
    for seed in seeds:
        run = subprocess.run(  # noqa: S603
            [sys.executable, "-c", f"from {__name__} import work; work({seed})"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
    found = families(run.stdout)
    native = {
        name[1:]: [line.replace("xsealflow_", "sealflow_") for line in lines]
        for name, lines in found.items()
        if name.startswith("xsealflow_")
    }
    ours = {name: found[name] for name in native}
    assert ours == native
    expected = {
        "sealflow_requests_total",
        "sealflow_request_duration_seconds",
        "sealflow_bytes_total",
        "sealflow_lane_requests_total",
    }
    if workers == 1:  # multiprocess mode shows no creation times
        expected |= {
            "sealflow_requests_created",
            "sealflow_request_duration_seconds_created",
            "sealflow_bytes_created",
            "sealflow_lane_requests_created",
        }
    assert set(native) == expected
    assert len(native["sealflow_request_duration_seconds"]) == 2 + 3 * (len(BUCKETS) + 3)
    assert not any(name.startswith("sealflow_shared_") for name in found)
