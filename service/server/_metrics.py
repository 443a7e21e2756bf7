"""Prometheus metrics (SPEC section 7).

Label values come from fixed sets: route templates, algorithms, fixed reasons;
never key names or anything else a client sends. The per-request metrics are
plain numbers with a collector of their own (``_request_metrics``). Engine
counters (cipher contexts, buffer pool, worker queue) live outside
prometheus_client, so ``sync_engine`` copies them in: at every scrape, and every
second from each worker process so that multiprocess mode
(``PROMETHEUS_MULTIPROC_DIR``, several uvicorn workers) sums them across processes.
"""

from __future__ import annotations

import os
import time

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.registry import REGISTRY

from sealflow import engine
from sealflow.service.keystore import KeyStore, KeyStoreHealth, next_rotation

from . import _request_metrics

# The request path's calls (server/_front.py, data/_transfer.py) under this module's name.
count_bytes = _request_metrics.count_bytes
count_lane = _request_metrics.count_lane
count_request = _request_metrics.count_request

DECRYPTION_FAILURES = Counter(
    "sealflow_decryption_failures",
    "Refused decryptions by reason",
    ["reason"],  # authentication, malformed_envelope, version_retired
)
STREAM_ABORTS = Counter(
    "sealflow_stream_aborts",
    "Responses cut off after their first byte (the client sees an incomplete body)",
    ["operation"],
)
AUTH_FAILURES = Counter(
    "sealflow_auth_failures",
    "Refused requests by reason",
    # missing, malformed, invalid, forbidden, token_limit (429), keystore_stale (503: the
    # keystore silent for longer than the max cache age, tokens not checked),
    # audit_unavailable (503: mode required, and the audit trail cannot be written)
    ["reason"],
)
CONNECTIONS_REFUSED = Counter(
    "sealflow_connections_refused",
    "Connections closed by the server before a request reached the app, by reason",
    # headers_too_large, uri_too_long, request_timeout (head), idle; shed_unauthenticated,
    # shed_idle, connection_limit (http._gate: made room under the connection cap)
    ["reason"],
)
SPOOLED_REQUESTS = Counter(
    "sealflow_spooled_requests", "Request-then-response requests whose spool overflowed to a file"
)
SPOOL_BYTES_WRITTEN = Counter("sealflow_spool_bytes_written", "Bytes written to spool files")
SPOOL_DAMAGED = Counter(
    "sealflow_spool_damaged",
    "Spool files that did not give back what was written to them (changed on disk, or a disk"
    " fault): the request ended there, a reply already begun cut off",
)
SPOOL_DISK_FULL = Counter(
    "sealflow_spool_disk_full",
    "Requests refused with 507 insufficient_storage because the spool's disk was full",
)
SPOOL_BYTES_IN_USE = Gauge(
    "sealflow_spool_bytes_in_use",
    "Disk bytes held by spool files now",
    multiprocess_mode="livesum",
)
IN_FLIGHT = Gauge(
    "sealflow_requests_in_flight",
    "Requests being served (not counting probes and scrapes)",
    multiprocess_mode="livesum",
)
CONTEXT_EVENTS = Counter(
    "sealflow_cipher_context_events",
    "Native cipher context lifecycle events by provider and strategy",
    ["provider", "strategy", "event"],
)
BUFFER_POOL_BUFFERS = Gauge(
    "sealflow_buffer_pool_buffers", "Idle body buffers kept for reuse", multiprocess_mode="livesum"
)
BUFFER_POOL_BYTES = Gauge(
    "sealflow_buffer_pool_bytes", "Bytes held by idle pooled buffers", multiprocess_mode="livesum"
)
BUFFER_EVENTS = Counter(
    "sealflow_buffer_events",
    "Body buffer allocations, reuses from the pool, and growths (doublings)",
    ["event"],
)
QUEUE_DEPTH = Gauge(
    "sealflow_worker_queue_depth",
    "Crypto jobs handed to worker threads and not finished",
    multiprocess_mode="livesum",
)
PROVIDER = Gauge(
    "sealflow_provider_info",
    "The crypto provider chosen per algorithm and size class (value 1)",
    ["algorithm", "size_class", "provider"],
    multiprocess_mode="livemax",
)
CALIBRATION = Gauge(
    "sealflow_provider_calibration_bytes_per_second",
    "Provider throughput measured by the start-up calibration: one thread alone (threads=one) "
    "or as many threads as the crypto pool runs at once, together (threads=pool)",
    ["algorithm", "size_class", "provider", "threads"],
    multiprocess_mode="livemax",
)
CALIBRATION_THREADS = Gauge(
    "sealflow_provider_calibration_threads",
    "Jobs at once the provider choice was calibrated for (0: a provider was forced)",
    multiprocess_mode="livemax",
)

KEYSTORE_REACHABLE = Gauge(
    "sealflow_keystore_reachable",
    "1 while the keystore answers, 0 while it is unreachable (cached keys are served)",
    multiprocess_mode="livemin",
)
KEYSTORE_CACHE_AGE = Gauge(
    "sealflow_keystore_cache_age_seconds",
    "Seconds since the keystore was last checked for changes",
    multiprocess_mode="livemax",
)
KEYSTORE_INVALIDATION = Gauge(
    "sealflow_keystore_invalidation_info",
    "How changes by other processes reach this one: notify (LISTEN/NOTIFY), poll (the"
    " notifications were lost) or none (checked on every read); value 1",
    ["mode"],
    multiprocess_mode="livemax",
)
KEYSTORE_FALLBACKS = Counter(
    "sealflow_keystore_notify_fallbacks",
    "Times the keystore's notification connection was lost and polling took over",
)

