"""``Client``: the same calls as ``AsyncClient``, for code without an event loop.

Small calls (a body in memory of at most 64 KiB, and every admin call: ``_plan``) run in the
caller's own thread on blocking sockets (``_blocking``): one write and a read or two, on
connections kept alive between calls; so do the batches of ``encrypt_many`` and
``decrypt_many``, two requests in flight (``_pipeline``). Everything else (larger bodies,
files, iterators, the ``*_stream`` calls) goes to one ``AsyncClient`` on a private event loop
in a daemon thread, started by the first such call: full duplex needs the upload and the
response to move at once, which the event loop does. Chosen over ``asyncio.run`` per call
because connections belong to a loop: a loop per call could not keep a connection from one call
to the next, and a loop run in the caller's thread (``run_until_complete``) fails where an
event loop is already running (Jupyter, sync code called from async frameworks) and serialises
threads. With the private loop, calls from several threads at once each get a connection from
the shared pool. The cost is a thread hop per call (and per chunk of ``encrypt_stream``): two
thread wake-ups, which small calls do not pay (docs/BENCHMARKS.md, "Client: small calls").
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Coroutine, Generator, Iterable, Iterator, Sequence
from typing import Any, Literal, TypeVar, overload

from . import _blocking, _pipeline
from . import _calls as calls
from ._async import AsyncClient
from ._connection import MAX_CONNECTIONS
from ._duplex import Progress
from ._errors import SealflowError
from ._keys import ExportedKey, Key
from ._origin import Verify
from ._plan import Mode, Plan
from ._records import BATCH_BYTES, BATCH_RECORDS, Errors, Records, Value, checked_limits
from ._sink import Collect, ToFile, Writable
from ._source import Input, Source, source_for
from ._tokens import Token

T = TypeVar("T")
_END: Any = object()


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
        # As asyncio.run ends: what is left is cancelled, and callbacks already scheduled
        # (transports closing their sockets) run before the loop closes.
        left = asyncio.all_tasks(loop)
        for task in left:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()


class _LoopThread:
    """The private event loop and its thread, started by the first call that needs them."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self._stopped = False
        self._lock = threading.Lock()

    def start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._stopped:  # closed by another thread meanwhile
                raise RuntimeError("the client is closed")
            if self.loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=_serve, args=(loop,), name="sealflow-client", daemon=True
                )
                thread.start()
                self.loop, self.thread = loop, thread
            return self.loop

    def stop(self) -> None:
        """Close the idle connections and stop the loop (also when a Client is collected)."""
        with self._lock:
            self._stopped = True
            loop = self.loop
        if loop is None or loop.is_closed():
            return

        async def close() -> None:
            await self.client.aclose()
            loop.stop()

        asyncio.run_coroutine_threadsafe(close(), loop)


def _shut(small: _blocking.Pool, io: _LoopThread) -> None:
    small.close()
    io.stop()


async def _aclose(chunks: Any) -> None:
    await chunks.aclose()


async def _next(chunks: Any) -> Any:
    try:
        return await anext(chunks)
    except StopAsyncIteration:
        return _END


