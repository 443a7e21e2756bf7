"""The data path: seal or open a request body as it arrives and stream the result.

Both are ASGI apps for one request, built by ``_routes`` after authentication and
the key lookup, so nothing of the body has been read when they start. They move bytes
only: the decisions (scope, key, version) are the routes', including the one that waits for
the envelope prefix (``Resolve``).

Stream mode collects incoming pieces into batches of about ``BATCH`` bytes and
hands each batch to the crypto pool (a worker thread when it is large) while
the event loop receives the next one; the output of batch k is sent while batch
k+1 is sealed (batches run one after the other: the codec is stateful). Memory
per request is a couple of batches, whatever the body size. Single-shot mode
fills one pooled ``AEADBuffer`` (preallocated from Content-Length) and seals or
opens it in place.

Decryption sends nothing before the first authenticated bytes. If a later chunk
fails, the response is left unfinished and the server closes the connection.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Protocol

from starlette.types import Receive, Scope, Send

from sealflow import engine
from sealflow.engine import (
    NONCE_LEN,
    TAG_LEN,
    AEADBuffer,
    Algorithm,
    ChunkedDecryptor,
    ChunkedEncryptor,
)
from sealflow.service.envelope import (
    MalformedEnvelope,
    Mode,
    Prefix,
    bound_data,
    parse,
    prefix_length,
)
from sealflow.service.keystore import KeyStoreError, Lease

from .. import _metrics, errors
from .._body import Body, Disconnected, Reply, drop_connection, stream_error
from .._budget import Hold
from .._logging import AccessRecord
from .._state import Services
from .._watchdog import stalled
from ..errors import ApiError
from ._reopen import Authenticate, Reopen
from ._spool import Spool

BATCH = 256 * 1024
_OCTETS = b"content-type: application/octet-stream\r\ncontent-length: %d\r\n"
WHOLE_MAX = 64 * 1024  # see Transfer._whole_max
# The most finalize() can write: a short last chunk, its tag, and the header if still unsent.
_CHUNKED_TAIL = engine.CHUNK_LEN + engine.sealed_size(0)

Chunked = ChunkedEncryptor | ChunkedDecryptor


Output = bytes | bytearray


class BatchCodec(Protocol):
    """A codec that takes a whole batch at once (``_records``: one engine call per batch;
    ``_reopen.Authenticate``)."""

    def run(self, pieces: list[bytes], final: bool) -> Output: ...

    def inline(self, size: int) -> bool:
        """Whether a batch of ``size`` bytes may run on the event loop: nothing in it waits
        (a sealer whose lease would need the keystore runs on a worker instead)."""
        ...


Codec = Chunked | BatchCodec
# Sees each piece of a body as it arrives; raises ApiError to refuse the request there.
Watch = Callable[[bytes], None]


def _run_batch(codec: Codec, head: bytes, pieces: list[bytes], size: int, final: bool) -> Output:
    """Process a batch in one go (on a worker thread when large): head || output."""
    if not isinstance(codec, (ChunkedEncryptor, ChunkedDecryptor)):
        return codec.run(pieces, final)  # no head: these codecs write every byte
    out = bytearray(len(head) + codec.update_size(size) + (_CHUNKED_TAIL if final else 0))
    out[: len(head)] = head
    o = len(head)
    with memoryview(out) as view:
        for piece in pieces:
            o += codec.update_into(piece, view[o:])
        if final:
            o += codec.finalize_into(view[o:])
    del out[o:]
    return out


# Given the parsed prefix of an envelope, the key material to open it with (or an ApiError).
Resolve = Callable[[Prefix], bytes]


class Sink(Protocol):
    """Where a stream's output goes: the reply itself (full duplex) or a spool."""

    async def write(self, data: Output, more: bool = True) -> None: ...


