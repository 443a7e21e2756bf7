"""sealflow: an encryption service over OpenSSL's EVP AEAD.

- ``sealflow.native``: the cffi binding (C helpers over libcrypto)
- ``sealflow.engine``: AEAD and C2SP chunked encryption, free of HTTP
- ``sealflow.service``: the HTTP service, keystore, client and CLI

``from sealflow import Client, AsyncClient`` gives the client library
(``sealflow.service.client``). Those names and ``__version__`` load on first use, so that
``import sealflow`` (and ``sealflow.engine``) costs neither asyncio nor
``importlib.metadata``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sealflow.service.client import AsyncClient, Client

__all__ = ["AsyncClient", "Client", "__version__"]


def __getattr__(name: str) -> Any:
    if name in ("AsyncClient", "Client"):
        from sealflow.service import client

        return getattr(client, name)
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("sealflow")
        except PackageNotFoundError:  # imported from a source tree that was never installed
            found = "0+unknown"
        globals()["__version__"] = found
        return found
    raise AttributeError(f"module 'sealflow' has no attribute {name!r}")
