"""Where the service is and who calls it, as both clients need it: the URL's parts, the TLS
context, and the request head's fixed lines (``Host``, ``Authorization``), made once."""

from __future__ import annotations

import os
import re
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from ._proxy import Proxy, from_environment

DEFAULT_URL = "http://127.0.0.1:8080"
Verify = bool | str | os.PathLike[str] | ssl.SSLContext

# What may stand in a request line or a header value as it is: printable ASCII, no space.
_VISIBLE = re.compile(r"[\x21-\x7e]*")


@dataclass(frozen=True)
class Origin:
    """Where the service is: scheme, host, port, and the URL's path prefix."""

    url: str
    host: str
    port: int
    tls: bool
    prefix: str
    host_header: str

    @classmethod
    def parse(cls, url: str) -> Origin:
        parts = urlsplit(url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
            raise ValueError(f"the URL must look like http(s)://host[:port][/prefix], not {url!r}")
        if parts.username or parts.password:
            raise ValueError("the URL must not hold credentials: pass the token instead")
        if not _VISIBLE.fullmatch(parts.netloc + parts.path):
            raise ValueError(f"the URL must be ASCII without spaces (percent-encoded), not {url!r}")
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        return cls(f"{parts.scheme}://{parts.netloc}{parts.path}", parts.hostname, port, tls,
                   parts.path, parts.netloc)  # fmt: skip


def tls_context(verify: Verify) -> ssl.SSLContext:
    if isinstance(verify, ssl.SSLContext):
        return verify
    if verify is True:
        return ssl.create_default_context()
    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    path = os.fspath(verify)
    if os.path.isdir(path):  # hashed names, as ``openssl rehash`` makes them (ssl's capath)
        return ssl.create_default_context(capath=path)
    return ssl.create_default_context(cafile=path)


@dataclass(frozen=True)
class Endpoint:
    """One client's service and credentials. ``prelude``: the head's lines every request
    carries; ``target``: what a request target starts with (the URL's path prefix, or the
    whole URL in absolute form for a plain-HTTP service through a ``proxy``). The token is
    in no repr."""

    origin: Origin
    tls: ssl.SSLContext | None
    timeout: float | None
    prelude: bytes
    proxy: Proxy | None = None
    target: str = ""

    def __repr__(self) -> str:
        return f"Endpoint({self.origin.url!r})"

    @classmethod
    def make(
        cls,
        url: str | None,
        token: str | None,
        verify: Verify,
        timeout: float | None,
        trust_env: bool = True,
    ) -> Endpoint:
        origin = Origin.parse(url or os.environ.get("SEALFLOW_URL") or DEFAULT_URL)
        token = os.environ.get("SEALFLOW_TOKEN") if token is None else token
        # Never quoted in an error (a message would show the token): refused here instead.
        if token and not _VISIBLE.fullmatch(token):
            raise ValueError("the token has characters not allowed in an HTTP header")
        prelude = f"Host: {origin.host_header}\r\n"
        if token:
            prelude += f"Authorization: Bearer {token}\r\n"
        tls = tls_context(verify) if origin.tls else None
        proxy = from_environment(origin) if trust_env else None
        head = prelude.encode("ascii")
        target = origin.prefix
        if proxy is not None and not origin.tls:  # absolute form; the proxy's credentials
            target = f"http://{origin.host_header}{origin.prefix}"
            head += proxy.authorization
        return cls(origin, tls, timeout, head, proxy, target)
