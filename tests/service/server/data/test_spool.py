"""The output spool: memory, then an unlinked file whose content is sealed; bounded; cleaned up."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from sealflow import engine
from sealflow.service.server import errors
from sealflow.service.server._budget import SpoolBudget
from sealflow.service.server.data._spool import Spool

KiB = 1024


def make(tmp_path: Path, budget: SpoolBudget, memory: int = 64 * KiB) -> Spool:
    return Spool(engine.CryptoPool(threads=1), budget, memory, 1 << 30, tmp_path)


async def fill(spool: Spool, data: bytes, piece: int = 100_000) -> None:
    for i in range(0, len(data), piece):
        await spool.write(data[i : i + piece])


async def drain(spool: Spool) -> bytes:
    return b"".join([bytes(p) async for p in spool.chunks()])


@pytest.mark.parametrize("size", [0, 1, 64 * KiB, 64 * KiB + 1, 3 << 20])
def test_what_goes_in_comes_out_in_order(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    budget = SpoolBudget(1 << 30)

    async def run() -> bytes:
        spool = make(tmp_path, budget)
        try:
            await fill(spool, data)
            assert spool.size == size
            return await drain(spool)
        finally:
            spool.close()

    assert asyncio.run(run()) == data
    assert budget.used == 0


def test_the_file_has_no_name_and_holds_no_plaintext(tmp_path: Path) -> None:
    data = b"attack at dawn, " * (1 << 16)  # 1 MiB of a recognisable plaintext

    async def run() -> None:
        spool = make(tmp_path, SpoolBudget(1 << 30))
        try:
            await fill(spool, data)
            assert spool._file is not None
            assert os.listdir(tmp_path) == []  # unlinked from the start
            fd = spool._file.fileno()
            on_disk = os.pread(fd, os.fstat(fd).st_size, 0)
            assert len(on_disk) > len(data) - 64 * KiB  # the overflow is there...
            assert b"attack at dawn" not in on_disk  # ...sealed
            assert os.fstat(fd).st_mode & 0o077 == 0
            assert await drain(spool) == data
        finally:
            spool.close()
        assert spool._file is None

    asyncio.run(run())


def test_the_disk_budget_is_shared_and_given_back(tmp_path: Path) -> None:
    budget = SpoolBudget(1 << 20)

    async def run() -> None:
        first, second = make(tmp_path, budget), make(tmp_path, budget)
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