class Transfer:
    """Shared plumbing of encrypt and decrypt: body, reply, errors, accounting."""

    operation: str
    # Whether this transfer's output is plaintext: then a spool of it seals what goes to its
    # file under a key of its own (it keeps ciphertext as it is).
    spools_plaintext = False

    def __init__(
        self, svc: Services, log: AccessRecord, aad: bytes, length: int | None, duplex: bool
    ) -> None:
        self.svc = svc
        self.log = log
        self.aad = aad
        self.length = length
        self.duplex = duplex
        self.algorithm = "unknown"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        watchdog = self.svc.watchdog
        watch = watchdog.watch()
        body, reply = Body(receive, watch), Reply(send, self.log, watch)
        try:
            try:
                await self.transfer(body, reply)
            except asyncio.CancelledError as exc:
                if not stalled(exc):
                    raise
                watch.task.uncancel()
                raise errors.timeout() from None
        except (ApiError, engine.DecryptionError, KeyStoreError) as exc:
            # In a method of its own: a local here holding the error would hold its traceback,
            # whose frames hold this frame and the transfer's buffers, in a cycle that only
            # the garbage collector frees (about 1 MiB a stalled stream, measured).
            await self._fail(errors.api_error(exc), scope, body, reply)
        except Disconnected:
            self.log.error = "client_disconnected"
        finally:
            watchdog.release(watch)
            self._account(body.received, reply.sent)

    def answer(self, body: bytes) -> errors.Whole:
        """The fast answer (the protocol's, docs/SERVICE.md): ``whole`` of a body that has
        come whole, with the same accounting and errors as ``__call__``."""
        sent = 0
        try:
            out = self.whole(body)
        except (ApiError, engine.DecryptionError, KeyStoreError) as exc:
            return self._refused(errors.api_error(exc))
        else:
            sent = len(out)
            self.log.status = 200
            return errors.Whole(200, self.header_lines(sent), (out,))
        finally:
            self._account(len(body), sent)

    def header_lines(self, length: int) -> bytes:
        """The header lines of a fast answer of length bytes (an ASGI answer's: ``Reply``)."""
        return _OCTETS % length

    def _refused(self, error: ApiError) -> errors.Whole:
        self._note(error)
        self.log.status = error.status
        return error.whole(close=False)

    def whole(self, body: bytes) -> bytes:
        """The answer to a body that came whole and small: sealed or opened at once."""
        raise NotImplementedError

    def _account(self, received: int, sent: int) -> None:
        self.log.bytes_in, self.log.bytes_out = received, sent
        _metrics.count_bytes(self.algorithm, self.operation, received, sent)
        self.finished(received)

    def finished(self, received: int) -> None:
        """After the transfer, however it ended: an encryption adds its bytes to its version's
        usage (its sealings were counted before they were made)."""

    def _note(self, error: ApiError) -> None:
        self.log.error = error.code
        if error.code == "decryption_failed":
            _metrics.DECRYPTION_FAILURES.labels("authentication").inc()

    async def _fail(self, error: ApiError, scope: Scope, body: Body, reply: Reply) -> None:
        self._note(error)
        # An authenticated client that sent a bad envelope gets its answer on a connection
        # that stays open; one that is too large, too slow or refused for lack of memory does
        # not (the rest of its body is not worth reading).
        close = not body.done and error.status in (408, 413, 503)
        if not await reply.fail(error, close):
            _metrics.STREAM_ABORTS.labels(self.operation).inc()
            self.log.aborted = True
            if error.status == 408:  # the client stopped reading
                drop_connection(scope)
            else:
                stream_error(scope, error.code)

    async def transfer(self, body: Body, reply: Reply) -> None:
        raise NotImplementedError

    def _whole_max(self) -> int:
        """The largest single-shot body handled whole when it arrives in one piece: sealed or
        opened on the event loop straight from that piece, with no pooled buffer, memory
        budget or worker thread (what the small-record path costs is mostly such steps)."""
        return min(WHOLE_MAX, self.svc.crypto.inline_below - 1)

    async def stream(
        self,
        body: Body,
        reply: Reply,
        codec: Codec,
        head: bytes,
        pieces: list[bytes],
        length: int | None,
        watch: Watch | None = None,
    ) -> None:
        """Run the body through a stream codec: answered as it goes when the client asked for
        full duplex, otherwise once the body has ended, from a spool (``_spool``)."""
        if self.duplex:
            reply.duplex, reply.length = True, length
            await self.pipeline(body, reply, codec, head, pieces, watch)
            return
        spool = self.spool(self.spools_plaintext)
        try:
            await self.pipeline(body, spool, codec, head, pieces, watch)
            # Every byte is produced (and, for decryption, authenticated): now the answer.
            await self.from_spool(reply, spool, spool.size)
        finally:
            spool.close()

    def spool(self, sealed: bool) -> Spool:
        settings = self.svc.settings
        return Spool(
            self.svc.crypto,
            self.svc.spool_budget,
            settings.spool_memory_bytes,
            settings.max_spool_request_bytes or settings.max_spool_bytes,
            settings.spool_dir,
            sealed=sealed,
        )

    @staticmethod
    async def from_spool(
        reply: Reply, spool: Spool, length: int, again: Reopen | None = None
    ) -> None:
        """The answer from the spool, with its length; through a second open if given."""
        reply.length = length
        async for piece in spool.chunks(None if again is None else again.update):
            await reply.write(piece)
        await reply.write(b"" if again is None else again.finalize(), more=False)

    async def pipeline(
        self,
        body: Body,
        out: Sink,
        codec: Codec,
        head: bytes,
        pieces: list[bytes],
        watch: Watch | None = None,
    ) -> None:
        """Batches through the codec, overlapping receive, crypto and send; ``watch`` sees
        each piece as it arrives (and may refuse the request before its batch runs)."""
        crypto = self.svc.crypto
        size = sum(map(len, pieces))
        pending: Output | asyncio.Task[Output] | None = None
        try:
            while True:
                piece = await body.read()
                if piece is not None:
                    if watch is not None:
                        watch(piece)
                    pieces.append(piece)
                    size += len(piece)
                    if size < BATCH:
                        continue
                final = piece is None
                # The codec is stateful: batch k must be done before batch k+1 starts.
                ready = None if pending is None else await _done(pending)
                args = (codec, head, pieces, size, final)
                if not isinstance(codec, (ChunkedEncryptor, ChunkedDecryptor)) and not (
                    codec.inline(size)
                ):
                    # Its lease may wait for the keystore: never on the event loop.
                    pending = asyncio.ensure_future(asyncio.to_thread(_run_batch, *args))
                elif size < crypto.inline_below:
                    pending = _run_batch(*args)
                else:
                    pending = asyncio.ensure_future(crypto.run(size, _run_batch, *args))
                head, pieces, size = b"", [], 0
                if ready is not None:
                    await out.write(ready)  # while the worker runs batch k+1
                if final:
                    break
            await out.write(await _done(pending), more=False)
            pending = None
        finally:
            if isinstance(pending, asyncio.Task):
                # Never leave a worker running on this request's codec behind.
                pending.cancel()
                await asyncio.gather(pending, return_exceptions=True)


