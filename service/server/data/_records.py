"""Batches of small records (SPEC section 4, ``mode=records``; the framing is in docs/API.md).

A request body is a sequence of ``u32 big-endian length || bytes`` records. Encrypt answers
the same framing of single-shot envelopes (each one decryptable alone by ``/v1/decrypt``);
decrypt answers ``u8 status || u32 big-endian length || plaintext`` per record, with no
plaintext for a record that failed. The body streams through the same pipeline as a stream
envelope (``_transfer.stream``: batches of about 256 KiB, request-then-response from a spool
by default, full duplex on request), so a batch of any size holds about one batch in memory.
Each batch is one engine call (``engine.seal_many``/``open_many``) over the records complete
in it; a record cut by the batch's end waits for the next.

The codecs here are sans-IO: bytes in, bytes out, an ``ApiError`` for a request that cannot
go on (a record over ``max_record_bytes``, more than ``max_batch_records``, a body that ends
inside a record). A record that fails to open is not an error of the request: its status
says why. What the access log and the audit record say of the request (how many records, the
versions sealed or opened under) goes to its ``AccessRecord`` batch by batch, so that it is
there whenever the record is made (as the answer starts, or as it ends).
"""

from __future__ import annotations

import enum
import itertools
import struct
from array import array
from collections.abc import Callable

from sealflow import engine
from sealflow.engine import RecordStatus
from sealflow.service.envelope import MalformedEnvelope, Mode, Prefix, parse, prefix_length
from sealflow.service.keystore import KeyInfo, Lease

from .. import _metrics, errors
from .._body import Body, Reply
from .._logging import AccessRecord
from .._state import Services
from ..errors import ApiError
from ._transfer import Output, Transfer

FRAME_LEN = 4
_STATUS_LENGTH = struct.Struct(">BI")


class Status(enum.IntEnum):
    """A decrypted record's status byte (docs/API.md)."""

    OK = 0
    DECRYPTION_FAILED = 1
    MALFORMED_ENVELOPE = 2
    VERSION_RETIRED = 3
    KEY_NOT_FOUND = 4


_BY_CODE = {
    "decryption_failed": Status.DECRYPTION_FAILED,
    "malformed_envelope": Status.MALFORMED_ENVELOPE,
    "version_retired": Status.VERSION_RETIRED,
    "key_not_found": Status.KEY_NOT_FOUND,
}


# Decryption-failure metric reasons of the statuses that are counted there.
_REASONS = {
    Status.DECRYPTION_FAILED: "authentication",
    Status.MALFORMED_ENVELOPE: "malformed_envelope",
    Status.VERSION_RETIRED: "version_retired",
}


def _record_too_large(max_record: int) -> ApiError:
    return ApiError(413, "too_large", f"a record exceeds the limit of {max_record} bytes")


class FrameWatch:
    """The framing checked as the body arrives, piece by piece (``Transfer.pipeline``'s
    ``watch``): a length field that declares more than the limit is refused (413) as soon as
    its four bytes are here, not once the batch it falls in is run (up to 512 KiB later). One
    native pass per piece over the records it completes; a record's bytes are skipped."""

    def __init__(self, max_record: int) -> None:
        self._max = max_record
        self._skip = 0  # bytes of the current record still to come
        self._field = b""  # a length field cut by the end of a piece
        self.started = 0  # records whose length field has arrived (``RecordSealer.inline``)

    def __call__(self, piece: bytes) -> None:
        view = memoryview(piece)
        while True:
            if self._skip >= len(view):
                self._skip -= len(view)
                return
            view = view[self._skip :]
            self._skip = 0
            if not self._field:
                try:
                    complete, used = engine.Records.complete_frames(view, self._max)
                except ValueError:
                    raise _record_too_large(self._max) from None
                self.started += complete
                view = view[used:]
            need = FRAME_LEN - len(self._field)
            self._field += bytes(view[:need])
            view = view[need:]
            if len(self._field) < FRAME_LEN:
                return
            length = int.from_bytes(self._field, "big")
            self._field = b""
            self.started += 1
            if length > self._max:
                raise _record_too_large(self._max)
            self._skip = length