class Client:
    """A client of one sealflow service; the calls of ``AsyncClient``, blocking.

    Arguments, inputs, outputs, retries and exceptions are those of ``AsyncClient``;
    ``max_connections`` bounds the connections of its event loop (the calls that are not
    small); small calls, ``encrypt_many`` and ``decrypt_many`` run on blocking connections of
    the calling thread (one per small call, two per batch call, at once).
    ``on_progress`` is called on the caller's thread for a small call, on the client's I/O
    thread otherwise. A ``Client`` may be shared by threads; ``close()`` (or ``with
    Client(...) as client:``) ends its connections and thread.
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
        self._async = AsyncClient(
            url,
            token,
            verify=verify,
            timeout=timeout,
            duplex=duplex,
            max_connections=max_connections,
            trust_env=trust_env,
        )
        self._endpoint = self._async._endpoint
        self._duplex = duplex
        self._small = _blocking.Pool(self._endpoint)
        self._io = _LoopThread(self._async)
        self._closer = weakref.finalize(self, _shut, self._small, self._io)

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    @property
    def url(self) -> str:
        return self._async.url

    @property
    def connections_opened(self) -> int:
        """How many connections this client has opened (keep-alive reuses them): those of
        its small calls and those of its event loop."""
        return self._small.opened + self._async.connections_opened

    def close(self) -> None:
        if self._closer.alive:
            self._closer()
            if self._io.thread is not None:
                self._io.thread.join()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if not self._closer.alive or threading.current_thread() is self._io.thread:
            coro.close()
            if self._closer.alive:  # it would wait for itself
                raise RuntimeError("a Client cannot be called from its on_progress callback")
            raise RuntimeError("the client is closed")
        try:
            loop = self._io.start()
        except RuntimeError:
            coro.close()
            raise
        finished = threading.Event()

        async def guarded() -> T:
            try:
                return await coro
            finally:
                finished.set()

        future = asyncio.run_coroutine_threadsafe(guarded(), loop)
        try:
            return future.result()
        except BaseException:
            # Ctrl-C while waiting: cancel the call and let it close its connection first.
            future.cancel()
            finished.wait(5)
            raise

    # Data

    @overload
    def encrypt(
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
    def encrypt(
        self,
        key: str,
        data: Input,
        *,
        mode: Mode | None = ...,
        aad: bytes | str | None = ...,
        out: Writable,
        on_progress: Progress | None = ...,
    ) -> int: ...
    def encrypt(
        self,
        key: str,
        data: Input,
        *,
        mode: Mode | None = None,
        aad: bytes | str | None = None,
        out: Writable | None = None,
        on_progress: Progress | None = None,
    ) -> bytes | int:
        """Seal ``data`` under the latest version of ``key`` (see ``AsyncClient.encrypt``)."""
        source = source_for(data)
        plan = calls.encrypt(key, source.length, mode, aad, self._duplex)
        return self._data(plan, source, out, on_progress)

    @overload
    def decrypt(
        self,
        data: Input,
        *,
        key: str | None = ...,
        aad: bytes | str | None = ...,
        out: None = ...,
        on_progress: Progress | None = ...,
    ) -> bytes: ...
    @overload
    def decrypt(
        self,
        data: Input,
        *,
        key: str | None = ...,
        aad: bytes | str | None = ...,
        out: Writable,
        on_progress: Progress | None = ...,
    ) -> int: ...
    def decrypt(
        self,
        data: Input,
        *,
        key: str | None = None,
        aad: bytes | str | None = None,
        out: Writable | None = None,
        on_progress: Progress | None = None,
    ) -> bytes | int:
        """Open an envelope (see ``AsyncClient.decrypt``)."""
        source = source_for(data)
        plan = calls.decrypt(key, source.length, aad, self._duplex)
        return self._data(plan, source, out, on_progress)

    def encrypt_stream(
        self,
        key: str,
        data: Input,
        *,
        mode: Mode | None = None,
        aad: bytes | str | None = None,
        on_progress: Progress | None = None,
    ) -> Generator[bytes, None, None]:
        """``encrypt``, with the envelope as chunks while they arrive (``close()`` it to stop
        early: the rest is not read and the connection is dropped)."""
        return self._iterate(
            self._async.encrypt_stream(key, data, mode=mode, aad=aad, on_progress=on_progress)
        )

    def decrypt_stream(
        self,
        data: Input,
        *,
        key: str | None = None,
        aad: bytes | str | None = None,
        on_progress: Progress | None = None,
    ) -> Generator[bytes, None, None]:
        """``decrypt``, with the plaintext as chunks (see ``AsyncClient.decrypt_stream``)."""
        return self._iterate(
            self._async.decrypt_stream(data, key=key, aad=aad, on_progress=on_progress)
        )

    def _iterate(self, chunks: Any) -> Generator[bytes, None, None]:
        try:
            while (chunk := self._run(_next(chunks))) is not _END:
                yield chunk
        finally:
            if self._closer.alive:
                self._run(_aclose(chunks))

    def encrypt_many(
        self,
        key: str,
        values: Iterable[Value],
        aad: bytes | str | None = None,
        *,
        batch_bytes: int = BATCH_BYTES,
        batch_records: int = BATCH_RECORDS,
    ) -> Iterator[bytes]:
        """Seal each value alone (see ``AsyncClient.encrypt_many``): a generator."""
        return self._many(calls.encrypt_many(key, aad), values, batch_bytes, batch_records)

    @overload
    def decrypt_many(
        self,
        envelopes: Iterable[Value],
        *,
        key: str | None = ...,
        aad: bytes | str | None = ...,
        errors: Literal["raise"] = ...,
        batch_bytes: int = ...,
        batch_records: int = ...,
    ) -> Iterator[bytes]: ...
    @overload
    def decrypt_many(
        self,
        envelopes: Iterable[Value],
        *,
        key: str | None = ...,
        aad: bytes | str | None = ...,
        errors: Literal["return"],
        batch_bytes: int = ...,
        batch_records: int = ...,
    ) -> Iterator[bytes | SealflowError]: ...
    def decrypt_many(
        self,
        envelopes: Iterable[Value],
        *,
        key: str | None = None,
        aad: bytes | str | None = None,
        errors: Errors = "raise",
        batch_bytes: int = BATCH_BYTES,
        batch_records: int = BATCH_RECORDS,
    ) -> Iterator[bytes | SealflowError]:
        """Open each single-shot envelope (see ``AsyncClient.decrypt_many``): a generator."""
        call = calls.decrypt_many(key, aad, errors)
        return self._many(call, envelopes, batch_bytes, batch_records)

    def _many(
        self, call: Records, values: Iterable[Value], batch_bytes: int, batch_records: int
    ) -> Iterator[Any]:
        if not self._closer.alive:
            raise RuntimeError("the client is closed")
        limits = checked_limits(batch_bytes, batch_records)
        return _pipeline.results(self._small, self._endpoint, call, values, limits)

    # Key management (scope admin)

    def create_key(
        self, name: str, algorithm: str = "aes-256-gcm", *, exportable: bool = False
    ) -> Key:
        return self._admin(calls.create_key(name, algorithm, exportable))

    def list_keys(self) -> list[Key]:
        return self._admin(calls.list_keys())

    def get_key(self, name: str) -> Key:
        return self._admin(calls.get_key(name))

    def rotate_key(self, name: str) -> Key:
        """Add a version; new encryptions use it."""
        return self._admin(calls.rotate_key(name))

    def update_key(
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
        """Change a key's policy (see ``AsyncClient.update_key``)."""
        fields = {
            "min_decryption_version": min_decryption_version,
            "min_encryption_version": min_encryption_version,
            "deletion_allowed": deletion_allowed,
            "exportable": exportable,
            "max_encryptions": max_encryptions,
            "auto_rotate_period": auto_rotate_period,
        }
        return self._admin(calls.update_key(name, allow_lowering, fields))

    def delete_key(self, name: str) -> None:
        """Delete a key and every version's material (see ``AsyncClient.delete_key``)."""
        self._admin(calls.delete_key(name))

    def export_key(self, name: str, version: int | None = None) -> ExportedKey:
        return self._admin(calls.export_key(name, version))

    def wrapping_key(self) -> str:
        """See ``AsyncClient.wrapping_key``."""
        return self._admin(calls.wrapping_key())

    def import_key(
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
        """Create a key whole from imported versions (see ``AsyncClient.import_key``)."""
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
        return self._admin(calls.import_key(name, versions, fields))

    # Tokens (docs/API.md, "Token management")

    def create_token(
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
        return self._admin(call)

    def list_tokens(self) -> list[Token]:
        """Every token's description, never a secret (scope ``admin``)."""
        return self._admin(calls.list_tokens())

    def lookup_token(self) -> Token:
        """The caller's own token's description (any token)."""
        return self._admin(calls.lookup_token())

    def renew_token(self, increment: int | str | None = None) -> Token:
        """Renew the caller's own token: ``increment`` more (None: its TTL again)."""
        return self._admin(calls.renew_token(increment))

    def revoke_token(self, accessor: str | None = None) -> None:
        """Revoke the token ``accessor`` names (scope ``admin``), or with None the caller's
        own; its children go with it."""
        self._admin(calls.revoke_token(accessor))

    def transit_decrypt(
        self, name: str, ciphertext: str, *, context: bytes | None = None, mount: str = "transit"
    ) -> bytes:
        """See ``AsyncClient.transit_decrypt``."""
        return self._admin(calls.transit_decrypt(mount, name, ciphertext, context))

    # The plumbing

    def _data(
        self, plan: Plan, source: Source, out: Writable | None, on_progress: Progress | None
    ) -> bytes | int:
        body = source.in_memory() if plan.small else None
        if body is None:
            return self._run(self._async._data(plan, source, out, on_progress))
        sink: Collect | ToFile = Collect() if out is None else ToFile(out)
        self._small_call(plan, body, sink, on_progress)
        return sink.result() if isinstance(sink, Collect) else sink.written

    def _admin(self, call: calls.Admin[T]) -> T:
        if not call.plan.small:  # a JSON body over 64 KiB: the service refuses it (413)
            return self._run(self._async._admin(call))
        sink = Collect()
        self._small_call(call.plan, memoryview(call.body), sink, None)
        return call.result(sink.result())

    def _small_call(
        self, plan: Plan, body: memoryview, sink: Collect | ToFile, on_progress: Progress | None
    ) -> None:
        if not self._closer.alive:
            raise RuntimeError("the client is closed")
        _blocking.transfer(self._small, self._endpoint, plan, body, sink, on_progress)
