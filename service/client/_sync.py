"""``Client``: the same calls as ``AsyncClient``, for code without an event loop.

A ``Client`` runs one ``AsyncClient`` on a private event loop in a daemon thread and hands
each call to it. Chosen over ``asyncio.run`` per call because connections belong to a loop:
a loop per call could not keep a connection from one call to the next, and a loop run in the
caller's thread (``run_until_complete``) fails where an event loop is already running
(Jupyter, sync code called from async frameworks) and serialises threads. With the private
loop, calls from several threads at once each get a connection from the shared pool. The
cost is a thread hop per call (and per chunk of ``encrypt_stream``), microseconds against a
network round trip; bodies do not cross it.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar, overload

from ._async import AsyncClient, Mode, Verify
from ._duplex import Progress
from ._keys import ExportedKey, Key
from ._sink import Writable
from ._source import Input

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


def _shut(loop: asyncio.AbstractEventLoop, client: AsyncClient) -> None:
    """Close the idle connections and stop the loop (also when a Client is collected)."""

    async def close() -> None:
        await client.aclose()
        loop.stop()

    if not loop.is_closed():
        asyncio.run_coroutine_threadsafe(close(), loop)


async def _aclose(chunks: Any) -> None:
    await chunks.aclose()


async def _next(chunks: Any) -> Any:
    try:
        return await anext(chunks)
    except StopAsyncIteration:
        return _END


class Client:
    """A client of one sealflow service; the calls of ``AsyncClient``, blocking.

    Arguments, inputs, outputs, retries and exceptions are those of ``AsyncClient``.
    ``on_progress`` is called on the client's I/O thread. A ``Client`` may be shared by
    threads; ``close()`` (or ``with Client(...) as client:``) ends its connections and thread.
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
        self._async = AsyncClient(url, token, verify=verify, timeout=timeout, duplex=duplex)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=_serve, args=(self._loop,), name="sealflow-client", daemon=True
        )
        self._thread.start()
        self._closer = weakref.finalize(self, _shut, self._loop, self._async)

    def __repr__(self) -> str:
        return f"Client({self._async.url!r})"

    @property
    def url(self) -> str:
        return self._async.url

    @property
    def connections_opened(self) -> int:
        """How many connections this client has opened (keep-alive reuses them)."""
        return self._async.connections_opened

    def close(self) -> None:
        if self._closer.alive:
            self._closer()
            self._thread.join()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if not self._closer.alive or threading.current_thread() is self._thread:
            coro.close()
            if self._closer.alive:  # it would wait for itself
                raise RuntimeError("a Client cannot be called from its on_progress callback")
            raise RuntimeError("the client is closed")
        finished = threading.Event()

        async def guarded() -> T:
            try:
                return await coro
            finally:
                finished.set()

        future = asyncio.run_coroutine_threadsafe(guarded(), self._loop)
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
        mode: Mode = ...,
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
        mode: Mode = ...,
        aad: bytes | str | None = ...,
        out: Writable,
        on_progress: Progress | None = ...,
    ) -> int: ...
    def encrypt(
        self,
        key: str,
        data: Input,
        *,
        mode: Mode = "stream",
        aad: bytes | str | None = None,
        out: Writable | None = None,
        on_progress: Progress | None = None,
    ) -> bytes | int:
        """Seal ``data`` under the latest version of ``key`` (see ``AsyncClient.encrypt``)."""
        target = self._async._encrypt_target(key, mode)
        return self._run(self._async._data(target, data, aad, out, on_progress))

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
        target = self._async._decrypt_target(key)
        return self._run(self._async._data(target, data, aad, out, on_progress))

    def encrypt_stream(
        self,
        key: str,
        data: Input,
        *,
        mode: Mode = "stream",
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

    # Key management (scope admin)

    def create_key(
        self, name: str, algorithm: str = "aes-256-gcm", *, exportable: bool = False
    ) -> Key:
        return self._run(self._async.create_key(name, algorithm, exportable=exportable))

    def list_keys(self) -> list[Key]:
        return self._run(self._async.list_keys())

    def get_key(self, name: str) -> Key:
        return self._run(self._async.get_key(name))

    def rotate_key(self, name: str) -> Key:
        return self._run(self._async.rotate_key(name))

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
        return self._run(
            self._async.update_key(
                name,
                min_decryption_version=min_decryption_version,
                allow_lowering=allow_lowering,
                min_encryption_version=min_encryption_version,
                deletion_allowed=deletion_allowed,
                exportable=exportable,
                max_encryptions=max_encryptions,
                auto_rotate_period=auto_rotate_period,
            )
        )

    def delete_key(self, name: str) -> None:
        """Delete a key and every version's material (see ``AsyncClient.delete_key``)."""
        self._run(self._async.delete_key(name))

    def export_key(self, name: str, version: int | None = None) -> ExportedKey:
        return self._run(self._async.export_key(name, version))
