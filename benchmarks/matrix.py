"""The client and proxy matrix with timings: which clients work, directly and through HAProxy
and nginx, in which transport, and how fast a round trip goes.

    python -m benchmarks.matrix      (needs haproxy, nginx, curl, node: see .ci/run; ~3 min)

The cells are the ones ``tests/matrix`` checks (its clients and the shipped proxy
configurations, reused as they are); here each one is also timed. A cell is one encrypt then
one decrypt of a file of seeded random bytes, both bodies compared by SHA-256; MB/s is twice
the size over the round trip's seconds, the best of two tries. ``sealflow serve`` runs with its
defaults, pinned to core 0 like the proxies; the clients run on core 1. A cell that fails
says how (a cut body, an error status, a stall).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from tests.matrix.clients import CLIENTS, LIBRARY, Client
from tests.matrix.dns import StubDns
from tests.matrix.exchange import MODES, auth, make_payload, round_trip
from tests.matrix.proxies import start_haproxy, start_nginx
from tests.service.conftest import start_server

from ._harness import machine

MiB = 1 << 20
SIZES = (8 * MiB, 64 * MiB)
THROUGH_PROXIES = ("httpx-bytes", "requests-file", "curl", LIBRARY)


def cell(client: Client, base: str, token: str, mode: str, payload: object, folder: Path) -> str:
    best = 0.0
    for _ in range(2):
        start = time.perf_counter()
        try:
            round_trip(client, base, auth(token, mode), payload, folder)  # type: ignore[arg-type]
        except AssertionError as exc:
            return "fails: " + str(exc).splitlines()[0][:60]
        except Exception as exc:
            return f"fails: {type(exc).__name__}"
        size = payload.size  # type: ignore[attr-defined]
        best = max(best, 2 * size / (time.perf_counter() - start) / 1e6)
    return f"works, {best:,.0f}"


def main() -> int:
    os.sched_setaffinity(0, {1})
    print(f"# Client and proxy matrix\n\n{machine()}; server and proxies on core 0\n")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        server = start_server(work / "data")
        dns = StubDns("sealflow")
        proxies = {}
        try:
            os.sched_setaffinity(server.proc.pid, {0})
            proxies["HAProxy"] = start_haproxy(dns.port, server.port)
            proxies["nginx"] = start_nginx(dns.port, server.port)
            for proxy in proxies.values():
                os.sched_setaffinity(proxy.proc.pid, {0})
            payloads = {size: make_payload(work, size) for size in SIZES}
            routes = [("direct", server.url, list(CLIENTS))] + [
                (name, proxy.url, list(THROUGH_PROXIES)) for name, proxy in proxies.items()
            ]
            sizes = " | ".join(f"{size // MiB} MiB: MB/s" for size in SIZES)
            print(f"| route | client | transport | {sizes} |\n|---|---|---|---:|---:|")
            for route, base, names in routes:
                for name in names:
                    client = CLIENTS[name]
                    for mode in MODES:
                        if mode != "request-then-response" and not client.duplex:
                            continue  # a half-duplex client cannot take part in full duplex
                        results = [
                            cell(client, base, server.token, mode, payloads[size], work)
                            for size in SIZES
                        ]
                        print(f"| {route} | {name} | {mode} | {' | '.join(results)} |", flush=True)
        finally:
            for proxy in proxies.values():
                proxy.stop()
            dns.close()
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
