"""HTTP benchmark: sealflow against the plain FastAPI + cryptography service, same run.

    python -m benchmarks.http            (needs wrk and curl: apt-get install -y wrk curl)
    python -m benchmarks.http huge       (only the named parts: small, records, megabyte, huge,
                                          audit, ttl, hmac, master;
                                          huge, the 256 MiB round trips, needs curl, not wrk)

Only the standard library and the service's own dependencies: it runs after the
README's install (plus wrk and curl).

Both servers run as one uvicorn process pinned to core 0; wrk (or curl for the
256 MiB transfers) is pinned to core 1. Peer and sealflow alternate, ``ROUNDS``
times each, and the best round of each counts. sealflow runs with its defaults
(access log on, metrics, auth); the peer has none of those.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from ._harness import Report, machine

SERVER_CORE, LOAD_CORE = "0", "1"
SECONDS = os.environ.get("SEALFLOW_BENCH_WRK_SECONDS", "5")
ROUNDS = int(os.environ.get("SEALFLOW_BENCH_ROUNDS", "2"))
MiB = 1 << 20
LUA = """
wrk.method = "POST"
local f = io.open(os.getenv("BODY"), "rb")
wrk.body = f:read("*all")
f:close()
wrk.headers["Content-Type"] = "application/octet-stream"
local token = os.getenv("TOKEN")
if token and #token > 0 then wrk.headers["Authorization"] = "Bearer " .. token end
"""


@dataclass
class Server:
    name: str
    url: str
    proc: subprocess.Popen[bytes]
    token: str = ""

    def rss(self, field: str = "VmRSS") -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        raise KeyError(field)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):  # noqa: S310 (our own loopback URL)
                return
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.05)
    raise RuntimeError("server did not start")


@contextmanager
def sealflow_server(workdir: Path, *flags: str) -> Iterator[Server]:
    """``sealflow serve`` with its defaults (but ``flags``), pinned to SERVER_CORE, and its
    root token."""
    port = free_port()
    out = workdir / "sealflow.out"
    with out.open("wb") as stdout:
        cmd = [
            "taskset", "-c", SERVER_CORE, str(Path(sys.executable).with_name("sealflow")),
            "serve", "--port", str(port), "--data-dir", str(workdir / "data"), *flags,
        ]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.DEVNULL)
    ours = Server("sealflow", f"http://127.0.0.1:{port}", proc)
    try:
        wait_ready(ours.url + "/readyz", ours.proc)
        ours.token = out.read_text().split("Root token: ", 1)[1].split()[0]
        yield ours
    finally:
        ours.proc.terminate()
        ours.proc.wait(30)


@contextmanager
def on_uvicorn(name: str, app: str, ready: str) -> Iterator[Server]:
    """An ASGI app on uvicorn with httptools and uvloop, pinned to SERVER_CORE."""
    port = free_port()
    cmd = [
        "taskset", "-c", SERVER_CORE, sys.executable, "-m", "uvicorn", app,
        "--port", str(port), "--http", "httptools", "--loop", "uvloop",
        "--no-access-log", "--log-level", "warning",
    ]  # fmt: skip
    quiet = subprocess.DEVNULL
    srv = Server(
        name, f"http://127.0.0.1:{port}", subprocess.Popen(cmd, stdout=quiet, stderr=quiet)
    )
    try:
        wait_ready(srv.url + ready, srv.proc)
        yield srv
    finally:
        srv.proc.terminate()
        srv.proc.wait(30)


def echo_server() -> AbstractContextManager[Server]:
    """``benchmarks/peers/echo.py``: the small-request floor (a raw ASGI echo on uvicorn)."""
    return on_uvicorn("echo", "benchmarks.peers.echo:app", "/")


@contextmanager
def servers(workdir: Path) -> Iterator[tuple[Server, Server]]:
    with (
        on_uvicorn("peer", "benchmarks.peers.naive_app:app", "/docs") as peer,
        sealflow_server(workdir) as ours,
    ):
        yield peer, ours


@contextmanager
def floor_server() -> Iterator[Server]:
    """``benchmarks/peers/floor.py`` pinned to SERVER_CORE: a server that does no work."""
    port = free_port()
    cmd = ["taskset", "-c", SERVER_CORE, sys.executable, "-m", "benchmarks.peers.floor", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    floor = Server("floor", f"http://127.0.0.1:{port}", proc)
    try:
        wait_ready(floor.url + "/", floor.proc)
        yield floor
    finally:
        floor.proc.terminate()
        floor.proc.wait(30)


@dataclass
class Load:
    rps: float
    p99_ms: float


def wrk(url: str, body: Path, token: str, connections: int, script: Path) -> Load:
    env = {**os.environ, "BODY": str(body), "TOKEN": token}
    cmd = [
        "taskset", "-c", LOAD_CORE, "wrk", "-t1", f"-c{connections}", f"-d{SECONDS}s",
        "--latency", "-s", str(script), url,
    ]  # fmt: skip
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    if "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError(f"wrk saw failures against {url}:\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    value, unit = re.search(r"99%\s+([\d.]+)(us|ms|s)", out).groups()  # type: ignore[union-attr]
    return Load(rps, float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit])


def best(runs: list[Load]) -> Load:
    return max(runs, key=lambda r: r.rps)


def fetch(url: str, body: bytes, token: str) -> bytes:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310
    with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
        data: bytes = response.read()
        return data


def curl(url: str, src: Path, dst: Path, token: str, duplex: bool = False) -> float:
    """Seconds for one streamed upload and download (curl reads while it sends)."""
    cmd = [
        "taskset", "-c", LOAD_CORE, "curl", "-sSf", "-T", str(src), "-X", "POST",
        "-o", str(dst), "-w", "%{time_total}",
    ]  # fmt: skip
    if token:
        cmd += ["-H", f"Authorization: Bearer {token}"]
    if duplex:
        cmd += ["-H", "Sealflow-Duplex: 1"]
    out = subprocess.run([*cmd, url], capture_output=True, text=True, check=True).stdout
    return float(out)


def via_requests(url: str, src: Path, dst: Path, token: str) -> float:
    """Seconds for one upload then download with requests (it sends all before it reads)."""
    import requests  # in the test extra (through locust); a half-duplex client, on purpose

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    start = time.perf_counter()
    with (
        src.open("rb") as body,
        requests.post(url, data=body, headers=headers, stream=True, timeout=300) as r,
    ):
        r.raise_for_status()
        with dst.open("wb") as out:
            for piece in r.iter_content(MiB):
                out.write(piece)
    return time.perf_counter() - start


def peak_during(srv: Server, fn: object) -> tuple[float, int]:
    """(result of fn(), peak RSS growth of the server in bytes while it ran)."""
    assert callable(fn)
    base, peak, stop = srv.rss(), [0], threading.Event()

    def sample() -> None:
        while not stop.wait(0.005):
            peak[0] = max(peak[0], srv.rss())

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        result = fn()
    finally:
        stop.set()
        t.join()
    return result, max(peak[0], srv.rss()) - base


def table(title: str, columns: str, rows: list[str]) -> None:
    print(f"\n| {title} | {columns} |\n|---|{'---:|' * (columns.count('|') + 1)}")
    for row in rows:
        print(row)


def small_requests(report: Report, peer: Server, ours: Server, work: Path, script: Path) -> None:
    body = work / "1k"
    body.write_bytes(os.urandom(1024))
    peer_runs, our_runs, echo_runs = [], [], []
    with echo_server() as echo:
        for _ in range(ROUNDS):
            peer_runs.append(wrk(peer.url + "/encrypt", body, "", 16, script))
            url = ours.url + "/v1/keys/default/encrypt?mode=single"
            our_runs.append(wrk(url, body, ours.token, 16, script))
            echo_runs.append(wrk(echo.url + "/", body, "", 16, script))
    p, o, e = best(peer_runs), best(our_runs), best(echo_runs)
    named = (("peer", p), ("sealflow", o), ("floor: raw ASGI echo on uvicorn", e))
    rows = [f"| {n} | {r.rps:,.0f} | {r.p99_ms:.2f} |" for n, r in named]
    table("1 KiB single-shot encrypt, 16 connections", "req/s | p99 ms", rows)
    report.check("5. 1 KiB encrypt req/s vs peer (issue 22: 3.0x)", o.rps / p.rps, 3.0)
    report.check("5. 1 KiB encrypt p99: peer / sealflow", p.p99_ms / o.p99_ms, 1.0)
    # The echo does no work at all: echo / peer is the ceiling of the ratio above in this run.
    report.check("5. 1 KiB: floor (raw ASGI echo) vs peer, the ceiling", e.rps / p.rps, 3.0)


def records(report: Report, peer: Server, ours: Server, work: Path, script: Path) -> None:
    """100-byte records: sealflow's batch route (8,192 per request) against the peer sealing
    one record per request (the only way it has), records/s on the one server core."""
    count, record = 8192, os.urandom(100)
    single, batch = work / "100b", work / "records"
    single.write_bytes(record)
    batch.write_bytes((len(record).to_bytes(4, "big") + record) * count)
    url = ours.url + "/v1/keys/default/encrypt?mode=records"
    # A whole answer is checked once: as many envelopes as records.
    sealed = fetch(url, batch.read_bytes(), ours.token)
    if len(sealed) != count * (4 + 11 + len("default") + 12 + len(record) + 16):
        raise RuntimeError("the batch route answered the wrong size")
    peer_runs, our_runs = [], []
    for _ in range(ROUNDS):
        peer_runs.append(wrk(peer.url + "/encrypt", single, "", 16, script))
        our_runs.append(wrk(url, batch, ours.token, 4, script))
    p, o = best(peer_runs).rps, best(our_runs).rps * count
    rows = [
        f"| peer, one request per record (16 connections) | {p:,.0f} |",
        f"| sealflow, mode=records, {count:,} per request (4 connections) | {o:,.0f} |",
    ]
    table("100-byte records sealed", "records/s", rows)
    report.check("8. records/s on one core / 1,000,000 (goal; 0.5x is the floor)", o / 1e6, 1.0)
    report.check("8. batch route records/s vs peer one per request", o / p, 20.0)


def megabyte(report: Report, peer: Server, ours: Server, work: Path, script: Path) -> None:
    plain, peer_sealed, our_sealed = work / "1m", work / "1m.peer", work / "1m.sfl"
    plain.write_bytes(os.urandom(MiB))
    our_enc = ours.url + "/v1/keys/default/encrypt"
    peer_sealed.write_bytes(fetch(peer.url + "/encrypt", plain.read_bytes(), ""))
    our_sealed.write_bytes(fetch(our_enc, plain.read_bytes(), ours.token))
    rows = []
    for op, peer_url, our_url, peer_body, our_body in (
        ("encrypt", peer.url + "/encrypt", our_enc, plain, plain),
        ("decrypt", peer.url + "/decrypt", ours.url + "/v1/decrypt", peer_sealed, our_sealed),
    ):
        peer_runs, our_runs = [], []
        for _ in range(ROUNDS):
            peer_runs.append(wrk(peer_url, peer_body, "", 4, script))
            our_runs.append(wrk(our_url, our_body, ours.token, 4, script))
        p_mbs, o_mbs = best(peer_runs).rps * MiB / 1e6, best(our_runs).rps * MiB / 1e6
        rows.append(f"| {op} | {p_mbs:,.0f} | {o_mbs:,.0f} |")
        # Issue 22 asks 2.5x of the encrypt; the decrypt's line stays the earlier 1.5x.
        target = 2.5 if op == "encrypt" else 1.5
        report.check(f"6. 1 MiB stream {op} MB/s vs peer single-shot", o_mbs / p_mbs, target)
    table(
        "1 MiB, 4 connections",
        "peer MB/s (single-shot) | sealflow MB/s (stream, request-then-response)",
        rows,
    )


def huge(report: Report, peer: Server, ours: Server, workdir: Path) -> None:
    # The client's files (input, sealed, opened: 768 MiB) live in memory where there is a
    # tmpfs: written to this machine's disk, their writeback stalled whichever server ran
    # next (a client write of 256 MiB took 0.2 s or 0.7 s). The servers' own data stay put.
    shm = Path("/dev/shm")  # noqa: S108 (a private TemporaryDirectory inside it)
    with (
        tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else workdir) as tmp,
        floor_server() as floor,
    ):
        _huge(report, peer, ours, floor, Path(tmp))


def _huge(report: Report, peer: Server, ours: Server, floor: Server, work: Path) -> None:
    size, plain = 256 * MiB, work / "256m"
    with plain.open("wb") as f:
        for _ in range(256):
            f.write(os.urandom(MiB))
    # requests: request-then-response (the default); curl with Sealflow-Duplex: 1 (full duplex).
    # ROUNDS alternating rounds, best MB/s and largest RSS growth count: the first large
    # transfer after a server starts is up to 3x slower for both (on this VM the kernel's
    # first touch of page-cache and heap pages: perf showed 54% of sealflow's first 256 MiB
    # encrypt in copy_folio_from_iter_atomic, 7% in the third).
    # The floor (benchmarks/peers/floor.py) does no work at all: with requests, its row is the
    # client's own limit, and floor / peer the most any server could reach in this run (it
    # answers after the body, so it is no limit for curl in full duplex).
    for client, label, target in (("requests", "requests, request-then-response", 3.0),
                                  ("curl", "curl, Sealflow-Duplex: 1", 2.0)):  # fmt: skip
        results: dict[str, tuple[float, int]] = {}
        targets = [
            (peer, peer.url + "/encrypt", peer.url + "/decrypt", ""),
            (ours, ours.url + "/v1/keys/default/encrypt", ours.url + "/v1/decrypt", ours.token),
        ]
        if client == "requests":
            targets.append((floor, floor.url + "/", floor.url + "/", ""))
        for _ in range(ROUNDS):
            for srv, enc, dec, token in targets:
                sealed, back = work / f"{srv.name}.sealed", work / f"{srv.name}.back"

                def both(enc: str = enc, dec: str = dec, token: str = token) -> float:
                    if client == "requests":
                        return via_requests(enc, plain, sealed, token) + via_requests(
                            dec, sealed, back, token
                        )
                    duplex = bool(token)  # the peer knows no duplex header
                    return curl(enc, plain, sealed, token, duplex) + curl(
                        dec, sealed, back, token, duplex
                    )

                seconds, growth = peak_during(srv, both)
                if back.stat().st_size != size:
                    raise RuntimeError(f"{srv.name}: the round trip lost bytes")
                speed, peak = results.get(srv.name, (0.0, 0))
                results[srv.name] = (max(speed, 2 * size / seconds / 1e6), max(peak, growth))
        rows = [f"| {name} | {mbs:,.0f} | {growth / MiB:,.1f} |"
                for name, (mbs, growth) in results.items()]  # fmt: skip
        table(f"256 MiB encrypt, then decrypt: {label}", "MB/s | peak RSS growth MiB", rows)
        speed = results["sealflow"][0] / results["peer"][0]
        report.check(f"7. 256 MiB round trip MB/s vs peer ({client})", speed, target)
        if "floor" in results:
            ceiling = results["floor"][0] / results["peer"][0]
            report.check(f"7. 256 MiB: floor (no work) vs peer, the ceiling ({client})",
                         ceiling, target)  # fmt: skip
        headroom = 64 * MiB / max(results["sealflow"][1], MiB)  # below 1 MiB counts as 1 MiB
        report.check(f"7. 256 MiB: 64 MiB / sealflow RSS growth ({client})", headroom, 1.0)


def main(argv: list[str]) -> int:
    parts = argv or list(PARTS)
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        print(f"unknown part {unknown[0]!r}: choose from {', '.join(PARTS)}", file=sys.stderr)
        return 2
    tools = ["curl", "taskset"] + (["wrk"] if set(parts) - {"huge"} else [])
    for tool in tools:
        if shutil.which(tool) is None:
            print(f"{tool} is missing: apt-get install -y wrk curl util-linux", file=sys.stderr)
            return 2
    # The client side (wrk, curl, requests) runs on the load core; the servers are pinned to
    # theirs by taskset when they start.
    os.sched_setaffinity(0, {int(LOAD_CORE)})
    report = Report()
    print(
        f"# sealflow HTTP benchmark\n\n{machine()}; server on core {SERVER_CORE}, load on core "
        f"{LOAD_CORE}, {SECONDS} s per wrk run, best of {ROUNDS} alternating rounds"
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        script = work / "post.lua"
        script.write_text(LUA)
        with servers(work) as (peer, ours):
            for part in parts:
                PARTS[part](report, peer, ours, work, script)
    return 0 if report.print_checks() else 1


# The parts in the order a full run takes them (huge needs no wrk script).
Part = Callable[[Report, Server, Server, Path, Path], None]


def audit(report: Report, peer: Server, ours: Server, work: Path, script: Path) -> None:
    from .audit import audit_part  # it uses benchmarks.transit, which imports this module

    audit_part(report, ours, work, script)


def hmac(report: Report, peer: Server, ours: Server, work: Path, script: Path) -> None:
    from .hmac_records import hmac_part  # it imports this module

    hmac_part(report, ours, work, script)


def master(report: Report, peer: Server, ours: Server, work: Path, script: Path) -> None:
    from .master_key import master_part  # it imports this module

    master_part(report, ours, work, script)


def ttl(report: Report, peer: Server, ours: Server, work: Path, script: Path) -> None:
    from .token_ttl import ttl_part  # it imports this module

    ttl_part(report, ours, work, script)


PARTS: dict[str, Part] = {
    "small": small_requests,
    "records": records,
    "megabyte": megabyte,
    "huge": lambda report, peer, ours, work, _script: huge(report, peer, ours, work),
    "audit": audit,
    "ttl": ttl,
    "hmac": hmac,
    "master": master,
}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
