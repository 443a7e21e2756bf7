"""Request counts are kept as plain numbers and folded into Prometheus (server/_metrics.py):
the result must be what per-request ``inc()`` and ``observe()`` calls would have given."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY, CollectorRegistry, Histogram

from sealflow.service.server import _metrics

ROUTE = "/test/fold/{n}"


def samples(metric: Histogram, route: str) -> dict[str, float]:
    return {
        f"{s.name}{s.labels.get('le', '')}": s.value
        for family in metric.collect()
        for s in family.samples
        if s.labels.get("route") == route and not s.name.endswith("_created")
    }


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        # Values on a bucket's bound belong to that bucket (le: less than or equal).
        st.sampled_from(_metrics._BUCKETS) | st.floats(min_value=0, max_value=60),
        max_size=40,
    )
)
def test_folded_latency_equals_observed(seconds: list[float]) -> None:
    reference = Histogram(
        "reference_seconds", "", ["route"], buckets=_metrics._BUCKETS, registry=CollectorRegistry()
    )
    before = samples(_metrics.LATENCY, ROUTE)
    for value in seconds:
        _metrics.count_request(ROUTE, "POST", 200, value)
        reference.labels(ROUTE).observe(value)
    _metrics.fold_requests()
    _metrics.fold_requests()  # idempotent: nothing new, nothing added
    after = samples(_metrics.LATENCY, ROUTE)
    expected = samples(reference, ROUTE)
    for name, value in expected.items():
        ours = name.replace("reference_seconds", "sealflow_request_duration_seconds")
        assert after.get(ours, 0.0) - before.get(ours, 0.0) == pytest.approx(value), name


def test_folded_requests_and_bytes_are_counted_once() -> None:
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
    _metrics.fold_requests()
    _metrics.fold_requests()
    assert total("sealflow_requests_total", route=ROUTE, status="503") == requests + 3
    assert total("sealflow_bytes_total", algorithm="test-alg", direction="out") == sent + 21
