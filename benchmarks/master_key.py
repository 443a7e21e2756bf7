"""What a master key in an HSM costs on the request path: a 1 KiB encrypt on a server whose KEK
is sealed by a SoftHSM2 token (the pkcs11 provider) against the benchmark's own server (the
file provider), same run (issue 29).

    python -m benchmarks.http master     (needs wrk and Debian's softhsm2)

The token is made in the run's temporary directory (``softhsm2-util --init-token``, then
``sealflow keystore init-master``), as docs/DEPLOY.md's walk-through does. Both servers run
pinned to the server core, one at a time: rounds alternate between them (each going first in
every other round) and the best of each counts. The provider is called once, when the server
starts; the line shows that nothing of it is left on the request path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ._harness import Report
from .http import ROUNDS, Load, Server, best, sealflow_server, table, wrk

LIBRARY = Path("/usr/lib/softhsm/libsofthsm2.so")
_PIN = "20261203"  # a throwaway token's, in the run's temporary directory


def _token(work: Path) -> list[str]:
    """A SoftHSM2 token with the master key on it; the pkcs11 provider's flags for serve."""
    hsm = work / "hsm"
    (hsm / "tokens").mkdir(parents=True)
    conf = hsm / "softhsm2.conf"
    conf.write_text(f"directories.tokendir = {hsm / 'tokens'}\nobjectstore.backend = file\n")
    os.environ["SOFTHSM2_CONF"] = str(conf)  # the servers started after this inherit it
    pin = hsm / "pin"
    pin.write_text(_PIN + "\n")
    pin.chmod(0o600)
    init = ["softhsm2-util", "--init-token", "--free", "--label", "sealflow-bench"]
    subprocess.run([*init, "--pin", _PIN, "--so-pin", "5678"], check=True, capture_output=True)
    flags = [
        "--master-key-provider", "pkcs11",
        "--master-key-pkcs11-library", str(LIBRARY),
        "--master-key-pkcs11-token-label", "sealflow-bench",
        "--master-key-pkcs11-key-label", "sealflow-master",
        "--master-key-pkcs11-pin-file", str(pin),
    ]  # fmt: skip
    sealflow = str(Path(sys.executable).with_name("sealflow"))
    made = [sealflow, "keystore", "init-master", "--data-dir", str(hsm / "unused"), *flags]
    subprocess.run(made, check=True, capture_output=True)
    return flags


def master_part(report: Report, ours: Server, work: Path, script: Path) -> None:
    if shutil.which("softhsm2-util") is None or not LIBRARY.exists():
        raise RuntimeError("softhsm2 is missing: apt-get install -y softhsm2")
    body = work / "master-1k"
    body.write_bytes(os.urandom(1024))
    path = "/v1/keys/default/encrypt?mode=single"
    hsm_work = work / "pkcs11"
    hsm_work.mkdir()
    runs: dict[str, list[Load]] = {"file": [], "pkcs11": []}
    with sealflow_server(hsm_work, *_token(work)) as hsm:
        servers = {"file": ours, "pkcs11": hsm}
        for round_ in range(ROUNDS):
            # Each goes first in every other round: the first run of a round was seen to gain
            # or lose a few percent on this machine whichever server it was.
            order = ("file", "pkcs11") if round_ % 2 == 0 else ("pkcs11", "file")
            for name in order:
                srv = servers[name]
                runs[name].append(wrk(srv.url + path, body, srv.token, 16, script))
    file, pkcs11 = best(runs["file"]), best(runs["pkcs11"])
    rows = [
        f"| file (the default) | {file.rps:,.0f} | {file.p99_ms:.2f} |",
        f"| pkcs11 (SoftHSM2) | {pkcs11.rps:,.0f} | {pkcs11.p99_ms:.2f} |",
    ]
    title = "1 KiB single-shot encrypt, 16 connections, by master-key provider"
    table(title, "req/s | p99 ms", rows)
    report.check(
        "29. 1 KiB encrypt, pkcs11 provider / file provider (issue 29: 0.97x)",
        pkcs11.rps / file.rps,
        0.97,
    )
