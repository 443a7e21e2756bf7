"""``AsyncClient``: the service's HTTP API for asyncio applications.

Each call is a ``Plan`` (``_calls``, shared with ``Client``); it takes a connection from the
client's pool (keep-alive: many small calls share one TCP or TLS connection), runs one
``Exchange`` on it, and maps a failure to the exception table of ``_errors``. ``_transfer``
makes the retries that ``Plan.retry`` allows.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Iterable, Sequence
from typing import Any, Literal, TypeVar, overload

from . import _calls as calls
from ._connection import MAX_CONNECTIONS, Pool
from ._duplex import Exchange, Progress
from ._errors import SealflowError, TransportError
from ._keys import ExportedKey, Key
from ._origin import Endpoint, Verify
from ._plan import Mode, Plan
from ._records import (
    BATCH_BYTES,
    BATCH_RECORDS,
    DEPTH,
    Batch,
    Errors,
    Records,
    Value,
    abatches,
    checked_limits,
)
from ._sink import Channel, Collect, Sink, ToFile, Writable
from ._source import Input, Source, source_for
from ._tokens import Token

T = TypeVar("T")


class AsyncClient:
    """A client of one sealflow service, for asyncio code.

    ``url`` defaults to ``$SEALFLOW_URL`` or http://127.0.0.1:8080 (a path prefix is kept);
    ``token`` to ``$SEALFLOW_TOKEN``; ``verify`` is True (system CAs), a CA bundle file, a
    directory of CA certificates under their hashed names (``openssl rehash``), an
    ``ssl.SSLContext``, or False (no verification); ``timeout`` is the seconds a call may go
    without any progress (connecting, sending or receiving) before it fails with
    ``TransportError``; None waits for ever.

    Data inputs are bytes-like, a binary file object, or an iterator or async iterator of
    bytes. Outputs are ``bytes``, or written to ``out`` (a binary file object; then the call
    returns the number of bytes written), or the chunks of ``encrypt_stream`` and
    ``decrypt_stream``. ``on_progress(sent, received)`` is called as body bytes go and come
    (after a retry, from zero again).

    Transport (``_plan``): a body of known length up to 64 KiB (SMALL_MAX, the service's
    whole-body limit) goes with the request head in one write, and the answer is read after
    it; an encrypt without ``mode`` asks for single-shot for such a body, stream mode for any
    other. Larger bodies and bodies of unknown length stream up while the response streams
    down, with ``Sealflow-Duplex: 1`` (the service then answers as the body arrives; a service
    that answers request-then-response works the same). When that attempt fails the way a
    proxy that cannot carry full duplex fails (the connection closes, or the response ends,
    before the upload completed, and the answer, if any, is not the service's JSON error), and
    the input can be sent again (bytes, or a seekable file) and no output has reached the
    caller (always true for the ``bytes`` result), the call is retried once without the
    header. ``duplex=False`` never asks for full duplex. A call on a kept-alive connection
    that the server had closed meanwhile is retried once on a new connection (replayable
    inputs), and a single-shot encrypt the client chose that the service finds too large
    (its limit set below 64 KiB) once in stream mode.

    ``max_connections`` (100 by default, as httpx's; None: no limit) bounds the connections in
    use at once: a call beyond it waits until one is free (up to 64 idle ones are kept).
    Proxies come from ``HTTP_PROXY``, ``HTTPS_PROXY`` and ``NO_PROXY`` (either case, read as
    ``urllib.request`` reads them; ``_proxy``) unless ``trust_env`` is False.

    One ``AsyncClient`` belongs to the event loop that first uses it; calls from many tasks
    at once each take a connection of the pool. The token never appears in messages or
    reprs.
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        verify: Verify = True,
        timeout: float | None = 60.0,
        duplex: bool = True,
        max_connections: int | None = MAX_CONNECTIONS,
        trust_env: bool = True,
    ) -> None:
        self._endpoint = Endpoint.make(url, token, verify, timeout, trust_env)
        self._duplex = duplex
        if max_connections is not None and max_connections < 1:
            raise ValueError("max_connections must be at least 1, or None")
        endpoint = self._endpoint
        self._pool = Pool(endpoint.origin, endpoint.tls, timeout, max_connections, endpoint.proxy)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    @property
    def url(self) -> str:
        return self._endpoint.origin.url

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
        mode: Mode | None = ...,
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
        mode: Mode | None = ...,
        aad: bytes | str | None = ...,
        out: Writable,
        on_progress: Progress | None = ...,
    ) -> int: ...
    async def encrypt(
        self,
        key: str,
        data: Input,
        *,
        mode: Mode | None = None,
        aad: bytes | str | None = None,
        out: Writable | None = None,
        on_progress: Progress | None = None,
    ) -> bytes | int:
        """Seal ``data`` under the latest version of ``key``: the envelope. ``mode`` "stream"
        or "single" (up to the service's single-shot limit); None: single-shot for a body of
        known length up to 64 KiB, stream for any other."""
        source = source_for(data)
        plan = calls.encrypt(key, source.length, mode, aad, self._duplex)
        return await self._data(plan, source, out, on_progress)

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
        source = source_for(data)
        plan = calls.decrypt(key, source.length, aad, self._duplex)
        return await self._data(plan, source, out, on_progress)

    def encrypt_stream(
        self,
        key: str,
        data: Input,
        *,
        mode: Mode | None = None,
        aad: bytes | str | None = None,
        on_progress: Progress | None = None,
    ) -> AsyncGenerator[bytes, None]:
        """``encrypt``, with the envelope as chunks while they arrive (``aclose()`` it to stop
        early: the rest is not read and the connection is dropped)."""
        source = source_for(data)
        plan = calls.encrypt(key, source.length, mode, aad, self._duplex)
        return self._stream(plan, source, on_progress)

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
        source = source_for(data)
        plan = calls.decrypt(key, source.length, aad, self._duplex)
        return self._stream(plan, source, on_progress)

    def encrypt_many(
        self,
        key: str,
        values: Iterable[Value] | AsyncIterable[Value],
        aad: bytes | str | None = None,
        *,
        batch_bytes: int = BATCH_BYTES,
        batch_records: int = BATCH_RECORDS,
    ) -> AsyncIterator[bytes]:
        """Seal each value alone under the latest version of ``key``: one single-shot
        envelope per value, in order, as an async iterator. ``values`` (bytes-like, from an
        iterable or async iterable of any length) are read a batch at a time, at most
        ``batch_records`` values and ``batch_bytes`` of body per request (``mode=records``),
        two requests in flight; ``aad`` applies to every value."""
        limits = checked_limits(batch_bytes, batch_records)
        return self._many(calls.encrypt_many(key, aad), values, limits)

    @overload
    def decrypt_many(
        self,
        envelopes: Iterable[Value] | AsyncIterable[Value],
        *,
        key: str | None = ...,
        aad: bytes | str | None = ...,
        errors: Literal["raise"] = ...,
        batch_bytes: int = ...,
        batch_records: int = ...,
    ) -> AsyncIterator[bytes]: ...
    @overload
    def decrypt_many(
        self,
        envelopes: Iterable[Value] | AsyncIterable[Value],
        *,
        key: str | None = ...,
        aad: bytes | str | None = ...,
        errors: Literal["return"],
        batch_bytes: int = ...,
        batch_records: int = ...,
    ) -> AsyncIterator[bytes | SealflowError]: ...
    def decrypt_many(
        self,
        envelopes: Iterable[Value] | AsyncIterable[Value],
        *,
        key: str | None = None,
        aad: bytes | str | None = None,
        errors: Errors = "raise",
        batch_bytes: int = BATCH_BYTES,
        batch_records: int = BATCH_RECORDS,
    ) -> AsyncIterator[bytes | SealflowError]:
        """Open each single-shot envelope (of any keys; with ``key``, each must name it): the
        plaintexts in order, batched as ``encrypt_many``. A record that fails raises its
        exception (``DecryptionFailed``, ``MalformedEnvelope``, ``VersionRetired``,
        ``KeyNotFound``) with its position as ``.index`` after the records before it were
        given out; with ``errors="return"`` the exception takes the record's place."""
        call = calls.decrypt_many(key, aad, errors)
        return self._many(call, envelopes, checked_limits(batch_bytes, batch_records))

    # Key management (scope admin)

    async def create_key(
        self, name: str, algorithm: str = "aes-256-gcm", *, exportable: bool = False
    ) -> Key:
        return await self._admin(calls.create_key(name, algorithm, exportable))

    async def list_keys(self) -> list[Key]:
        return await self._admin(calls.list_keys())

    async def get_key(self, name: str) -> Key:
        return await self._admin(calls.get_key(name))

    async def rotate_key(self, name: str) -> Key:
        """Add a version; new encryptions use it."""
        return await self._admin(calls.rotate_key(name))

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
        return await self._admin(calls.update_key(name, allow_lowering, fields))

    async def delete_key(self, name: str) -> None:
        """Delete a key and destroy every version's material: its envelopes can never be
        opened again. The server refuses it until ``update_key(name, deletion_allowed=True)``."""
        await self._admin(calls.delete_key(name))

    async def export_key(self, name: str, version: int | None = None) -> ExportedKey:
        """A version's material (the latest by default), for keys created exportable."""
        return await self._admin(calls.export_key(name, version))

    async def wrapping_key(self) -> str:
        """The public half of the service's import wrapping key (RSA-4096, PEM): what a key
        is wrapped for before ``import_key`` (docs/API.md, Importing keys)."""
        return await self._admin(calls.wrapping_key())

    async def import_key(
        self,
        name: str,
        versions: Sequence[str | None],
        *,
        algorithm: str = "aes-256-gcm",
        hash_function: str = "SHA256",
        min_decryption_version: int = 1,
        min_encryption_version: int = 0,
        deletion_allowed: bool = False,
        exportable: bool = False,
        allow_rotation: bool = False,
        auto_rotate_period: float | None = None,
    ) -> Key:
        """Create ``name`` whole, in one write, from versions 1, 2, ... each wrapped for
        ``wrapping_key`` (None: a retired placeholder, allowed only below
        ``min_decryption_version``). Needs ``admin`` and ``export`` on the key; refused if the
        name is taken."""
        fields = {
            "algorithm": algorithm,
            "hash_function": hash_function,
            "min_decryption_version": min_decryption_version,
            "min_encryption_version": min_encryption_version,
            "deletion_allowed": deletion_allowed,
            "exportable": exportable,
            "allow_rotation": allow_rotation,
            "auto_rotate_period": auto_rotate_period,
        }
        return await self._admin(calls.import_key(name, versions, fields))

    # Tokens (docs/API.md, "Token management")

    async def create_token(
        self,
        scopes: Sequence[str],
        *,
        label: str = "",
        ttl: int | str | None = None,
        explicit_max_ttl: int | str = 0,
        renewable: bool = True,
        num_uses: int = 0,
        orphan: bool = False,
    ) -> Token:
        """A new token with ``scopes`` the caller holds (scope ``admin``); its secret is
        ``.secret``, shown this once. Durations: seconds or Vault's text (``"1h30m"``)."""
        call = calls.create_token(scopes, label, ttl, explicit_max_ttl, renewable, num_uses, orphan)
        return await self._admin(call)

    async def list_tokens(self) -> list[Token]:
        """Every token's description, never a secret (scope ``admin``)."""
        return await self._admin(calls.list_tokens())

    async def lookup_token(self) -> Token:
        """The caller's own token's description (any token)."""
        return await self._admin(calls.lookup_token())

    async def renew_token(self, increment: int | str | None = None) -> Token:
        """Renew the caller's own token: ``increment`` more (None: its TTL again)."""
        return await self._admin(calls.renew_token(increment))

    async def revoke_token(self, accessor: str | None = None) -> None:
        """Revoke the token ``accessor`` names (scope ``admin``), or with None the caller's
        own; its children go with it."""
        await self._admin(calls.revoke_token(accessor))

    async def transit_decrypt(
        self, name: str, ciphertext: str, *, context: bytes | None = None, mount: str = "transit"
    ) -> bytes:
        """Decrypt one Transit ciphertext (``vault:v<N>:...``) on the service's
        Vault-compatible API at ``mount``; ``context`` is its associated data."""
        return await self._admin(calls.transit_decrypt(mount, name, ciphertext, context))

    # The plumbing

    async def _data(
        self, plan: Plan, source: Source, out: Writable | None, on_progress: Progress | None
    ) -> bytes | int:
        sink: Collect | ToFile = Collect() if out is None else ToFile(out)
        await self._transfer(plan, source, sink, on_progress)
        return sink.result() if isinstance(sink, Collect) else sink.written

    async def _stream(
        self, plan: Plan, source: Source, on_progress: Progress | None
    ) -> AsyncGenerator[bytes, None]:
        channel = Channel()
        task = asyncio.create_task(self._transfer(plan, source, channel, on_progress))
        task.add_done_callback(channel.finished)
        try:
            while (chunk := await channel.get()) is not None:
                yield chunk
        finally:
            if not task.done():  # the consumer stopped early
                task.cancel()
                await asyncio.wait([task])

    async def _many(
        self,
        call: Records,
        values: Iterable[Value] | AsyncIterable[Value],
        limits: tuple[int, int],
    ) -> AsyncGenerator[Any, None]:
        """One result per value, in order."""
        async with contextlib.aclosing(self._answers(call, values, limits)) as answers:
            async for batch, answer in answers:
                results, error = call.results(answer, batch)
                for result in results:
                    yield result
                if error is not None:
                    raise error

    async def _answers(
        self,
        call: Records,
        values: Iterable[Value] | AsyncIterable[Value],
        limits: tuple[int, int],
    ) -> AsyncGenerator[tuple[Batch, bytes], None]:
        """Each batch's answer, in order: batch k+1 is sent before batch k's answer is given
        (as ``_pipeline`` does for ``Client``)."""
        prefix, prelude = self._endpoint.target, self._endpoint.prelude
        inflight: deque[tuple[Batch, asyncio.Task[bytes]]] = deque()
        first = 0
        try:
            async with contextlib.aclosing(abatches(values, *limits)) as groups:
                async for group in groups:
                    batch = call.batch(prefix, prelude, group, first)
                    first += batch.count
                    inflight.append((batch, asyncio.create_task(self._batch(call, batch))))
                    if len(inflight) >= DEPTH:
                        yield await self._oldest(inflight)
            while inflight:
                yield await self._oldest(inflight)
        finally:
            for _, task in inflight:  # stopped early, or failed
                task.cancel()
            if inflight:
                await asyncio.wait([task for _, task in inflight])

    @staticmethod
    async def _oldest(inflight: deque[tuple[Batch, asyncio.Task[bytes]]]) -> tuple[Batch, bytes]:
        batch, task = inflight[0]
        answer = await task  # still in flight if this is cancelled: cancelled with the rest
        inflight.popleft()
        return batch, answer

    async def _batch(self, call: Records, batch: Batch) -> bytes:
        body = memoryview(batch.body)[batch.start :]
        sink = Collect()
        await self._transfer(call.plan(len(body)), source_for(body), sink, None)
        return sink.result()

    async def _admin(self, call: calls.Admin[T]) -> T:
        sink = Collect()
        await self._transfer(call.plan, source_for(call.body), sink, None)
        return call.result(sink.result())

    async def _transfer(
        self, plan: Plan, source: Source, sink: Sink, on_progress: Progress | None
    ) -> None:
        """One call, with the retries ``Plan.retry`` allows."""
        prefix, prelude = self._endpoint.target, self._endpoint.prelude
        while True:
            conn = await self._pool.acquire(plan.fresh)
            ex = Exchange(conn, plan.head(prefix, prelude), plan, source, on_progress)
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
                retry = plan.retry(e, stale=stale, cut_short=not ex.upload_done)
                if retry is None or not sink.reset():
                    raise
                plan = retry
                await source.rewind()
            finally:
                self._pool.release(conn, ex.reusable)
