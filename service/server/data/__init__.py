"""The data routes: encrypt and decrypt raw bodies, served as plain ASGI in front of FastAPI.

``_routes`` decides everything a request needs from its headers (token, scope, key, AAD, mode)
and ``_transfer`` then only moves bytes between the network and the codecs; ``_lane`` answers
a small single-shot request that arrived whole in one synchronous call.
"""

from . import _lane as lane
from ._routes import DUPLEX, OPENAPI_PATHS, Head, Route, match, serve

__all__ = ["DUPLEX", "OPENAPI_PATHS", "Head", "Route", "lane", "match", "serve"]