# What a declared Content-Length buys before its bytes arrive, of memory and of the budget: a
# client that declares 64 MiB and sends nothing must not hold 64 MiB (nor keep others out).
FIRST_RESERVE = 1 << 20


def _buffer(svc: Services, hold: Hold, hint: int | None, first: int) -> AEADBuffer:
    """A pooled buffer for a single-shot body of `hint` bytes (if known), paid for up front
    only up to FIRST_RESERVE; ``_feed`` pays for the rest as it arrives.

    The budget counts twice the buffer: the body, then the copy of the result that is sent.
    """
    size = first if hint is None else min(hint, first + FIRST_RESERVE)
    hold.take(2 * size)
    return svc.buffers.acquire(size if hint is not None else None)


def _feed(buf: AEADBuffer, hold: Hold, piece: bytes, hint: int | None) -> None:
    need = len(buf) + len(piece)
    if need > buf.capacity:
        # Straight to the declared size once the body outgrows the first reserve (one
        # reallocation); without one, double.
        target = hint if hint is not None and need <= hint else max(need, 2 * buf.capacity)
        hold.take(2 * (target - buf.capacity))
        buf.reserve(target)
    buf.feed(piece)


async def _done(job: Output | asyncio.Task[Output]) -> Output:
    return await job if isinstance(job, asyncio.Task) else job


# Algorithm.value is a descriptor call: a tenth of a microsecond per request.
_NAMES = {algorithm: algorithm.value for algorithm in Algorithm}


