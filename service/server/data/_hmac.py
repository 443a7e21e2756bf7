"""HMAC on the native API: ``POST /v1/keys/{name}/hmac`` and ``/verify`` (docs/API.md, "HMAC").

A raw body gets one tag (the whole body, streamed through ``engine.HmacStream`` as it arrives,
so any size holds one piece in memory); ``?mode=records`` gets one tag per record, each batch
of records in one native call (``engine.hmac_many``), through the same framing, limits and
spool as ``mode=records`` encryption (``_records``). Verify takes the tag in the
``Sealflow-HMAC`` header, compares in constant time and answers 200 ``{"valid": ...}``.

Everything about a request (scope, key, version, digest, tag) is decided from its head by
``prepare``, before any body byte: the transfers only move bytes.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import parse_qsl

from sealflow import engine
from sealflow.engine import Digest
from sealflow.service.keystore import KeyInfo, Slot, version_hmac_key

from .. import errors
from .._body import Body, Reply
from .._logging import AccessRecord
from .._state import Services
from ..http import Head
from ._records import Framed, FrameWatch
from ._transfer import Transfer

TAG_HEADER = b"sealflow-hmac"
VERSION_HEADER = b"sealflow-key-version"
DEFAULT_DIGEST = Digest.SHA2_256
_JSON = (b"content-type", b"application/json")
_OCTETS = b"content-type: application/octet-stream\r\ncontent-length: %d\r\n"
_VERDICTS = {True: b'{"valid":true}', False: b'{"valid":false}'}
# Transit's tag text, accepted by verify as it is: vault:v<version>:<base64 tag>.
_VAULT_TAG = re.compile(rb"vault:v([1-9][0-9]{0,9}):(.*)", re.DOTALL)
_VERSION = re.compile(r"[1-9][0-9]{0,9}")


@dataclass(frozen=True, slots=True)
class MacKey:
    """The HMAC key of one key version, and the digest a request uses it with."""

    name: str
    version: int
    digest: Digest
    key: bytes


@dataclass(frozen=True, slots=True)
class Options:
    """What a request's query asks for: ``algorithm``, ``version``, ``mode``."""

    digest: Digest = DEFAULT_DIGEST
    version: int | None = None
    records: bool = False


_DEFAULTS = Options()


def options(query: bytes) -> Options:
    """The query of an HMAC request, or 400: each parameter at most once, nothing else."""
    if not query:
        return _DEFAULTS
    try:
        pairs = parse_qsl(query.decode("ascii"), keep_blank_values=True, strict_parsing=True)
    except (UnicodeDecodeError, ValueError):
        pairs = [] if not query else [("", "")]
    seen = dict(pairs)
    if len(seen) != len(pairs) or not set(seen) <= {"algorithm", "version", "mode"}:
        raise errors.bad_request("the query takes algorithm, version and mode, each at most once")
    try:
        digest = Digest(seen.get("algorithm", DEFAULT_DIGEST))
    except ValueError:
        raise errors.bad_request(
            f"algorithm must be one of {', '.join(d.value for d in Digest)}"
        ) from None
    version = seen.get("version")
    if version is not None and _VERSION.fullmatch(version) is None:
        raise errors.bad_request("version must be a positive integer")
    mode = seen.get("mode")
    if mode not in (None, "records"):
        raise errors.bad_request("mode must be records (or absent: one HMAC of the body)")
    return Options(digest, None if version is None else int(version), mode == "records")


def mac_key(
    lookup: Callable[[int | None], tuple[KeyInfo, Slot, bytes]],
    digest: Digest,
    version: int | None,
    verify: bool,
) -> MacKey:
    """The HMAC key of a version (the latest by default; ``version_hmac_key``: every key type
    has one) that may be used as Transit lets it: a tag is made with the latest version or one
    from the key's ``min_encryption_version`` up (400 below it), and verified with one from its
    ``min_decryption_version`` up (403 version_retired below it); 404 for a version it does
    not have."""
    key, slot, material = lookup(version)
    if verify and slot.version < key.min_decryption_version:
        raise errors.version_retired()
    if not verify and slot.version != key.latest and slot.version < key.min_encryption_version:
        raise errors.bad_request("the key version is below min_encryption_version")
    return MacKey(key.name, slot.version, digest, version_hmac_key(key, slot.version, material))


