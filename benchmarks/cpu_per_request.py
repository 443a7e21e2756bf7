"""The server's CPU per small request: microseconds of the server process's CPU time for each
request of a route, read from /proc/PID/stat around a wrk run (far steadier than req/s).

    python -m benchmarks.cpu_per_request [--src DIR] [--seconds 5] [ROUTE ...]

``sealflow serve`` (``python -m sealflow`` with ``PYTHONPATH=DIR``: DIR is a tree's ``src``,
so an older commit's worktree can be measured by the same command) runs pinned to core 0 with
its defaults; wrk (1 thread, 16 connections) loads it from core 1. Routes (``ROUTES``; none
given: all but the batch): ``transit-encrypt`` and ``transit-hmac`` (a 1 KiB input, base64 in
JSON, under the key ``default``), ``native-encrypt`` and ``native-hmac`` (1 KiB raw; the
encrypt ``mode=single``), ``transit-sign`` (``sign/:name`` of a 1 KiB input under an ed25519
key, made first: ``SETUP``), ``transit-batch`` (1,000 items of 100 B; its figure is per
request, not per item). Routes run in the order given, on one server, and may repeat. A route
the tree lacks (a 404 or 405) is reported as missing. Each figure is the median of
``--rounds`` runs, with every run shown.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from .http import LOAD_CORE, SERVER_CORE, free_port, wait_ready
from .transit import LUA as JSON_LUA

RAW_LUA = JSON_LUA.replace("application/json", "application/octet-stream").replace(
    'wrk.headers["X-Vault-Token"] = os.getenv("TOKEN")',
    'wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN")',
)
ONE_KIB = bytes(range(256)) * 4
ROUTES = {
    # name: (path, body, lua)
    "transit-encrypt": (
        "/v1/transit/encrypt/default",
        json.dumps({"plaintext": base64.b64encode(ONE_KIB).decode()}).encode(),
        JSON_LUA,
    ),
    "transit-hmac": (
        "/v1/transit/hmac/default",
        json.dumps({"input": base64.b64encode(ONE_KIB).decode()}).encode(),
        JSON_LUA,
    ),
    "native-encrypt": ("/v1/keys/default/encrypt?mode=single", ONE_KIB, RAW_LUA),
    "native-hmac": ("/v1/keys/default/hmac", ONE_KIB, RAW_LUA),
    # benchmarks.transit's sign row: an ed25519 key (``SETUP`` makes it first).
    "transit-sign": (
        "/v1/transit/sign/bench-sign",
        json.dumps({"input": base64.b64encode(ONE_KIB).decode()}).encode(),
        JSON_LUA,
    ),
    # benchmarks.transit's batch row (1,000 items of 100 B), which it runs between its 1 KiB
    # encrypt and 1 KiB hmac rows: put between two routes, it shows whether it changes them.
    "transit-batch": (
        "/v1/transit/encrypt/default",
        json.dumps(
            {"batch_input": [{"plaintext": base64.b64encode(ONE_KIB[:100]).decode()}] * 1000}
        ).encode(),
        JSON_LUA,
    ),
}
# What a route needs made before its first request: (path, JSON body), sent with the token.
SETUP = {"transit-sign": ("/v1/transit/keys/bench-sign", b'{"type": "ed25519"}')}
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def measure(
    url: str, token: str, body: Path, script: Path, seconds: int, pid: int
) -> tuple[int, float]:
    env = {**os.environ, "BODY": str(body), "TOKEN": token}
    cmd = [
        "taskset",
        "-c",
        LOAD_CORE,
        "wrk",
        "-t1",
        "-c16",
        f"-d{seconds}s",
        "-s",
        str(script),
        url,
    ]
    before = cpu_seconds(pid)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    after = cpu_seconds(pid)
    if "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError(f"wrk saw failures against {url}:\n{out}")
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    return requests, after - before


def _status(url: str, body: bytes, token: str) -> str:
    request = urllib.request.Request(  # noqa: S310 (our own loopback URL)
        url, data=body, headers={"Authorization": f"Bearer {token}"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            response.read()
            return str(response.status)
    except urllib.error.HTTPError as exc:
        return str(exc.code)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", default=str(Path(__file__).resolve().parent.parent / "src"))
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("routes", nargs="*", default=[r for r in ROUTES if r != "transit-batch"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        port = free_port()
        env = {**os.environ, "PYTHONPATH": args.src}
        out = work / "serve.out"
        cmd = ["taskset", "-c", SERVER_CORE, sys.executable, "-m", "sealflow", "serve",
               "--port", str(port), "--data-dir", str(work / "data")]  # fmt: skip
        with out.open("wb") as stdout:
            proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.DEVNULL, env=env)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(url + "/readyz", proc)
            token = out.read_text().split("Root token: ", 1)[1].split()[0]
            time.sleep(1)
            for name in args.routes:
                path, body, lua = ROUTES[name]
                (work / "body").write_bytes(body)
                (work / "script.lua").write_text(lua)
                if name in SETUP:
                    _status(url + SETUP[name][0], SETUP[name][1], token)
                check = _status(url + path, body, token)
                if check != "200":
                    print(f"{name}: missing ({check})")
                    continue
                runs = [
                    measure(
                        url + path,
                        token,
                        work / "body",
                        work / "script.lua",
                        args.seconds,
                        proc.pid,
                    )
                    for _ in range(args.rounds)
                ]
                per = sorted(cpu / n * 1e6 for n, cpu in runs)
                rps = max(n for n, _ in runs) / args.seconds
                each = ", ".join(f"{p:.1f}" for p in per)
                median = per[len(per) // 2]
                print(f"{name}: {median:.1f} us CPU/request (runs {each}), {rps:,.0f} req/s")
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