class Framed:
    """What both directions share: the records complete so far (counted in ``log``), the rest
    kept for later."""

    def __init__(self, max_record: int, max_records: int, log: AccessRecord) -> None:
        self._max_record = max_record
        self._max_records = max_records
        self._tail = b""
        self.records = 0
        self._log = log

    def inline(self, size: int) -> bool:
        return True  # opening waits for nothing

    def _complete(self, pieces: list[bytes], final: bool) -> engine.Records:
        data = b"".join([self._tail, *pieces]) if self._tail or len(pieces) != 1 else pieces[0]
        try:
            batch, used = engine.Records.from_stream(data, self._max_record)
        except ValueError:
            raise _record_too_large(self._max_record) from None
        self._tail = data[used:]
        if final and self._tail:
            raise errors.bad_request("the body ends inside a record (u32 length || bytes)")
        self.records += len(batch)
        self._log.records = self.records
        if self.records > self._max_records:
            raise errors.ApiError(
                413, "too_large", f"the batch exceeds the limit of {self._max_records} records"
            )
        return batch


class RecordSealer(Framed):
    """Encrypt: each record becomes ``u32 length || single-shot envelope``.

    A batch's sealings are leased before they are made (``lease``: ``UsageMeter.lease`` of the
    key's latest version), one engine call per lease: a batch that uses up the version goes on
    under the next one (each record is an envelope of its own, its prefix names its version).
    """

    def __init__(
        self,
        lease: Callable[[int], Lease],
        aad: bytes,
        max_record: int,
        max_records: int,
        add_bytes: Callable[[Lease, int], None],
        ready: Callable[[int], bool],
        log: AccessRecord,
        watch: FrameWatch,
    ) -> None:
        super().__init__(max_record, max_records, log)
        self._lease, self._aad, self._add_bytes = lease, aad, add_bytes
        self._ready, self._watch = ready, watch
        self._version: tuple[engine.Algorithm, int, str] | None = None  # of the last prefix
        self._prefix = b""

    def inline(self, size: int) -> bool:
        # The batch holds at most the records whose length field the watch has seen and no
        # batch took yet: about 2,500 of 100 B in 256 KiB, where one per FRAME_LEN bytes
        # (65,537) asked for more than a process ever holds (``BLOCK``) and sent every batch
        # to a thread of its own (docs/BENCHMARKS.md, issue 30).
        return self._ready(min(self._watch.started - self.records, self._max_records))

    def run(self, pieces: list[bytes], final: bool) -> bytearray:
        rest: engine.Records | None = self._complete(pieces, final)
        out = bytearray()
        while rest is not None and len(rest):
            lease = self._lease(len(rest))
            self._log.used(lease.version)
            part, rest = _split(rest, lease.sealings)
            sealed = engine.seal_many(
                lease.key.algorithm, lease.material, self._aad, part,
                prefix=self._prefix_of(lease), framed=True,
            ).data  # fmt: skip
            self._add_bytes(lease, len(part.data) - FRAME_LEN * len(part))
            out = sealed if not out else out + sealed
        return out

    def _prefix_of(self, lease: Lease) -> bytes:
        """The envelope prefix of lease's version, made once while the batches go on under it."""
        key = lease.key
        version = (key.algorithm, lease.version, key.name)
        if version != self._version:
            self._version = version
            self._prefix = Prefix(Mode.SINGLE, *version).encode()
        return self._prefix


def _split(batch: engine.Records, n: int) -> tuple[engine.Records, engine.Records | None]:
    """The first n records of a framed batch, and the rest (None: none)."""
    if n >= len(batch):
        return batch, None
    cut = sum(batch.lengths[:n]) + FRAME_LEN * n
    view = memoryview(batch.data)
    return engine.Records.from_framed(view[:cut]), engine.Records.from_framed(view[cut:])


