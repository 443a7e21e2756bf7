"""A stream decrypt in request-then-response: authenticated as it arrives, spooled as received
(without its header), opened again as it is sent; a spool that changed only ever fails."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from sealflow import engine
from sealflow.service.server import errors
from sealflow.service.server._budget import SpoolBudget
from sealflow.service.server.data._reopen import HEADER_LEN, Authenticate
from sealflow.service.server.data._spool import Spool

ALG = engine.Algorithm.AES_256_GCM
KEY = os.urandom(32)
CONTEXT = b"SFL1 prefix and user AAD"
BATCH = 256 * 1024


def envelope(plaintext: bytes) -> bytes:
    sealer = engine.ChunkedEncryptor(ALG, KEY, CONTEXT)
    return sealer.update(plaintext) + sealer.finalize()


def opener() -> engine.ChunkedDecryptor:
    return engine.ChunkedDecryptor(ALG, KEY, CONTEXT)


async def first_pass(spool: Spool, body: bytes) -> Authenticate:
    """What the pipeline does with a spooled decrypt: batches through Authenticate, on into
    the spool."""
    first = Authenticate(opener())
    starts = range(0, max(len(body), 1), BATCH)
    for i in starts:
        await spool.write(first.run([body[i : i + BATCH]], final=i == starts[-1]))
    return first


async def second_pass(spool: Spool, first: Authenticate, into: bytearray) -> None:
    again = first.reopen(opener())
    async for piece in spool.chunks(again.update):
        into.extend(piece)
    into.extend(again.finalize())


def make(tmp_path: Path) -> Spool:
    # No memory part: everything spooled goes to the file, where the tests can change it.
    return Spool(engine.CryptoPool(threads=1), SpoolBudget(1 << 30), 0, 1 << 30, tmp_path)


def file_of(spool: Spool) -> int:
    assert spool._file is not None
    return spool._file.fileno()


@pytest.mark.parametrize("size", [0, 1, engine.CHUNK_LEN, 3 << 20])
def test_the_spool_holds_the_chunks_as_received_and_the_answer_is_the_plaintext(
    tmp_path: Path, size: int
) -> None:
    plaintext = os.urandom(size)
    body = envelope(plaintext)

    async def run() -> None:
        spool = make(tmp_path)
        try:
            first = await first_pass(spool, body)
            assert first.opened == size  # the Content-Length, known before the answer
            assert first.header == body[:HEADER_LEN]
            fd = file_of(spool)
            # The envelope as it came, less the header kept in memory: no plaintext on disk.
            assert os.pread(fd, os.fstat(fd).st_size, 0) == body[HEADER_LEN:]
            got = bytearray()
            await second_pass(spool, first, got)
            assert got == plaintext
        finally:
            spool.close()

    asyncio.run(run())


def test_a_body_that_fails_the_first_pass_spools_nothing_after_it(tmp_path: Path) -> None:
    body = bytearray(envelope(os.urandom(1 << 20)))
    body[HEADER_LEN + 3 * BATCH // 2] ^= 1  # in the second batch

    async def run() -> int:
        spool = make(tmp_path)
        try:
            with pytest.raises(engine.DecryptionError):
                await first_pass(spool, bytes(body))
            return spool.size
        finally:
            spool.close()

    assert asyncio.run(run()) == BATCH - HEADER_LEN  # the first batch only


@pytest.mark.parametrize("where", [0, 5 << 19, -20], ids=["first chunk", "middle", "last tag"])
def test_a_spool_changed_on_disk_fails_the_second_open(tmp_path: Path, where: int) -> None:
    plaintext = os.urandom(5 << 20)
    body = envelope(plaintext)

    async def run() -> bytes:
        spool = make(tmp_path)
        got = bytearray()
        try:
            first = await first_pass(spool, body)
            fd = file_of(spool)
            at = where % os.fstat(fd).st_size
            os.pwrite(fd, bytes([os.pread(fd, 1, at)[0] ^ 1]), at)
            with pytest.raises(errors.ApiError) as failed:
                await second_pass(spool, first, got)
            assert (failed.value.status, failed.value.code) == (500, "spool_damaged")
        finally:
            spool.close()
        return bytes(got)

    got = asyncio.run(run())
    assert plaintext.startswith(got)  # authenticated bytes only, up to the changed chunk
    assert len(got) < len(plaintext)


def test_another_envelope_under_the_same_key_cannot_take_its_place(tmp_path: Path) -> None:
    # Someone who can write the spool file and holds another envelope under the same key,
    # context and length: its chunks do not open under the header the first pass kept.
    plaintext, other = os.urandom(1 << 20), os.urandom(1 << 20)
    body, substitute = envelope(plaintext), envelope(other)
    assert len(body) == len(substitute)

    async def run() -> None:
        spool = make(tmp_path)
        try:
            first = await first_pass(spool, body)
            os.pwrite(file_of(spool), substitute[HEADER_LEN:], 0)
            with pytest.raises(errors.ApiError) as failed:
                await second_pass(spool, first, bytearray())
            assert failed.value.code == "spool_damaged"
        finally:
            spool.close()

    asyncio.run(run())
    # With its own header (what a spool that kept the header would have read back) the
    # substitute opens: keeping the header in memory is what refuses it.
    own = opener()
    assert own.update(substitute) + own.finalize() == other


def test_the_dropped_plaintext_is_wiped(tmp_path: Path) -> None:
    plaintext = b"attack at dawn, " * (1 << 14)
    first = Authenticate(opener())
    first.run([envelope(plaintext)], final=True)
    assert b"attack at dawn" in first._scratch
    first.close()
    assert not any(first._scratch)
