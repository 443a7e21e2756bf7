"""The data routes: encrypt, decrypt and HMAC raw bodies, served as plain ASGI in front of
FastAPI.

``_routes`` decides everything a request needs from its head (token, scope, key, AAD, mode)
and ``_transfer`` then only moves bytes between the network and the codecs; a small
single-shot request that arrived whole is answered by the transfer's own whole-body step,
from the ASGI path or from the protocol's fast answer alike (``answer``).
"""

from ._routes import (
    DECRYPT_ANY_ROUTE,
    ENCRYPT_ROUTE,
    HMAC_ROUTE,
    OPENAPI_PATHS,
    VERIFY_ROUTE,
    Route,
    answer,
    match,
    serve,
)
from ._transfer import WHOLE_MAX

__all__ = [
    "DECRYPT_ANY_ROUTE",
    "ENCRYPT_ROUTE",
    "HMAC_ROUTE",
    "OPENAPI_PATHS",
    "VERIFY_ROUTE",
    "WHOLE_MAX",
    "Route",
    "answer",
    "match",
    "serve",
]