class Encrypt(Transfer):
    operation = "encrypt"

    def __init__(
        self,
        svc: Services,
        log: AccessRecord,
        aad: bytes,
        length: int | None,
        duplex: bool,
        lease: Lease,
        prefix: bytes,
        mode: Mode,
    ) -> None:
        super().__init__(svc, log, aad, length, duplex)
        self.prefix = prefix
        self.lease = lease  # the one sealing, counted by the route
        self.material = lease.material
        self.mode = mode
        self.algorithm = _NAMES[lease.key.algorithm]

    def finished(self, received: int) -> None:
        self.svc.usage.add_bytes(self.lease, received)

    def whole(self, body: bytes) -> bytes:
        limit = self.svc.settings.max_single_bytes
        if self.mode is not Mode.SINGLE or len(body) > min(limit, self._whole_max()):
            raise errors.too_large(limit)  # the plan never asks for more
        nonce = os.urandom(NONCE_LEN)
        aad = bound_data(self.prefix, self.aad)
        return self.prefix + nonce + engine.seal(self.algorithm, self.material, nonce, aad, body)

    async def transfer(self, body: Body, reply: Reply) -> None:
        alg, prefix = self.algorithm, self.prefix
        if self.mode is Mode.STREAM:
            size = None if self.length is None else len(prefix) + engine.sealed_size(self.length)
            # In request-then-response the envelope is spooled and sent as it is: one AEAD pass.
            codec = ChunkedEncryptor(alg, self.material, bound_data(prefix, self.aad))
            await self.stream(body, reply, codec, prefix, [], size)
            return
        limit = self.svc.settings.max_single_bytes
        first = None
        if self.length is not None and self.length <= min(limit, self._whole_max()):
            first = await body.read()
            if body.done:  # the whole body, in one piece: sealed straight from it
                await reply.whole(self.whole(first or b""))
                return
        start = len(prefix) + NONCE_LEN
        hint = None if self.length is None else start + self.length + TAG_LEN
        with self.svc.budget.hold() as hold:
            buf = _buffer(self.svc, hold, hint, start)
            try:
                nonce = os.urandom(NONCE_LEN)
                buf.feed(prefix)
                buf.feed(nonce)
                if first is not None:
                    _feed(buf, hold, first, hint)
                while (piece := await body.read()) is not None:
                    if len(buf) - start + len(piece) > limit:
                        raise errors.too_large(limit)
                    _feed(buf, hold, piece, hint)
                aad = bound_data(prefix, self.aad)
                await self.svc.crypto.run(len(buf), buf.seal, alg, self.material, nonce, aad, start)
                # A copy: the server may still hold the bytes after send() returns,
                # and the pooled buffer is wiped and reused right away.
                sealed = bytes(buf.view())
            finally:
                buf.release()
            reply.length = len(sealed)
            await reply.write(sealed, more=False)


def _malformed(why: str) -> ApiError:
    _metrics.DECRYPTION_FAILURES.labels("malformed_envelope").inc()
    return errors.malformed_envelope(why)


def _length(data: bytes) -> int | None:
    try:
        return prefix_length(data)
    except MalformedEnvelope as exc:
        raise _malformed(str(exc)) from None


def _parsed(raw: bytes) -> Prefix:
    try:
        return parse(raw)
    except MalformedEnvelope as exc:
        raise _malformed(str(exc)) from None


