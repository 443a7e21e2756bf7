"""uvicorn, configured through its public API, serving the app with sealflow's protocol.

TLS comes from ``_tls`` through uvicorn's ``ssl_context_factory``, so that SIGHUP can reload
the certificate, key and client CAs in place (``_tls.reload``, installed by the app's lifespan
in each serving process).

With ``--workers`` above 1 uvicorn's supervisor process receives the operator's SIGHUP, and its
own handling restarts every worker, closing each worker's connections. sealflow runs that
supervisor itself instead of through ``uvicorn.run``, with one method replaced (``_Workers``):
SIGHUP is passed on to each worker, which reloads its TLS files itself and keeps its
connections. That subclass is the one place sealflow goes beyond uvicorn's public API: it
relies on ``uvicorn.supervisors.Multiprocess`` dispatching SIGHUP to ``handle_hup`` from its main
loop, on its ``processes`` (each with ``pid`` and ``wait_until_ready``), on ``should_exit`` and
on ``Config.bind_socket``, all of uvicorn 0.54 (the pin in pyproject.toml);
tests/service/server/test_tls_reload.py checks them, and the reload itself, with two workers.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
from typing import Any

import uvicorn
from uvicorn.supervisors import Multiprocess

from sealflow.service.config import Settings

from . import _tls
from ._protocol import HttpProtocol

log = logging.getLogger("sealflow")


def serve(settings: Settings) -> None:
    options: dict[str, Any] = {
        "factory": True,
        "host": settings.host,
        "port": settings.port,
        "workers": settings.workers,
        "http": HttpProtocol,
        "timeout_keep_alive": settings.keepalive_timeout,
        "loop": "uvloop",
        "log_config": None,
        "access_log": False,  # sealflow.access logs one structured line per request
        "timeout_graceful_shutdown": int(settings.shutdown_timeout) or None,
        "server_header": False,
        # The access log's client address is the app's to find (``trusted_proxies``, believed
        # only from the proxies named there: server/_forwarded.py), not uvicorn's.
        "proxy_headers": False,
    }
    if settings.tls_cert is not None and settings.tls_key is not None:
        files = _tls.Files(
            settings.tls_cert, settings.tls_key, settings.tls_client_ca, settings.tls_client_auth
        )
        try:
            _tls.load(files)  # here, once: bad files are one line, not a failed worker each
        except _tls.TlsError as exc:
            raise SystemExit(f"sealflow serve: TLS: {exc}") from None
        # A partial of a module's function: uvicorn hands it to worker processes (pickled).
        options["ssl_context_factory"] = functools.partial(_tls.listener, files)
    app = "sealflow.service.server.app:create_app"
    if settings.workers == 1:
        uvicorn.run(app, **options)
        return
    config = uvicorn.Config(app, **options)
    _Workers(config, sockets=[config.bind_socket()]).run()


class _Workers(Multiprocess):
    """uvicorn's supervisor, but SIGHUP reaches the workers instead of replacing them."""

    def handle_hup(self) -> None:
        signalled = []
        for process in list(self.processes):
            # A worker still starting has no SIGHUP handler yet (the signal would end it): it
            # is waited for, as uvicorn waits for a new worker, then signalled.
            ready = process.wait_until_ready(
                self.config.timeout_worker_healthcheck, self.should_exit
            )
            if ready and process.pid is not None:
                os.kill(process.pid, signal.SIGHUP)
                signalled.append(process.pid)
        log.info(
            "SIGHUP: passed to the workers, each reloads its TLS files",
            extra={"fields": {"workers": signalled}},
        )
