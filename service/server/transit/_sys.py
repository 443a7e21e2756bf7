"""``/v1/sys/health``, as Vault answers it.

Health maps sealflow's readiness onto Vault's states: ready is active (200), starting is
sealed (503), draining at shutdown is standby (429), each code overridable by the query
(``activecode``, ``sealedcode``, ``standbycode``, ``standbyok``) as in Vault's
``http/sys_health.go``; load balancers and Vault Agent probe it this way.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qsl

import orjson

import sealflow

from .._state import DRAINING, Services
from . import _wire

Answer = tuple[int, bytes]


def health(svc: Services | None, query: bytes) -> Answer:
    params = dict(parse_qsl(query.decode("latin-1")))
    sealed = svc is None
    standby = not sealed and DRAINING.is_set()
    if sealed:
        status = _code(params, "sealedcode", 503)
    elif standby and not _flag(params, "standbyok"):
        status = _code(params, "standbycode", 429)
    else:
        status = _code(params, "activecode", 200)
    body: dict[str, Any] = {
        "initialized": True,
        "sealed": sealed,
        "standby": standby,
        "replication_performance_mode": "disabled",
        "replication_dr_mode": "disabled",
        "server_time_utc": int(time.time()),
        "version": sealflow.__version__,
        "cluster_name": "sealflow",
    }
    return status, orjson.dumps(body)


def _code(params: dict[str, str], name: str, default: int) -> int:
    try:
        code = int(params.get(name, default))
    except ValueError:
        raise _wire.user_error(f"bad code for {name}") from None
    return code if 100 <= code <= 599 else default


def _flag(params: dict[str, str], name: str) -> bool:
    value = params.get(name)
    return value is not None and value.lower() in ("", "1", "t", "true")
