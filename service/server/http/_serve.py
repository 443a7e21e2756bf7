"""uvicorn, configured through its public API, serving the app with sealflow's protocol."""

from __future__ import annotations

import uvicorn

from sealflow.service.config import Settings

from ._protocol import HttpProtocol


def serve(settings: Settings) -> None:
    uvicorn.run(
        "sealflow.service.server.app:create_app",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        http=HttpProtocol,
        timeout_keep_alive=settings.keepalive_timeout,  # type: ignore[arg-type]
        loop="uvloop",
        log_config=None,
        access_log=False,  # sealflow.access logs one structured line per request
        timeout_graceful_shutdown=int(settings.shutdown_timeout) or None,
        ssl_certfile=settings.tls_cert,
        ssl_keyfile=settings.tls_key,
        server_header=False,
        # The access log's client address is the app's to find (``trusted_proxies``, believed
        # only from the proxies named there: server/_forwarded.py), not uvicorn's.
        proxy_headers=False,
    )
