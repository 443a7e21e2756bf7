"""The client against curl: ``sealflow encrypt`` of a 200 MiB file and ``curl -T`` of the
same file, on the same server, alternating.

    python -m benchmarks.client            (needs curl: apt-get install -y curl; about 60 s)

``sealflow serve`` runs pinned to core 0, the client (curl, the ``sealflow`` command, or the
library in a warm process) to core 1. Both ask for full duplex (curl with
``-H 'Sealflow-Duplex: 1'``, the client sends it itself) and write their output to a file.
Each round runs curl, then the command, then the library call; the best round of each counts,
and the median is shown too (this machine is shared and noisy). The command's time is the
whole process: interpreter start, imports, transfer, and the fsync before the output file is
renamed into place (curl does not fsync). The package is byte-compiled first, as an installed
one is (with PYTHONDONTWRITEBYTECODE set, an editable install would compile on every start).
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
from .http import sealflow_server

SERVER_CORE, CLIENT_CORE = "0", "1"
ROUNDS = int(os.environ.get("SEALFLOW_BENCH_ROUNDS", "7"))
SIZE = 200 << 20
SEALFLOW = str(Path(sys.executable).with_name("sealflow"))
LIBRARY = """
import sys, time
from sealflow import Client
with Client(sys.argv[1], sys.argv[2]) as client:
    for _ in sys.stdin:  # one line per round
        with open(sys.argv[3], "rb") as src, open(sys.argv[4], "xb") as out:
            start = time.perf_counter()
            client.encrypt("default", src, out=out)
            print(time.perf_counter() - start, flush=True)
"""


def timed(cmd: list[str], output: Path, env: dict[str, str] | None = None) -> float:
    output.unlink(missing_ok=True)  # every client writes a new file (no truncation)
    pinned = ["taskset", "-c", CLIENT_CORE, *cmd]
    start = time.perf_counter()
    subprocess.run(pinned, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    for tool in ("curl", "taskset"):
        if shutil.which(tool) is None:
            print(f"{tool} is missing: apt-get install -y curl util-linux", file=sys.stderr)
            return 2
    print(
        f"# sealflow client benchmark\n\n{machine()}; server on core {SERVER_CORE}, client on "
        f"core {CLIENT_CORE}; 200 MiB, stream encrypt, best of {ROUNDS} alternating rounds"
    )
    package = str(Path(sealflow.__file__).parent)
    subprocess.run([sys.executable, "-m", "compileall", "-q", package], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        plain = work / "plain"
        with plain.open("wb") as f:
            for _ in range(SIZE >> 20):
                f.write(os.urandom(1 << 20))
        with sealflow_server(work) as ours:
            url = ours.url + "/v1/keys/default/encrypt"
            curl = [
                "curl", "-sSf", "-T", str(plain), "-X", "POST", "-o", str(work / "curl.sfl"),
                "-H", f"Authorization: Bearer {ours.token}", "-H", "Sealflow-Duplex: 1", url,
            ]  # fmt: skip
            cli = [SEALFLOW, "encrypt", "--key", "default", "-i", str(plain),
                   "-o", str(work / "cli.sfl")]  # fmt: skip
            env = {**os.environ, "SEALFLOW_URL": ours.url, "SEALFLOW_TOKEN": ours.token}
            warm_cmd = [
                "taskset", "-c", CLIENT_CORE, sys.executable, "-c", LIBRARY, ours.url,
                ours.token, str(plain), str(work / "lib.sfl"),
            ]  # fmt: skip
            pipe = subprocess.PIPE
            library = subprocess.Popen(warm_cmd, stdout=pipe, stdin=pipe, text=True)
            assert library.stdin is not None
            assert library.stdout is not None
            warm = "Client.encrypt (warm process)"
            times: dict[str, list[float]] = {"curl -T": [], "sealflow encrypt": [], warm: []}
            for _ in range(ROUNDS):
                times["curl -T"].append(timed(curl, work / "curl.sfl"))
                times["sealflow encrypt"].append(timed(cli, work / "cli.sfl", env))
                (work / "lib.sfl").unlink(missing_ok=True)
                library.stdin.write("\n")
                library.stdin.flush()
                times[warm].append(float(library.stdout.readline()))
            library.stdin.close()
            library.wait()
            sizes = {p.stat().st_size for p in (work / "curl.sfl", work / "cli.sfl")}
            if len(sizes) != 1:
                raise RuntimeError(f"the outputs differ in size: {sizes}")
    for name, runs in times.items():
        print(f"{name}: " + " ".join(f"{t:.3f}" for t in runs), file=sys.stderr)
    report = Report()
    best_curl = min(times["curl -T"])
    print(
        "\n| client | best s | median s | best MB/s | vs curl (best) |\n|---|---:|---:|---:|---:|"
    )
    for name, runs in times.items():
        ratio = best_curl / min(runs)
        print(f"| {name} | {min(runs):.3f} | {statistics.median(runs):.3f} | "
              f"{SIZE / min(runs) / 1e6:,.0f} | {ratio:.2f}x |")  # fmt: skip
    report.check("200 MiB encrypt: sealflow encrypt / curl -T throughput",
                 best_curl / min(times["sealflow encrypt"]), 0.8)  # fmt: skip
    return 0 if report.print_checks() else 1


if __name__ == "__main__":
    sys.exit(main())