class Decrypt(Transfer):
    operation = "decrypt"
    spools_plaintext = True

    def __init__(
        self,
        svc: Services,
        log: AccessRecord,
        aad: bytes,
        length: int | None,
        duplex: bool,
        resolve: Resolve,
    ) -> None:
        super().__init__(svc, log, aad, length, duplex)
        self.resolve = resolve

    def whole(self, body: bytes) -> bytes:
        n = _length(body)
        if n is None or len(body) < n:
            raise _malformed("truncated envelope prefix")
        prefix, raw = _parsed(body[:n]), body[:n]
        material = self._check(prefix)
        aad = bound_data(raw, self.aad)
        with memoryview(body) as view:
            if prefix.mode is Mode.STREAM:
                codec = ChunkedDecryptor(prefix.algorithm, material, aad)
                return codec.update(view[n:]) + codec.finalize()
            limit = self.svc.settings.max_single_bytes
            if len(body) - n > limit + NONCE_LEN + TAG_LEN:
                raise errors.too_large(limit)
            if len(body) - n < NONCE_LEN + TAG_LEN:
                raise errors.decryption_failed()
            return engine.open(
                prefix.algorithm, material, view[n : n + NONCE_LEN], aad, view[n + NONCE_LEN :]
            )

    async def transfer(self, body: Body, reply: Reply) -> None:
        first = await body.read()
        if body.done and not self.duplex and len(first or b"") <= self._whole_max():
            # The whole envelope came in one piece: opened straight from it.
            await reply.whole(self.whole(first or b""))
            return
        prefix, raw, rest = await self._read_prefix(body, first)
        material = self._check(prefix)
        remaining = None if self.length is None else self.length - len(raw)
        if prefix.mode is Mode.STREAM:
            # Truncated or extended bodies fail here, before anything is read.
            size = None if remaining is None else engine.opened_size(remaining)
            context = bound_data(raw, self.aad)
            codec = ChunkedDecryptor(prefix.algorithm, material, context)
            pieces = [rest] if rest else []
            if self.duplex or self._fits_in_memory():
                # One pass: a small answer waits in the spool's memory part (which it cannot
                # outgrow; were it to, the spool would seal what goes to its file). Full
                # duplex answers chunked, without the size: a later chunk's failure can then
                # be named in-band before the cut-off (docs/API.md, "Transports").
                await self.stream(body, reply, codec, b"", pieces, None if self.duplex else size)
                return
            # Request-then-response: two passes, and only the envelope in the spool (_reopen).
            check, spool = Authenticate(codec), self.spool(sealed=False)
            try:
                await self.pipeline(body, spool, check, b"", pieces)
                second = check.reopen(ChunkedDecryptor(prefix.algorithm, material, context))
                await self.from_spool(reply, spool, check.opened, second)
            finally:
                check.close()
                spool.close()
            return
        with self.svc.budget.hold() as hold:
            plaintext = await self._open_single(body, hold, prefix, raw, material, rest, remaining)
            reply.length = len(plaintext)
            await reply.write(plaintext, more=False)

    def _fits_in_memory(self) -> bool:
        """Whether the declared body, so its plaintext, fits the spool's memory part."""
        return self.length is not None and self.length <= self.svc.settings.spool_memory_bytes

    async def _read_prefix(self, body: Body, first: bytes | None) -> tuple[Prefix, bytes, bytes]:
        """The envelope prefix, parsed and as bytes, and whatever arrived after it."""
        head = first or b""
        piece = first
        while True:
            n = _length(head) if head else None
            if n is not None and len(head) >= n:
                return _parsed(head[:n]), head[:n], head[n:]
            if piece is None and body.done:
                raise _malformed("truncated envelope prefix")
            piece = await body.read()
            if piece is None:
                raise _malformed("truncated envelope prefix")
            head = head + piece if head else piece

    def _check(self, prefix: Prefix) -> bytes:
        self.log.key, self.log.version = prefix.name, prefix.version
        self.log.mode = prefix.mode.name.lower()
        self.algorithm = prefix.algorithm.value
        return self.resolve(prefix)

    async def _open_single(
        self,
        body: Body,
        hold: Hold,
        prefix: Prefix,
        raw: bytes,
        material: bytes,
        rest: bytes,
        remaining: int | None,
    ) -> bytes:
        limit = self.svc.settings.max_single_bytes + NONCE_LEN + TAG_LEN
        if remaining is not None and remaining > limit:
            raise errors.too_large(self.svc.settings.max_single_bytes)
        buf = _buffer(self.svc, hold, remaining, len(rest))
        try:
            buf.feed(rest)
            while (piece := await body.read()) is not None:
                if len(buf) + len(piece) > limit:
                    raise errors.too_large(self.svc.settings.max_single_bytes)
                _feed(buf, hold, piece, remaining)
            if len(buf) < NONCE_LEN + TAG_LEN:
                raise errors.decryption_failed()
            nonce = bytes(buf.view()[:NONCE_LEN])
            opened = await self.svc.crypto.run(
                len(buf),
                buf.open,
                prefix.algorithm,
                material,
                nonce,
                bound_data(raw, self.aad),
                NONCE_LEN,
            )
            with opened:
                return bytes(opened)
        finally:
            buf.release()
