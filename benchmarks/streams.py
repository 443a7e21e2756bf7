"""Concurrent large streams through one server: ``python -m benchmarks.streams`` (issue 16).

One ``sealflow serve`` process, not pinned, so its crypto pool runs on both cores, gets 1, 2
and 4 concurrent 64 MiB stream encrypts (``POST /v1/keys/default/encrypt``, AES-256-GCM,
curl clients writing to /dev/null). Aggregate MB/s = bytes sent by all clients / time from
the first start to the last end, best of ``ROUNDS``. The same with the provider calibrated
(``auto``: for the pool's concurrency) and forced to each provider, servers alternating.
The check: two concurrent streams as calibrated against the provider that a one-thread
calibration picks for AES-256-GCM chunks (what sealflow chose before issue 16).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sealflow import engine

from ._harness import Report, machine
from .http import Server, free_port, wait_ready

SIZE = 64 << 20
CONCURRENCY = (1, 2, 4)
ROUNDS = int(os.environ.get("SEALFLOW_BENCH_ROUNDS", "3"))
PROVIDERS = ("auto", "native", "cryptography")
# Full duplex (the response streams while the body is sent): no spool between request and
# response, so more of the time is the sealing. Default: request-then-response.
DUPLEX = os.environ.get("SEALFLOW_BENCH_DUPLEX", "") == "1"


@contextmanager
def server(workdir: Path, provider: str) -> Iterator[Server]:
    port = free_port()
    data = Path(tempfile.mkdtemp(dir=workdir))  # a new data dir: the root token is printed
    out = data.with_suffix(".out")
    with out.open("wb") as stdout:
        cmd = [
            str(Path(sys.executable).with_name("sealflow")), "serve", "--port", str(port),
            "--data-dir", str(data), "--provider", provider,
        ]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.STDOUT)
    srv = Server(provider, f"http://127.0.0.1:{port}", proc)
    try:
        wait_ready(srv.url + "/readyz", proc)
        srv.token = out.read_text().split("Root token: ", 1)[1].split()[0]
        yield srv
    finally:
        proc.terminate()
        proc.wait(30)


def chosen(srv: Server) -> str:
    """What the server chose for AES-256-GCM chunks (its metrics)."""
    import urllib.request

    with urllib.request.urlopen(srv.url + "/metrics", timeout=10) as r:  # noqa: S310 (loopback)
        text: str = r.read().decode()
    for line in text.splitlines():
        if line.startswith("sealflow_provider_info{") and all(
            label in line for label in ('size_class="chunks"', 'algorithm="aes-256-gcm"')
        ):
            return line.split('provider="', 1)[1].split('"', 1)[0]
    return "?"


def streams(srv: Server, body: Path, n: int) -> float:
    """Aggregate MB/s of n concurrent stream encrypts of body."""
    cmd = [
        "curl", "-sSf", "-T", str(body), "-X", "POST", "-o", os.devnull,
        "-H", f"Authorization: Bearer {srv.token}", srv.url + "/v1/keys/default/encrypt",
    ]  # fmt: skip
    if DUPLEX:
        cmd += ["-H", "Sealflow-Duplex: 1"]
    start = time.perf_counter()
    procs = [subprocess.Popen(cmd) for _ in range(n)]
    if any(p.wait() != 0 for p in procs):
        raise RuntimeError(f"curl failed against {srv.name}")
    return n * SIZE / (time.perf_counter() - start) / 1e6


def main() -> int:
    engine.calibrate(threads=1)
    single_choice = engine.provider_choice()[engine.Algorithm.AES_256_GCM]["chunks"]
    print(f"# sealflow concurrent streams benchmark\n\n{machine()}\n")
    print(
        f"A one-thread calibration picks `{single_choice}` for AES-256-GCM chunks in this "
        f"process. Aggregate MB/s, best of {ROUNDS} rounds, servers alternating; "
        f"{'full duplex' if DUPLEX else 'request-then-response'}.\n"
    )
    report = Report()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        body = work / "body"
        body.write_bytes(os.urandom(SIZE))
        best: dict[tuple[str, int], float] = {}
        labels: dict[str, str] = {}
        for _ in range(ROUNDS):
            for provider in PROVIDERS:
                with server(work, provider) as srv:
                    labels[provider] = f"auto ({chosen(srv)})" if provider == "auto" else provider
                    streams(srv, body, 1)  # warm up
                    for n in CONCURRENCY:
                        mbs = streams(srv, body, n)
                        best[provider, n] = max(best.get((provider, n), 0.0), mbs)
    print("| provider | " + " | ".join(f"{n} at once" for n in CONCURRENCY) + " |")
    print("|---|" + "---:|" * len(CONCURRENCY))
    for provider in PROVIDERS:
        row = " | ".join(f"{best[provider, n]:,.0f}" for n in CONCURRENCY)
        print(f"| {labels[provider]} | {row} |")
    for n in (2, 4):
        report.check(
            f"{n} concurrent 64 MiB stream encrypts, calibrated / forced {single_choice} "
            "(the one-thread choice)",
            best["auto", n] / best[single_choice, n],
            1.1,
        )
    report.print_checks()
    return 0


if __name__ == "__main__":
    sys.exit(main())
