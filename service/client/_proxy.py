"""An HTTP proxy between the client and the service, from the environment as ``urllib``
reads it (``HTTP_PROXY``, ``HTTPS_PROXY``, ``NO_PROXY``, in either case), sans-IO: which
proxy a service goes through, and the ``CONNECT`` request that opens a tunnel.

An ``http://`` service through a proxy gets requests with absolute-form targets
(``POST http://host:port/v1/...``) on a connection to the proxy; an ``https://`` service
gets a ``CONNECT host:port`` tunnel, and TLS with the service inside it (the proxy sees
neither the token nor the data). The proxy itself is spoken to in plain HTTP.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from ._errors import TransportError
from ._framing import FramingError, parse_head

if TYPE_CHECKING:
    from ._origin import Origin

MAX_CONNECT_ANSWER = 16 * 1024
_NAMES = ("http_proxy", "https_proxy")


@dataclass(frozen=True)
class Proxy:
    host: str
    port: int
    authorization: bytes  # the Proxy-Authorization line with its CRLF, or b""

    def __repr__(self) -> str:  # credentials stay out
        return f"Proxy({self.host!r}, {self.port})"

    @classmethod
    def parse(cls, url: str) -> Proxy:
        parts = urlsplit(url if "://" in url else "http://" + url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(
                f"only http:// proxies are supported (a proxy URL like {parts.scheme}://...)"
            )
        authorization = b""
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            authorization = b"Proxy-Authorization: Basic " + base64.b64encode(pair) + b"\r\n"
        return cls(parts.hostname, parts.port or 80, authorization)

    def connect_request(self, origin: Origin) -> bytes:
        host = f"[{origin.host}]" if ":" in origin.host else origin.host
        authority = f"{host}:{origin.port}"
        line = f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n".encode("ascii")
        return line + self.authorization + b"\r\n"


def from_environment(origin: Origin) -> Proxy | None:
    """The proxy the environment names for ``origin``'s scheme, unless ``NO_PROXY`` (or
    ``no_proxy``) exempts its host."""
    if not any(name.lower() in _NAMES for name in os.environ):
        return None  # and urllib.request (which imports much: start-up time) is not loaded
    import urllib.request

    proxies = urllib.request.getproxies_environment()
    url = proxies.get("https" if origin.tls else "http")
    if not url:
        return None
    if bool(urllib.request.proxy_bypass(origin.host_header, proxies)):  # Linux: the env's
        return None
    return Proxy.parse(url)


def connect_answer(data: bytes) -> int | None:
    """How many bytes of ``data`` the proxy's answer to ``CONNECT`` took once it is complete
    (None before); TransportError unless it opened the tunnel (a 2xx)."""
    try:
        found = parse_head(data)
    except FramingError as e:
        raise TransportError(f"the proxy answered CONNECT wrongly: {e}") from None
    if found is None:
        if len(data) > MAX_CONNECT_ANSWER:
            raise TransportError("the proxy's answer to CONNECT is too long")
        return None
    head, size = found
    if not 200 <= head.status < 300:
        raise TransportError(f"the proxy refused the tunnel: HTTP {head.status}")
    return size
