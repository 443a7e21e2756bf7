"""``AsyncClient``: the service's HTTP API for asyncio applications.

Each call takes a connection from the client's pool (keep-alive: many small calls share one
TCP or TLS connection), runs one ``Exchange`` on it, and maps a failure to the exception table
of ``_errors``. The retry rules are all here, in ``_transfer``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import ssl
from collections.abc import AsyncGenerator
from typing import Any, Literal, overload
from urllib.parse import quote

from ._connection import Origin, Pool
from ._duplex import Exchange, Progress
from ._errors import SealflowError, TransportError
from ._keys import ExportedKey, Key
from ._sink import Channel, Collect, Sink, ToFile, Writable
from ._source import Input, Source, source_for

DEFAULT_URL = "http://127.0.0.1:8080"
Mode = Literal["stream", "single"]
Verify = bool | str | os.PathLike[str] | ssl.SSLContext


def _tls_context(verify: Verify) -> ssl.SSLContext:
    if isinstance(verify, ssl.SSLContext):
        return verify
    if verify is True:
        return ssl.create_default_context()
    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return ssl.create_default_context(cafile=os.fspath(verify))


def _aad_header(aad: bytes | str | None) -> list[tuple[str, str]]:
    if aad is None:
        return []
    raw = aad.encode() if isinstance(aad, str) else bytes(aad)
    return [("X-AAD", base64.b64encode(raw).decode())]


class AsyncClient:
    """A client of one sealflow service, for asyncio code.

    ``url`` defaults to ``$SEALFLOW_URL`` or http://127.0.0.1:8080 (a path prefix is kept);
    ``token`` to ``$SEALFLOW_TOKEN``; ``verify`` is True (system CAs), a CA bundle path, an
    ``ssl.SSLContext``, or False (no verification); ``timeout`` is the seconds a call may go
    without any progress (connecting, sending or receiving) before it fails with
    ``TransportError``; None waits for ever.

    Data inputs are bytes-like, a binary file object, or an iterator or async iterator of
    bytes. Outputs are ``bytes``, or written to ``out`` (a binary file object; then the call
    returns the number of bytes written), or the chunks of ``encrypt_stream`` and
    ``decrypt_stream``. ``on_progress(sent, received)`` is called as body bytes go and come
    (after a retry, from zero again).

    Transport: the request body streams up while the response streams down, with
    ``Sealflow-Duplex: 1`` (the service then answers as the body arrives; a service that
    answers request-then-response works the same). When that attempt fails the way a proxy
    that cannot carry full duplex fails (the connection closes, or the response ends, before
    the upload completed, and the answer, if any, is not the service's JSON error), and the
    input can be sent again (bytes, or a seekable file) and no output has reached the caller
    (always true for the ``bytes`` result), the call is retried once without the header.
    ``duplex=False`` never asks for full duplex. A call on a kept-alive connection that the
    server had closed meanwhile is retried once on a new connection (replayable inputs).

    Tokens: the HTTP API has no token routes (tokens are managed with ``sealflow tokens`` on
    the keystore), so neither has this client. One ``AsyncClient`` belongs to the event loop
    that first uses it. The token never appears in messages or reprs.
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        verify: Verify = True,
        timeout: float | None = 60.0,
        duplex: bool = True,
    ) -> None:
        self._origin = Origin.parse(url or os.environ.get("SEALFLOW_URL") or DEFAULT_URL)
        token = os.environ.get("SEALFLOW_TOKEN") if token is None else token
        # h11 would quote a bad header value, the token, in its error: refuse it here.
        if token and not re.fullmatch(r"[\x21-\x7e]+", token):
            raise ValueError("the token has characters not allowed in an HTTP header")
        self._auth = [("Authorization", f"Bearer {token}")] if token else []
        self._duplex = duplex
        tls = _tls_context(verify) if self._origin.tls else None
        self._pool = Pool(self._origin, tls, timeout)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._origin.url!r})"

    @property
    def url(self) -> str:
        return self._origin.url

    @property
    def connections_opened(self) -> int:
        """How many connections this client has opened (keep-alive reuses them)."""
        return self._pool.opened

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the idle connections."""
        await self._pool.aclose()

    # Data

    @overload
    async def encrypt(
        self,
        key: str,
        data: Input,
        *,
        mode: Mode = ...,
        aad: bytes | str | None = ...,
        out: None = ...,
        on_progress: Progress | None = ...,
    ) -> bytes: ...
    @overload
    async def encrypt(
        self,
        key: str,
        data: Input,
        *,
        mode: Mode = ...,
        aad: bytes | str | None = ...,
        out: Writable,
        on_progress: Progress | None = ...,
    ) -> int: ...
    async def encrypt(
        self,
        key: str,
        data: Input,
        *,
        mode: Mode = "stream",
        aad: bytes | str | None = None,
        out: Writable | None = None,
        on_progress: Progress | None = None,
    ) -> bytes | int:
        """Seal ``data`` under the latest version of ``key``: the envelope (``mode`` "stream",
        the default, or "single" for bodies up to the service's single-shot limit)."""
        return await self._data(self._encrypt_target(key, mode), data, aad, out, on_progress)

    @overload
    async def decrypt(
        self,
        data: Input,
        *,
        key: str | None = ...,
        aad: bytes | str | None = ...,
        out: None = ...,
        on_progress: Progress | None = ...,
    ) -> bytes: ...
    @overload
    async def decrypt(
        self,
        data: Input,
        *,
        key: str | None = ...,
        aad: bytes | str | None = ...,
        out: Writable,
        on_progress: Progress | None = ...,
    ) -> int: ...
    async def decrypt(
        self,
        data: Input,
        *,
        key: str | None = None,
        aad: bytes | str | None = None,
        out: Writable | None = None,
        on_progress: Progress | None = None,
    ) -> bytes | int:
        """Open an envelope: the plaintext. With ``key``, the envelope must name that key."""
        return await self._data(self._decrypt_target(key), data, aad, out, on_progress)

    def encrypt_stream(
        self,
        key: str,
        data: Input,
        *,
        mode: Mode = "stream",
        aad: bytes | str | None = None,
        on_progress: Progress | None = None,
    ) -> AsyncGenerator[bytes, None]:
        """``encrypt``, with the envelope as chunks while they arrive (``aclose()`` it to stop
        early: the rest is not read and the connection is dropped)."""
        return self._stream(self._encrypt_target(key, mode), data, aad, on_progress)

    def decrypt_stream(
        self,
        data: Input,
        *,
        key: str | None = None,
        aad: bytes | str | None = None,
        on_progress: Progress | None = None,
    ) -> AsyncGenerator[bytes, None]:
        """``decrypt``, with the plaintext as chunks while they arrive. In full duplex a
        stream envelope is opened chunk by chunk: if a later chunk fails, the iterator raises
        ``TransportError`` after earlier chunks were given out; use them only if it ends."""
        return self._stream(self._decrypt_target(key), data, aad, on_progress)

    # Key management (scope admin)

    async def create_key(
        self, name: str, algorithm: str = "aes-256-gcm", *, exportable: bool = False
    ) -> Key:
        body = {"name": name, "algorithm": algorithm, "exportable": exportable}
        return Key.from_json(await self._json("POST", "/v1/keys", body, idempotent=False))

    async def list_keys(self) -> list[Key]:
        answer = await self._json("GET", "/v1/keys")
        return [Key.from_json(k) for k in answer["keys"]]

    async def get_key(self, name: str) -> Key:
        return Key.from_json(await self._json("GET", f"/v1/keys/{quote(name, safe='')}"))

    async def rotate_key(self, name: str) -> Key:
        """Add a version; new encryptions use it."""
        target = f"/v1/keys/{quote(name, safe='')}/rotate"
        return Key.from_json(await self._json("POST", target, idempotent=False))

    async def update_key(
        self,
        name: str,
        *,
        min_decryption_version: int | None = None,
        allow_lowering: bool = False,
        min_encryption_version: int | None = None,
        deletion_allowed: bool | None = None,
        exportable: bool | None = None,
        max_encryptions: int | None = None,
        auto_rotate_period: float | None = None,
    ) -> Key:
        """Change a key's policy; only what is given changes (the server refuses a call that
        gives nothing). Lowering ``min_decryption_version`` needs ``allow_lowering=True``;
        ``exportable`` can only become true; ``auto_rotate_period`` is in seconds (0: never)."""
        fields = {
            "min_decryption_version": min_decryption_version,
            "min_encryption_version": min_encryption_version,
            "deletion_allowed": deletion_allowed,
            "exportable": exportable,
            "max_encryptions": max_encryptions,
            "auto_rotate_period": auto_rotate_period,
        }
        body: dict[str, Any] = {k: v for k, v in fields.items() if v is not None}
        if allow_lowering:
            body["allow_lowering"] = True
        return Key.from_json(await self._json("PATCH", f"/v1/keys/{quote(name, safe='')}", body))

    async def delete_key(self, name: str) -> None:
        """Delete a key and destroy every version's material: its envelopes can never be
        opened again. The server refuses it until ``update_key(name, deletion_allowed=True)``."""
        await self._json("DELETE", f"/v1/keys/{quote(name, safe='')}", idempotent=False)

    async def export_key(self, name: str, version: int | None = None) -> ExportedKey:
        """A version's material (the latest by default), for keys created exportable."""
        query = "" if version is None else f"?version={int(version)}"
        target = f"/v1/keys/{quote(name, safe='')}/export{query}"
        return ExportedKey.from_json(await self._json("GET", target))

    # The plumbing (the sync Client calls _data and the targets too)

    @staticmethod
    def _encrypt_target(key: str, mode: Mode) -> str:
        if mode not in ("stream", "single"):
            raise ValueError(f"mode must be 'stream' or 'single', not {mode!r}")
        return f"/v1/keys/{quote(key, safe='')}/encrypt?mode={mode}"

    @staticmethod
    def _decrypt_target(key: str | None) -> str:
        return f"/v1/keys/{quote(key, safe='')}/decrypt" if key is not None else "/v1/decrypt"

    async def _data(
        self,
        target: str,
        data: Input,
        aad: bytes | str | None,
        out: Writable | None,
        on_progress: Progress | None,
    ) -> bytes | int:
        source = source_for(data)
        sink: Collect | ToFile = Collect() if out is None else ToFile(out)
        headers = [("Content-Type", "application/octet-stream"), *_aad_header(aad)]
        await self._transfer("POST", target, headers, source, sink, on_progress, data_route=True)
        return sink.result() if isinstance(sink, Collect) else sink.written

    async def _stream(
        self, target: str, data: Input, aad: bytes | str | None, on_progress: Progress | None
    ) -> AsyncGenerator[bytes, None]:
        source = source_for(data)
        headers = [("Content-Type", "application/octet-stream"), *_aad_header(aad)]
        channel = Channel()
        task = asyncio.create_task(
            self._transfer("POST", target, headers, source, channel, on_progress, data_route=True)
        )
        task.add_done_callback(channel.finished)
        try:
            while (chunk := await channel.get()) is not None:
                yield chunk
        finally:
            if not task.done():  # the consumer stopped early
                task.cancel()
                await asyncio.wait([task])

    async def _json(
        self, method: str, target: str, body: Any = None, *, idempotent: bool = True
    ) -> Any:
        headers = []
        data = b""
        if body is not None:
            headers.append(("Content-Type", "application/json"))
            data = json.dumps(body).encode()
        sink = Collect()
        source = source_for(data)
        await self._transfer(method, target, headers, source, sink, None, idempotent=idempotent)
        answer = sink.result()
        return json.loads(answer) if answer else None  # None: a 204 (delete_key)

    async def _transfer(
        self,
        method: str,
        target: str,
        headers: list[tuple[str, str]],
        source: Source,
        sink: Sink,
        on_progress: Progress | None,
        *,
        data_route: bool = False,
        idempotent: bool = True,
    ) -> None:
        """One call, with at most one retry of each kind (see the class docstring)."""
        duplex = self._duplex and data_route
        stale_retry = idempotent
        fresh = False
        target = self._origin.prefix + target
        while True:
            conn = await self._pool.acquire(fresh)
            head = [*self._auth, *headers, *([("Sealflow-Duplex", "1")] if duplex else [])]
            host = self._origin.host_header
            ex = Exchange(conn, host, method, target, head, source, on_progress)
            try:
                async with ex:
                    status = await ex.start()
                    if not 200 <= status < 300:
                        raise await ex.error()
                    async for piece in ex.body():
                        await sink.write(piece)
                    await ex.finish()
                return
            except SealflowError as e:
                if e is ex.upload_error or not source.replayable:
                    raise
                stale = isinstance(e, TransportError) and conn.reused and not ex.responded
                if stale_retry and stale and sink.reset():
                    # A kept-alive connection the server had closed: once more, on a new one.
                    stale_retry, fresh = False, True
                elif duplex and _proxy_trouble(e, ex) and sink.reset():
                    duplex = False
                else:
                    raise
                await source.rewind()
            finally:
                self._pool.release(conn, ex.reusable)


def _proxy_trouble(error: SealflowError, ex: Exchange) -> bool:
    """A full-duplex attempt failed the way it does through a proxy that cannot carry it:
    the connection closed, or the response ended, before the upload was complete, and the
    answer (if any) was not the service's JSON error."""
    return not ex.upload_done and error.code is None
