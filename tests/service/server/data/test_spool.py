"""The output spool: memory, then a file with no name; ciphertext kept as it is, plaintext
sealed; bounded; cleaned up; a file that changed is never passed on."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from sealflow import engine
from sealflow.service.server import errors
from sealflow.service.server._budget import SpoolBudget
from sealflow.service.server.data._spool import Piece, Spool, Through
from tests import tmpfs

KiB = 1024

sealing = pytest.mark.parametrize("sealed", [False, True], ids=["as-is", "sealed"])


def make(
    tmp_path: Path, budget: SpoolBudget, memory: int = 64 * KiB, sealed: bool = False
) -> Spool:
    return Spool(engine.CryptoPool(threads=1), budget, memory, 1 << 30, tmp_path, sealed=sealed)


async def fill(spool: Spool, data: bytes, piece: int = 100_000) -> None:
    for i in range(0, len(data), piece):
        await spool.write(data[i : i + piece])


async def drain(spool: Spool, through: Through = None) -> bytes:
    return b"".join([bytes(p) async for p in spool.chunks(through)])


async def collect(pieces: AsyncIterator[Piece], into: bytearray) -> None:
    async for piece in pieces:
        into.extend(piece)


def on_disk(spool: Spool) -> bytes:
    assert spool._file is not None
    fd = spool._file.fileno()
    return os.pread(fd, os.fstat(fd).st_size, 0)


@sealing
@pytest.mark.parametrize("size", [0, 1, 64 * KiB, 64 * KiB + 1, 3 << 20])
def test_what_goes_in_comes_out_in_order(tmp_path: Path, size: int, sealed: bool) -> None:
    data = os.urandom(size)
    budget = SpoolBudget(1 << 30)

    async def run() -> bytes:
        spool = make(tmp_path, budget, sealed=sealed)
        try:
            await fill(spool, data)
            assert spool.size == size
            return await drain(spool)
        finally:
            spool.close()

    assert asyncio.run(run()) == data
    assert budget.used == 0


def test_ciphertext_is_kept_as_it_is_in_a_file_with_no_name(tmp_path: Path) -> None:
    # What an encrypt spools is its envelope: written and read back byte for byte, no
    # second pass of any cipher over it.
    data = os.urandom(1 << 20)

    async def run() -> None:
        spool = make(tmp_path, SpoolBudget(1 << 30), memory=0)
        try:
            await fill(spool, data)
            assert os.listdir(tmp_path) == []  # no name from the start
            assert spool._file is not None
            assert os.fstat(spool._file.fileno()).st_mode & 0o077 == 0
            assert on_disk(spool) == data
            assert await drain(spool) == data
        finally:
            spool.close()
        assert spool._file is None

    asyncio.run(run())


def test_a_sealed_spool_holds_no_plaintext_in_its_file(tmp_path: Path) -> None:
    data = b"attack at dawn, " * (1 << 16)  # 1 MiB of a recognisable plaintext

    async def run() -> None:
        spool = make(tmp_path, SpoolBudget(1 << 30), sealed=True)
        try:
            await fill(spool, data)
            assert os.listdir(tmp_path) == []
            sealed = on_disk(spool)
            assert len(sealed) > len(data) - 64 * KiB  # the overflow is there...
            assert b"attack at dawn" not in sealed  # ...sealed
            assert await drain(spool) == data
        finally:
            spool.close()

    asyncio.run(run())


@sealing
def test_every_piece_goes_through_the_given_function_in_order(tmp_path: Path, sealed: bool) -> None:
    data = os.urandom(3 << 20)
    seen: list[int] = []

    def through(piece: Piece) -> Piece:
        seen.append(len(piece))
        return bytes(piece).swapcase()

    async def run() -> bytes:
        spool = make(tmp_path, SpoolBudget(1 << 30), sealed=sealed)
        try:
            await fill(spool, data)
            return await drain(spool, through)
        finally:
            spool.close()

    assert asyncio.run(run()) == data.swapcase()
    assert sum(seen) == len(data)


def damaged_count() -> float:
    return REGISTRY.get_sample_value("sealflow_spool_damaged_total") or 0.0


@pytest.mark.parametrize(
    ("sealed", "change"),
    [(False, "shortened"), (True, "shortened"), (True, "flipped"), (True, "lengthened")],
)
def test_a_file_that_changed_is_never_passed_on(tmp_path: Path, sealed: bool, change: str) -> None:
    data = os.urandom(2 << 20)
    budget = SpoolBudget(1 << 30)
    before = damaged_count()

    async def run() -> bytes:
        spool = make(tmp_path, budget, memory=0, sealed=sealed)
        try:
            await fill(spool, data)
            pieces = spool.chunks()
            got = bytearray(await anext(pieces))  # the file is complete (a sealed one too)
            assert spool._file is not None
            fd = spool._file.fileno()
            size = os.fstat(fd).st_size
            if change == "shortened":
                os.ftruncate(fd, size - 1000)
            elif change == "flipped":
                os.pwrite(fd, bytes([on_disk(spool)[size // 2] ^ 1]), size // 2)
            else:
                os.pwrite(fd, b"more", size)
            with pytest.raises(errors.ApiError) as failed:
                await collect(pieces, got)
            assert (failed.value.status, failed.value.code) == (500, "spool_damaged")
        finally:
            spool.close()
        return bytes(got)

    got = asyncio.run(run())
    # Only what came back as it was written, if anything (all of it when bytes were added
    # after the end: the error still comes before a reply could be completed).
    assert data.startswith(got)
    assert damaged_count() == before + 1
    assert budget.used == 0


def test_bytes_added_to_a_file_kept_as_it_is_never_come_out(tmp_path: Path) -> None:
    # A changed byte is not this spool's to see when it keeps ciphertext as it is (an
    # encrypt's envelope authenticates itself; a decrypt's is opened again: _reopen), but
    # it reads back exactly what it wrote, no more.
    data = os.urandom(1 << 20)

    async def run() -> bytes:
        spool = make(tmp_path, SpoolBudget(1 << 30), memory=0)
        try:
            await fill(spool, data)
            assert spool._file is not None
            os.pwrite(spool._file.fileno(), b"more", len(data))
            return await drain(spool)
        finally:
            spool.close()

    assert asyncio.run(run()) == data


@sealing
def test_the_disk_budget_is_shared_and_given_back(tmp_path: Path, sealed: bool) -> None:
    budget = SpoolBudget(1 << 20)

    async def run() -> None:
        first, second = make(tmp_path, budget, sealed=sealed), make(tmp_path, budget)
        try:
            await fill(first, os.urandom(900 * KiB))
            with pytest.raises(errors.ApiError) as refused:
                await fill(second, os.urandom(900 * KiB))
            assert (refused.value.status, refused.value.code) == (507, "spool_full")
        finally:
            first.close()
            second.close()
        assert budget.used == 0

    asyncio.run(run())


def test_one_request_is_bounded_by_its_own_limit(tmp_path: Path) -> None:
    async def run() -> None:
        spool = Spool(engine.CryptoPool(threads=1), SpoolBudget(1 << 30), 0, 100 * KiB, tmp_path)
        try:
            with pytest.raises(errors.ApiError) as refused:
                await fill(spool, os.urandom(200 * KiB))
            assert refused.value.status == 413
        finally:
            spool.close()

    asyncio.run(run())


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A real filesystem of 1 MiB that a spool can fill."""
    with tmpfs.mounted(tmp_path / "tmpfs", 1 << 20) as where:
        yield where