class RecordOpener(Framed):
    """Decrypt: each record becomes ``u8 status || u32 length || plaintext`` (empty unless OK).

    One engine call opens every record of the batch whose envelope prefix is the first
    record's (usually all of them: one key version); the records it reports with another
    prefix go round again with theirs. A prefix is resolved (key, version, retirement) once
    per round, by the route's rules (``resolve``). The key and versions opened under go to the
    log (``_opened``).
    """

    def __init__(
        self,
        resolve: Callable[[Prefix], bytes],
        aad: bytes,
        max_record: int,
        max_records: int,
        log: AccessRecord,
    ) -> None:
        super().__init__(max_record, max_records, log)
        self._resolve = resolve
        self._aad = aad
        self._several_keys = False  # opened under more than one key (``_opened``)

    def run(self, pieces: list[bytes], final: bool) -> Output:
        batch = self._complete(pieces, final)
        n = len(batch)
        if not n:
            return b""
        view = memoryview(batch.data)
        lengths = batch.lengths
        prefix, opened = self._open(batch, view[FRAME_LEN : FRAME_LEN + lengths[0]])
        if not isinstance(opened, Status) and _OTHER_PREFIX not in opened.status:
            try:  # the usual batch: every record under the first one's prefix
                return _answer(opened, lengths)
            finally:
                opened.wipe()
        status = bytearray(n)  # Status.OK until found otherwise
        texts = [b""] * n
        ends = list(itertools.accumulate(length + FRAME_LEN for length in lengths))

        def record(i: int) -> memoryview:
            return view[ends[i] - lengths[i] : ends[i]]

        pending = list(range(n))
        while True:
            rest = []
            for k, i in enumerate(pending):
                if isinstance(opened, Status):
                    if k == 0 or (prefix and record(i)[: len(prefix)] == prefix):
                        status[i] = opened
                    else:
                        rest.append(i)
                elif opened.status[k] == RecordStatus.OK:
                    texts[i] = opened[k]
                elif opened.status[k] == RecordStatus.OTHER_PREFIX:
                    rest.append(i)
                else:
                    status[i] = Status.DECRYPTION_FAILED
            if not isinstance(opened, Status):
                opened.wipe()
            pending = rest
            if not pending:
                break
            prefix, opened = self._open([record(i) for i in pending], record(pending[0]))
        _count_failures(status)
        out = bytearray()
        for i in range(n):
            text = texts[i] if status[i] == Status.OK else b""
            out += _STATUS_LENGTH.pack(status[i], len(text))
            out += text
        return out

    def _open(
        self, records: engine.Records | list[memoryview], first: memoryview
    ) -> tuple[bytes, engine.OpenedRecords | Status]:
        """The first record's prefix, and one engine call over the records under it (its key
        resolved, on record), or why they cannot be opened."""
        prefix, parsed, why = _prefix_of(first)
        if parsed is None:
            return prefix, why  # type: ignore[return-value]
        found = self._material(parsed)
        if isinstance(found, Status):
            return prefix, found
        self._opened(parsed)
        return prefix, engine.open_many(parsed.algorithm, found, self._aad, records, prefix=prefix)

    def _opened(self, prefix: Prefix) -> None:
        """A round opens records under this prefix: its key and version on record. Records of
        several keys (``/v1/decrypt``) name none: a version means nothing without its key."""
        log = self._log
        if self._several_keys:
            return
        if log.key is None:
            log.key = prefix.name
        elif log.key != prefix.name:
            self._several_keys = True
            log.key = log.version = log.versions = None
            return
        log.used(prefix.version)

    def _material(self, prefix: Prefix) -> bytes | Status:
        try:
            return self._resolve(prefix)
        except ApiError as exc:
            return _BY_CODE.get(exc.code, Status.DECRYPTION_FAILED)


_OTHER_PREFIX = RecordStatus.OTHER_PREFIX
# open_many's statuses as the answer's (OTHER_PREFIX never reaches an answer).
_ANSWER_STATUS = bytes(
    Status.OK if code == RecordStatus.OK else Status.DECRYPTION_FAILED for code in range(256)
)


def _count_failures(status: bytes | bytearray) -> None:
    for code, reason in _REASONS.items():
        if count := status.count(code):
            _metrics.DECRYPTION_FAILURES.labels(reason).inc(count)


