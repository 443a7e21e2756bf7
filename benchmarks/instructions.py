"""Instructions per small request, counted by callgrind: the one figure of the request path that
this VM's noise does not move (docs/BENCHMARKS.md, "Issue 28: the shared path counted in
instructions").

    python -m benchmarks.instructions [--src DIR] [ROUTE ...]

Each route of ``benchmarks.cpu_per_request`` (none given: ``transit-hmac`` and
``transit-sign``) runs in ``benchmarks.wire`` (the whole request in-process: sealflow's protocol,
app, keystore and access log; no sockets) under ``valgrind --tool=callgrind``, twice at once:
with 20 and with 100 requests a timed run (``SEALFLOW_BENCH_N``; ``benchmarks.wire`` makes 5
such runs after 301 requests of warm-up), so the difference is 400 requests and everything
else (start-up, imports, warm-up) cancels. Two figures a route, per request:

- ``main thread``: every instruction of the event loop's thread (the wire harness and the
  pure-Python asyncio loop included: the real server's uvloop does that part in C);
- ``request``: the instructions inside the parser's ``feed_data`` calls, inclusive: from the
  request's first byte to its answer being queued (the protocol, plan, token, keystore, work,
  envelope, access log and metrics), without the harness or the loop.

The garbage collector is off in the counted process and the provider is ``native`` (no
calibration, which runs for a time and so for a varying number of instructions); a
collection's instructions depend on when it falls, which moved the totals by 5 % between two
runs of one tree. A tree's ``src`` on ``--src`` is what is counted (an older commit's worktree
by the same command). Each route takes about three minutes (valgrind runs some 50x slower).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .cpu_per_request import ROUTES

ROOT = Path(__file__).resolve().parent.parent
COUNTS = (20, 100)
REQUESTS = 5 * (COUNTS[1] - COUNTS[0])  # benchmarks.wire times five runs of N
FEED = "HttpParser_13feed_data"  # httptools' Cython name for HttpParser.feed_data
RUNNER = (
    "import gc, runpy, sys; gc.disable(); sys.argv = ['wire', sys.argv[1]];"
    " runpy.run_module('benchmarks.wire', run_name='__main__')"
)


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} not found (apt install valgrind)")
    return found


def _count(route: str, src: str, n: int, out: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "SEALFLOW_PROVIDER": "native",
        "PYTHONHASHSEED": "0",
        "SEALFLOW_BENCH_N": str(n),
        "PYTHONPATH": f"{src}{os.pathsep}{ROOT}",
    }
    cmd = [
        _tool("valgrind"), "--tool=callgrind", "--separate-threads=yes",
        f"--callgrind-out-file={out}", sys.executable, "-c", RUNNER, route,
    ]  # fmt: skip
    quiet = subprocess.DEVNULL
    return subprocess.Popen(cmd, env=env, stdout=quiet, stderr=quiet)


def _figures(path: Path) -> tuple[int, int]:
    """The main thread's total, and the inclusive count of ``feed_data``, of one profile."""
    main = Path(f"{path}-01")  # --separate-threads: one file a thread, the main one first
    total = re.search(r"^totals:\s+(\d+)", main.read_text(), re.M)
    if total is None:
        raise RuntimeError(f"no totals in {main}")
    annotated = subprocess.run(
        [_tool("callgrind_annotate"), "--inclusive=yes", "--threshold=100", str(main)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    feed = next((line for line in annotated.splitlines() if FEED in line), None)
    if feed is None:
        raise RuntimeError(f"no {FEED} in {main}: did the route answer?")
    return int(total.group(1)), int(feed.split()[0].replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", default=str(ROOT / "src"))
    parser.add_argument("routes", nargs="*", default=["transit-hmac", "transit-sign"])
    args = parser.parse_args()
    unknown = sorted(set(args.routes) - set(ROUTES))
    if unknown:
        parser.error(f"unknown route(s) {', '.join(unknown)}; routes: {', '.join(ROUTES)}")
    print("| route | main thread, instructions/request | request (feed_data), instructions |")
    print("|---|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for route in args.routes:
            outs = [Path(tmp) / f"{route}.{n}" for n in COUNTS]
            runs = [_count(route, args.src, n, out) for n, out in zip(COUNTS, outs, strict=True)]
            if any(run.wait() != 0 for run in runs):
                raise SystemExit(f"{route}: a counted run failed")
            (main_a, feed_a), (main_b, feed_b) = (_figures(out) for out in outs)
            per_main, per_feed = (main_b - main_a) / REQUESTS, (feed_b - feed_a) / REQUESTS
            print(f"| {route} | {per_main:,.0f} | {per_feed:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