def fill_up(where: Path) -> None:
    """Take every byte left on the filesystem at ``where``."""
    stat = os.statvfs(where)
    with (where / "filler").open("wb") as filler:
        os.posix_fallocate(filler.fileno(), 0, stat.f_bavail * stat.f_frsize)
    assert os.statvfs(where).f_bavail == 0


@sealing
def test_a_full_disk_is_507_and_its_file_is_freed(tiny_disk: Path, sealed: bool) -> None:
    budget = SpoolBudget(1 << 30)

    async def run() -> None:
        spool = make(tiny_disk, budget, memory=0, sealed=sealed)
        try:
            with pytest.raises(errors.ApiError) as refused:
                await fill(spool, os.urandom(2 << 20))
            assert (refused.value.status, refused.value.code) == (507, "insufficient_storage")
        finally:
            spool.close()
        assert budget.used == 0
        assert tmpfs.used(tiny_disk) == 0

    asyncio.run(run())


def test_a_sealed_spool_finishes_its_file_before_the_first_piece_comes_out(
    tiny_disk: Path,
) -> None:
    # Its last chunk goes to the file when the answer is read out; were that after the memory
    # part had been sent, a full disk would cut off an answer that had begun.
    async def run() -> None:
        spool = make(tiny_disk, SpoolBudget(1 << 30), memory=64 * KiB, sealed=True)
        try:
            await fill(spool, os.urandom(64 * KiB))  # the memory part
            await fill(spool, os.urandom(100 * KiB + 1))  # the file, with a chunk unfinished
            fill_up(tiny_disk)
            with pytest.raises(errors.ApiError) as refused:
                await anext(aiter(spool.chunks()))
            assert (refused.value.status, refused.value.code) == (507, "insufficient_storage")
        finally:
            spool.close()

    asyncio.run(run())