def _answer(opened: engine.OpenedRecords, lengths: array[int]) -> bytes:
    """``u8 status || u32 length || plaintext`` per record of one engine call (whose records
    had these lengths), with no Python loop over the records but over those that failed:
    the plaintexts cut out of ``opened.data`` in one call when the records are of one length
    (slices otherwise), and joined once with their five bytes: 0.08-0.10 us a record of
    100 B, 0.37 for records of 90-110 B, where the loop per record (still the way for a batch
    of several prefixes) took about 3 (docs/BENCHMARKS.md, "Client: batches of records")."""
    status = opened.status.translate(_ANSWER_STATUS)
    _count_failures(status)
    n, offsets, data = len(status), opened.offsets, opened.data
    texts: list[bytes | bytearray]
    same = lengths.tobytes() == lengths[:1].tobytes() * n  # a memcmp, not an int per record
    if same:
        texts = list(struct.Struct(f"{offsets[1]}s" * n).unpack_from(data))
    else:
        starts, ends = offsets[:-1].tolist(), offsets[1:].tolist()
        texts = [data[a:b] for a, b in zip(starts, ends, strict=True)]
    i = status.find(Status.DECRYPTION_FAILED)
    if i < 0 and same:
        head = _STATUS_LENGTH.pack(Status.OK, offsets[1])
        return b"".join((head, head.join(texts)))
    while i >= 0:
        texts[i] = b""  # its region holds only zeros: no plaintext of a record that failed
        i = status.find(Status.DECRYPTION_FAILED, i + 1)
    parts: list[bytes | bytearray] = [b""] * (2 * n)
    parts[::2] = map(_STATUS_LENGTH.pack, status, map(len, texts))
    parts[1::2] = texts
    return b"".join(parts)


def _prefix_of(record: memoryview) -> tuple[bytes, Prefix | None, Status | None]:
    """A record's envelope prefix, as bytes and parsed, or why it has none a record may have
    (then the parsed one is None)."""
    try:
        n = prefix_length(record)
        if n is None or len(record) < n:
            return b"", None, Status.MALFORMED_ENVELOPE
        prefix = bytes(record[:n])
        parsed = parse(prefix)
    except MalformedEnvelope:
        return b"", None, Status.MALFORMED_ENVELOPE
    if parsed.mode is not Mode.SINGLE:
        return prefix, None, Status.MALFORMED_ENVELOPE  # records are single-shot envelopes
    return prefix, parsed, None


class EncryptRecords(Transfer):
    """``POST /v1/keys/{name}/encrypt?mode=records``."""

    operation = "encrypt"

    def __init__(
        self,
        svc: Services,
        log: AccessRecord,
        aad: bytes,
        length: int | None,
        duplex: bool,
        key: KeyInfo,
    ) -> None:
        super().__init__(svc, log, aad, length, duplex)
        self.algorithm = key.algorithm.value
        limits = svc.settings.max_record_bytes, svc.settings.max_batch_records

        def lease(n: int) -> Lease:
            return svc.usage.lease(key.name, None, n)

        def ready(n: int) -> bool:
            return svc.usage.ready(key.name, n)

        self.watch = FrameWatch(limits[0])
        self.codec = RecordSealer(lease, aad, *limits, svc.usage.add_bytes, ready, log, self.watch)

    async def transfer(self, body: Body, reply: Reply) -> None:
        await self.stream(body, reply, self.codec, b"", [], None, self.watch)


class DecryptRecords(Transfer):
    """``POST /v1/keys/{name}/decrypt?mode=records``."""

    operation = "decrypt"
    spools_plaintext = True  # the records' plaintexts

    def __init__(
        self,
        svc: Services,
        log: AccessRecord,
        aad: bytes,
        length: int | None,
        duplex: bool,
        resolve: Callable[[Prefix], bytes],
    ) -> None:
        super().__init__(svc, log, aad, length, duplex)
        limits = svc.settings.max_record_bytes, svc.settings.max_batch_records
        self.codec = RecordOpener(resolve, aad, *limits, log)
        self.watch = FrameWatch(limits[0])

    async def transfer(self, body: Body, reply: Reply) -> None:
        await self.stream(body, reply, self.codec, b"", [], None, self.watch)
