"""The client against curl: ``sealflow encrypt`` of a 200 MiB file and ``curl -T`` of the
same file, on the same server, alternating.

    python -m benchmarks.client            (needs curl: apt-get install -y curl; about 60 s)

``sealflow serve`` runs pinned to core 0, the client (curl, the ``sealflow`` command, or the
library in a warm process) to core 1. Both ask for full duplex (curl with
``-H 'Sealflow-Duplex: 1'``; the client sends it itself) and write their output to a new file.
Each round runs curl, the command and the library once each; best and median count (this
machine is shared and noisy). The command's time is the whole process: interpreter start,
imports and transfer (the same commands on a 1-byte file show the fixed part). With
``> FILE`` it writes as ``curl -o`` does; with ``-o FILE`` it also fsyncs the file before
renaming it into place, which curl does not do. The package is
byte-compiled first, as an installed one is (with PYTHONDONTWRITEBYTECODE set, an editable
install would compile on every start).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sealflow

from ._harness import Report, machine
from .http import SERVER_CORE, sealflow_server

CLIENT_CORE = "1"
ROUNDS = int(os.environ.get("SEALFLOW_BENCH_ROUNDS", "9"))
SIZE = 200 << 20
SEALFLOW = str(Path(sys.executable).with_name("sealflow"))
SYNCLESS = "sealflow encrypt > FILE"
DURABLE = "sealflow encrypt -o FILE (fsync, rename)"
# One encrypt per line read from stdin; prints its seconds.
LIBRARY = """
import sys, time
from sealflow import Client
with Client(sys.argv[1], sys.argv[2]) as client:
    for _ in sys.stdin:
        with open(sys.argv[3], "rb") as src, open(sys.argv[4], "xb") as out:
            start = time.perf_counter()
            client.encrypt("default", src, out=out)
            print(time.perf_counter() - start, flush=True)
"""


def timed(cmd: list[str], output: Path, env: dict[str, str] | None, stdout: bool) -> float:
    """Seconds for cmd; its output goes to a new file (no truncation), or stdout does."""
    output.unlink(missing_ok=True)
    pinned = ["taskset", "-c", CLIENT_CORE, *cmd]
    with output.open("xb") if stdout else open(os.devnull, "wb") as out:
        start = time.perf_counter()
        subprocess.run(pinned, check=True, env=env, stdout=out)
        return time.perf_counter() - start


def main() -> int:
    for tool in ("curl", "taskset"):
        if shutil.which(tool) is None:
            print(f"{tool} is missing: apt-get install -y curl util-linux", file=sys.stderr)
            return 2
    print(
        f"# sealflow client benchmark\n\n{machine()}; server on core {SERVER_CORE}, client on core "
        f"{CLIENT_CORE}; 200 MiB, stream encrypt, {ROUNDS} alternating rounds"
    )
    package = str(Path(sealflow.__file__).parent)
    subprocess.run([sys.executable, "-m", "compileall", "-q", package], check=True)
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        plain, tiny = work / "plain", work / "tiny"
        with plain.open("wb") as f:
            for _ in range(SIZE >> 20):
                f.write(os.urandom(1 << 20))
        tiny.write_bytes(b"x")
        with sealflow_server(work) as ours:
            env = {**os.environ, "SEALFLOW_URL": ours.url, "SEALFLOW_TOKEN": ours.token}

            def curl(src: Path) -> list[str]:
                return [
                    "curl", "-sSf", "-T", str(src), "-X", "POST", "-o", str(work / "curl.sfl"),
                    "-H", f"Authorization: Bearer {ours.token}", "-H", "Sealflow-Duplex: 1",
                    ours.url + "/v1/keys/default/encrypt",
                ]  # fmt: skip

            def cli(src: Path, output: str = "") -> list[str]:
                to = ["-o", str(work / output)] if output else []
                return [SEALFLOW, "encrypt", "--key", "default", "-i", str(src), *to]

            warm_cmd = [
                "taskset", "-c", CLIENT_CORE, sys.executable, "-c", LIBRARY, ours.url,
                ours.token, str(plain), str(work / "lib.sfl"),
            ]  # fmt: skip
            pipe = subprocess.PIPE
            library = subprocess.Popen(warm_cmd, stdout=pipe, stdin=pipe, text=True)
            assert library.stdin is not None
            assert library.stdout is not None
            # name: (command, its environment, its output file, written to its stdout)
            commands = {
                "curl -T -o FILE": (curl(plain), None, "curl.sfl", False),
                SYNCLESS: (cli(plain), env, "cli.sfl", True),
                DURABLE: (cli(plain, "o.sfl"), env, "o.sfl", False),
                "curl, 1-byte file": (curl(tiny), None, "curl.sfl", False),
                "sealflow encrypt > FILE, 1-byte file": (cli(tiny), env, "cli.sfl", True),
            }
            for _ in range(ROUNDS):
                for name, (cmd, cmd_env, output, stdout) in commands.items():
                    seconds = timed(cmd, work / output, cmd_env, stdout)
                    times.setdefault(name, []).append(seconds)
                (work / "lib.sfl").unlink(missing_ok=True)
                library.stdin.write("\n")
                library.stdin.flush()
                times.setdefault("Client.encrypt in a warm process", []).append(
                    float(library.stdout.readline())
                )
            library.stdin.close()
            library.wait()
    print("\n| client | best s | median s | MB/s (best) | every run, s |\n|---|---:|---:|---:|---|")
    for name, runs in times.items():
        rate = "" if "1-byte" in name else f"{SIZE / min(runs) / 1e6:,.0f}"
        every = " ".join(f"{t:.2f}" for t in runs)
        print(f"| {name} | {min(runs):.3f} | {statistics.median(runs):.3f} | {rate} | {every} |")
    report = Report()
    curl_runs = times["curl -T -o FILE"]
    for name in (SYNCLESS, DURABLE):
        runs = times[name]
        median = statistics.median(curl_runs) / statistics.median(runs)
        report.check(f"{name} / curl, best runs", min(curl_runs) / min(runs), 0.8)
        report.check(f"{name} / curl, medians", median, 0.8)
    report.check("Client.encrypt (no process start) / curl, best runs",
                 min(curl_runs) / min(times["Client.encrypt in a warm process"]), 0.8)  # fmt: skip
    return 0 if report.print_checks() else 1


if __name__ == "__main__":
    sys.exit(main())