def presented_tag(head: Head) -> tuple[bytes, int | None]:
    """The tag a verify request carries in ``Sealflow-HMAC`` (base64, or Transit's
    ``vault:v<N>:<base64>``, which names its version too), or 400."""
    values = [value for name, value in head.headers if name == TAG_HEADER]
    if len(values) != 1:
        raise errors.bad_request("verify needs one Sealflow-HMAC header (the tag, base64)")
    text, version = values[0].strip(), None
    found = _VAULT_TAG.fullmatch(text)
    if found is not None:
        version, text = int(found[1]), found[2]
    try:
        tag = base64.b64decode(text + b"=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise errors.bad_request("Sealflow-HMAC is not valid base64") from None
    return tag, version


class _MacTransfer(Transfer):
    def __init__(self, svc: Services, log: AccessRecord, key: MacKey) -> None:
        super().__init__(svc, log, b"", None, False)
        self.key = key
        self.algorithm = key.digest.value
        log.key, log.version = key.name, key.version
        self._version = (VERSION_HEADER, b"%d" % key.version)

    def header_lines(self, length: int) -> bytes:
        return _OCTETS % length + b"%s: %s\r\n" % self._version

    async def _tag(self, body: Body) -> bytes:
        """The tag of the whole body: at once if it came in one piece, else piece by piece."""
        key = self.key
        first = await body.read()
        if body.done:
            return engine.hmac(key.digest, key.key, first or b"")
        stream = engine.HmacStream(key.digest, key.key)
        piece = first
        while piece is not None:
            stream.update(piece)
            piece = await body.read()
        return stream.finalize()


class MacBody(_MacTransfer):
    """``POST /v1/keys/{name}/hmac``: the tag of the body, raw, its version in a header."""

    operation = "hmac"

    def whole(self, body: bytes) -> bytes:
        return engine.hmac(self.key.digest, self.key.key, body)

    async def transfer(self, body: Body, reply: Reply) -> None:
        tag = await self._tag(body)
        reply.headers.append(self._version)
        await reply.whole(tag)


class MacVerify(_MacTransfer):
    """``POST /v1/keys/{name}/verify``: ``{"valid": true|false}`` for the body and the tag."""

    operation = "verify"

    def __init__(self, svc: Services, log: AccessRecord, key: MacKey, tag: bytes) -> None:
        super().__init__(svc, log, key)
        self._expected = tag

    def header_lines(self, length: int) -> bytes:
        return b"content-type: application/json\r\ncontent-length: %d\r\n%s: %s\r\n" % (
            length,
            *self._version,
        )

    def _verdict(self, tag: bytes) -> bytes:
        return _VERDICTS[hmac.compare_digest(tag, self._expected)]

    def whole(self, body: bytes) -> bytes:
        return self._verdict(engine.hmac(self.key.digest, self.key.key, body))

    async def transfer(self, body: Body, reply: Reply) -> None:
        verdict = self._verdict(await self._tag(body))
        reply.headers = [_JSON, self._version]
        await reply.whole(verdict)


class RecordMacer(Framed):
    """Each framed record becomes ``u32 length || tag``: one native call per batch."""

    def __init__(self, key: MacKey, max_record: int, max_records: int, log: AccessRecord) -> None:
        super().__init__(max_record, max_records, log)
        self._key = key

    def run(self, pieces: list[bytes], final: bool) -> bytearray:
        batch = self._complete(pieces, final)
        return engine.hmac_many(self._key.digest, self._key.key, batch, framed=True)


class MacRecords(_MacTransfer):
    """``POST /v1/keys/{name}/hmac?mode=records``: one framed tag per framed record."""

    operation = "hmac"

    def __init__(self, svc: Services, log: AccessRecord, key: MacKey, duplex: bool) -> None:
        super().__init__(svc, log, key)
        self.duplex = duplex
        log.mode = "records"
        limits = svc.settings.max_record_bytes, svc.settings.max_batch_records
        self.codec = RecordMacer(key, *limits, log)
        self.watch = FrameWatch(limits[0])

    def whole(self, body: bytes) -> bytes:
        return bytes(self.codec.run([body], True))

    async def transfer(self, body: Body, reply: Reply) -> None:
        reply.headers.append(self._version)
        await self.stream(body, reply, self.codec, b"", [], None, self.watch)