# Usage over all keys, without key names (labels come from fixed sets): which key, from the key
# metadata or `sealflow keys list`.
KEYS_USAGE_MAX_RATIO = Gauge(
    "sealflow_keys_usage_max_ratio",
    "The highest share of max_encryptions counted under any key's latest version",
    multiprocess_mode="livemax",
)
KEYS_NEAR_LIMIT = Gauge(
    "sealflow_keys_near_usage_limit",
    "Keys whose latest version has counted 90 % or more of its max_encryptions",
    multiprocess_mode="livemax",
)
AUDIT_DROPPED = Counter(
    "sealflow_audit_dropped",
    "Audit records lost (mode best_effort: a sink did not take them)",
)
KEYS_NEXT_ROTATION = Gauge(
    "sealflow_keys_next_rotation_timestamp_seconds",
    "The soonest rotation by auto_rotate_period of any key (0: no key has one)",
    multiprocess_mode="livemax",
)

# Fixed label sets are exported from the start, at zero.
for _reason in ("authentication", "malformed_envelope", "version_retired"):
    DECRYPTION_FAILURES.labels(_reason)
for _reason in (
    "missing",
    "malformed",
    "invalid",
    "forbidden",
    "keystore_stale",
    "audit_unavailable",
):
    AUTH_FAILURES.labels(_reason)
for _event in ("allocation", "reuse", "growth"):
    BUFFER_EVENTS.labels(_event)

_seen: dict[tuple[int, tuple[str, ...]], int] = {}


def _add(counter: Counter, labels: tuple[str, ...], total: int) -> None:
    key = (id(counter), labels)
    delta = total - _seen.get(key, 0)
    if delta > 0:
        counter.labels(*labels).inc(delta)
        _seen[key] = total


def sync_engine(
    crypto: engine.CryptoPool | None, buffers: engine.BufferPool | None, in_flight: int
) -> None:
    """Copy the engine's and the requests' counters into the metrics (idempotent: adds only
    what is new)."""
    _request_metrics.publish()
    IN_FLIGHT.set(in_flight)
    for labels, total in engine.context_stats().items():
        _add(CONTEXT_EVENTS, labels, total)
    if buffers is not None:
        BUFFER_POOL_BUFFERS.set(buffers.pooled)
        BUFFER_POOL_BYTES.set(buffers.pooled_bytes)
        _add(BUFFER_EVENTS, ("allocation",), buffers.allocations)
        _add(BUFFER_EVENTS, ("reuse",), buffers.reuses)
        _add(BUFFER_EVENTS, ("growth",), buffers.growths)
    if crypto is not None:
        QUEUE_DEPTH.set(crypto.queued)


def sync_keystore(health: KeyStoreHealth) -> None:
    KEYSTORE_REACHABLE.set(int(health.reachable))
    KEYSTORE_CACHE_AGE.set(round(time.monotonic() - health.synced_at, 3))
    for mode in ("notify", "poll", "none"):
        KEYSTORE_INVALIDATION.labels(mode).set(int(mode == health.invalidation))
    delta = health.fallbacks - _seen.get((id(KEYSTORE_FALLBACKS), ()), 0)
    if delta > 0:
        KEYSTORE_FALLBACKS.inc(delta)
        _seen[id(KEYSTORE_FALLBACKS), ()] = health.fallbacks


def sync_usage(store: KeyStore) -> None:
    """Usage of the keys' latest versions (reads the keystore: call it on a thread)."""
    ratios, rotations = [], []
    for key in store.list_keys():
        used = store.usage(key.name).get(key.latest)
        ratios.append((used.encryptions if used else 0) / key.max_encryptions)
        when = next_rotation(key)
        if when is not None:
            rotations.append(when)
    KEYS_USAGE_MAX_RATIO.set(max(ratios, default=0.0))
    KEYS_NEAR_LIMIT.set(sum(ratio >= 0.9 for ratio in ratios))
    KEYS_NEXT_ROTATION.set(min(rotations, default=0.0))


def publish_providers() -> None:
    """The provider choice and, when it was calibrated, the figures it was made from."""
    for alg, classes in engine.provider_choice().items():
        for size_class, name in classes.items():
            PROVIDER.labels(alg.value, size_class, name).set(1)
    calibration = engine.calibration()
    CALIBRATION_THREADS.set(calibration.threads if calibration is not None else 0)
    for m in calibration.measurements if calibration is not None else ():
        labels = (m.algorithm.value, m.size_class.name.lower(), m.provider)
        CALIBRATION.labels(*labels, "one").set(m.single)
        if m.aggregate is not None:  # None: not measured, it could not have won
            CALIBRATION.labels(*labels, "pool").set(m.aggregate)


def registry() -> CollectorRegistry:
    """The registry to expose: this process's, or every worker's in multiprocess mode."""
    if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
        return REGISTRY
    merged = CollectorRegistry()
    merged.register(_request_metrics.EveryWorker())
    return merged
