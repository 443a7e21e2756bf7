"""``encrypt_many`` and ``decrypt_many`` (issue 30, item 1) against the real server, in both
clients: order across batches, laziness, records that fail alone, whole calls that fail."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import time
import uuid
from array import array
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import pytest

from sealflow import AsyncClient, Client
from sealflow.service.client import (
    DecryptionFailed,
    Forbidden,
    KeyNotFound,
    MalformedEnvelope,
    SealflowError,
    TooLarge,
    Unauthorized,
    VersionRetired,
)
from tests.service.conftest import Server

MAX_RECORD = 1 << 20  # SEALFLOW_MAX_RECORD_BYTES' default


def values(n: int) -> list[bytes]:
    """n distinct values of lengths 0 to 40."""
    return [str(i).encode() * (i % 9) for i in range(n)]


def async_client_run(server: Server, job: Any) -> Any:
    async def main() -> Any:
        async with AsyncClient(server.url, server.token) as client:
            return await job(client)

    return asyncio.run(main())


async def agen(items: Iterable[bytes]) -> AsyncIterator[bytes]:
    for item in items:
        yield item


def new_key(api: Client, **policy: Any) -> str:
    name = f"many-{uuid.uuid4().hex[:8]}"
    api.create_key(name)
    if policy:
        api.update_key(name, **policy)
    return name


def test_order_is_kept_across_batch_boundaries(api: Client) -> None:
    plain = values(200_001)
    sealed = list(api.encrypt_many("default", iter(plain), batch_records=4096))
    assert len(sealed) == len(plain)
    for i in (0, 4095, 4096, 100_000, 200_000):  # each envelope opens alone
        assert api.decrypt(sealed[i]) == plain[i]
    opened = api.decrypt_many(sealed, batch_records=5000, batch_bytes=64 << 10)
    assert list(opened) == plain


def test_values_of_one_length_are_framed_with_the_head_first(api: Client) -> None:
    """Values of one length take the one-join framing (the request head, then the shared
    length prefix before each value): every batch's first and last value, bytes-like ones
    among them, seal to envelopes that open alone to themselves, in order."""
    plain: list[bytes | bytearray | memoryview] = [b"%07d" % i for i in range(10_000)]
    plain[0], plain[4096] = bytearray(plain[0]), memoryview(plain[4096])
    sealed = list(api.encrypt_many("default", plain, batch_records=4096))
    assert len(sealed) == len(plain)
    assert {len(e) for e in sealed} == {len(sealed[0])}
    for i in (0, 4095, 4096, 8191, 8192, 9999):
        assert api.decrypt(sealed[i]) == bytes(plain[i])
    assert list(api.decrypt_many(sealed, batch_records=3000)) == [bytes(p) for p in plain]


def test_a_memoryview_of_wider_items_is_sealed_as_its_bytes(api: Client) -> None:
    """len() of a memoryview of 4-byte items counts items: the framing takes its bytes, as
    ``encrypt`` does, alone in its batch, among values of its length in bytes or not."""
    wide = memoryview(array("I", range(25)))  # 25 items, 100 bytes
    batches: list[list[bytes | memoryview]] = [[wide], [wide, b"x" * 100], [b"a", wide, b"bcd"]]
    for batch in batches:
        sealed = list(api.encrypt_many("default", batch))
        assert [api.decrypt(e) for e in sealed] == [bytes(v) for v in batch]


def test_async_order_is_kept_across_batch_boundaries(server: Server) -> None:
    plain = values(20_001)

    async def job(client: AsyncClient) -> list[bytes]:
        sealed = [e async for e in client.encrypt_many("default", agen(plain), batch_records=999)]
        assert await client.decrypt(sealed[12_345]) == plain[12_345]
        return [p async for p in client.decrypt_many(sealed, batch_bytes=10_000)]

    assert async_client_run(server, job) == plain


def test_empty_input_gives_nothing(api: Client, server: Server) -> None:
    assert list(api.encrypt_many("default", [])) == []
    assert list(api.decrypt_many(iter(()))) == []

    async def job(client: AsyncClient) -> list[bytes]:
        return [e async for e in client.encrypt_many("default", agen([]))]

    assert async_client_run(server, job) == []


def test_empty_values_and_values_of_the_largest_record(api: Client) -> None:
    """A record holds at most SEALFLOW_MAX_RECORD_BYTES, an envelope too: the largest value
    seals, and its envelope (the value and 39 bytes or more) opens alone."""
    largest = MAX_RECORD - 39 - len("default")
    plain = [b"", b"\x01" * MAX_RECORD, b"", b"\x02" * largest, b"\x03"]
    sealed = list(api.encrypt_many("default", plain, batch_bytes=MAX_RECORD))
    assert api.decrypt(sealed[1]) == plain[1]
    del plain[1], sealed[1]
    assert list(api.decrypt_many(sealed)) == plain
    with pytest.raises(TooLarge):
        next(api.decrypt_many([b"\x00" * (MAX_RECORD + 1)]))
    with pytest.raises(TooLarge) as caught:
        next(api.encrypt_many("default", [b"x" * (MAX_RECORD + 1)]))
    assert caught.value.status == 413


def test_aad_applies_to_every_record(api: Client) -> None:
    plain = values(50)
    sealed = list(api.encrypt_many("default", plain, b"order-17"))
    assert list(api.decrypt_many(sealed, aad="order-17")) == plain
    with pytest.raises(DecryptionFailed) as caught:
        list(api.decrypt_many(sealed))
    assert caught.value.index == 0


def tampered(api: Client, n: int, at: int) -> tuple[list[bytes], list[bytes]]:
    plain = values(n)
    sealed = list(api.encrypt_many("default", plain))
    broken = bytearray(sealed[at])
    broken[-1] ^= 1
    sealed[at] = bytes(broken)
    return plain, sealed


def test_a_tampered_record_raises_with_its_index_after_the_records_before_it(
    api: Client,
) -> None:
    plain, sealed = tampered(api, 3000, 2500)
    got: list[bytes] = []
    opened = api.decrypt_many(sealed, batch_records=1000)
    with pytest.raises(DecryptionFailed) as caught:
        got.extend(opened)
    assert caught.value.index == 2500
    assert (caught.value.status, caught.value.code) == (400, "decryption_failed")
    assert "2500" in str(caught.value)
    assert got == plain[:2500]


def test_errors_return_puts_the_exception_in_the_records_place(api: Client) -> None:
    plain, sealed = tampered(api, 3000, 1234)
    sealed[7] = b"not an envelope"
    got = list(api.decrypt_many(sealed, errors="return", batch_records=1000))
    assert len(got) == 3000
    junk, failed = got[7], got[1234]
    assert isinstance(junk, MalformedEnvelope)
    assert junk.index == 7
    assert isinstance(failed, DecryptionFailed)
    assert failed.index == 1234
    assert [p for i, p in enumerate(got) if i not in (7, 1234)] == [
        p for i, p in enumerate(plain) if i not in (7, 1234)
    ]


def test_async_record_failures(server: Server, api: Client) -> None:
    plain, sealed = tampered(api, 30, 21)

    async def job(client: AsyncClient) -> tuple[list[bytes], Any, list[Any]]:
        got: list[bytes] = []
        try:
            async for p in client.decrypt_many(agen(sealed), batch_records=8):
                got.append(p)
        except DecryptionFailed as e:
            error = e
        returned = [p async for p in client.decrypt_many(sealed, errors="return")]
        return got, error, returned

    got, error, returned = async_client_run(server, job)
    assert got == plain[:21]
    assert error.index == 21
    assert isinstance(returned[21], DecryptionFailed)
    assert returned[:21] == plain[:21]


def test_a_retired_version_and_an_unknown_key_fail_alone(api: Client) -> None:
    name = new_key(api)
    old = next(api.encrypt_many(name, [b"old"]))
    api.rotate_key(name)
    api.update_key(name, min_decryption_version=2)
    new = next(api.encrypt_many(name, [b"new"]))
    unknown = bytearray(new)
    unknown[6:10] = (99).to_bytes(4, "big")  # a version the key does not have
    got = list(api.decrypt_many([old, new, bytes(unknown)], errors="return"))
    assert isinstance(got[0], VersionRetired)
    assert got[0].index == 0
    assert got[1] == b"new"
    assert isinstance(got[2], KeyNotFound)
    assert got[2].index == 2


def test_envelopes_of_several_keys_without_key(api: Client) -> None:
    keys = ["default", "t-aes128", "t-chacha", "t-aes256"]
    plain = values(400)
    sealed = [next(api.encrypt_many(keys[i % 4], [p])) for i, p in enumerate(plain[:8])]
    sealed += list(itertools.chain(*(api.encrypt_many(k, plain[8:]) for k in keys)))
    expected = plain[:8] + plain[8:] * 4
    assert list(api.decrypt_many(sealed)) == expected
    # With key=, another key's envelope fails alone.
    got = list(api.decrypt_many(sealed[:4], key="default", errors="return"))
    assert got[0] == plain[0]
    assert all(isinstance(e, DecryptionFailed) for e in got[1:])


def test_the_input_is_pulled_a_batch_at_a_time(api: Client) -> None:
    pulled = 0

    def source() -> Iterator[bytes]:
        nonlocal pulled
        for i in range(1_000_000):
            pulled += 1
            yield b"%d" % i

    results = api.encrypt_many("default", source(), batch_records=1000)
    assert pulled == 0  # nothing before the first result is asked for
    first = list(itertools.islice(results, 10))
    assert len(first) == 10
    assert pulled <= 3 * 1000 + 1  # two batches in flight and the next being read, at most
    results.close()  # type: ignore[attr-defined]
    assert pulled <= 3 * 1000 + 1


def test_max_encryptions_splits_a_batch_across_versions(api: Client) -> None:
    name = new_key(api, max_encryptions=100)
    plain = values(250)
    sealed = list(api.encrypt_many(name, plain))
    versions = {int.from_bytes(e[6:10], "big") for e in sealed}
    assert len(versions) > 1
    assert list(api.decrypt_many(sealed)) == plain
    assert list(api.decrypt_many(sealed, key=name)) == plain


def test_whole_call_failures_raise_as_single_calls_do(api: Client, server: Server) -> None:
    with pytest.raises(KeyNotFound) as missing:
        next(api.encrypt_many("no-such-key", [b"x"]))
    assert missing.value.index is None
    assert missing.value.status == 404
    with Client(server.url, "not-a-token") as stranger, pytest.raises(Unauthorized):
        list(stranger.encrypt_many("default", [b"x"]))
    with server.client() as admin:
        made = admin.post("/v1/tokens", json={"scopes": ["decrypt:default"]})
    with Client(server.url, made.json()["token"]) as reader, pytest.raises(Forbidden):
        list(reader.encrypt_many("default", [b"x"]))
    with pytest.raises(ValueError, match="errors"):
        api.decrypt_many([], errors="ignore")  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="batch"):
        api.encrypt_many("default", [], batch_records=0)


def test_batches_share_kept_alive_connections(server: Server) -> None:
    with Client(server.url, server.token) as client:
        for _ in range(3):
            assert (
                len(list(client.encrypt_many("default", values(5000), batch_records=500))) == 5000
            )
        assert client.connections_opened <= 2


RSS_PROBE = """
import os, sys
from sealflow import Client

def kib(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))

value = os.urandom(100)
with Client(sys.argv[1], sys.argv[2]) as client:
    list(client.encrypt_many("default", [value] * 1000))  # warm: imports, connections
    before = kib("VmRSS:")
    count = 0
    for envelope in client.encrypt_many("default", (value for _ in range(int(sys.argv[3])))):
        count += 1
    print(count, kib("VmHWM:") - before)
"""


def test_memory_stays_bounded_for_a_long_generator(server: Server) -> None:
    """500,000 values streamed from a generator: the client's peak RSS grows by far less
    than their 70 MB of envelopes (10M: docs/BENCHMARKS.md)."""
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", RSS_PROBE, server.url, server.token, "500000"],
        capture_output=True,
        text=True,
        check=True,
    )
    count, growth_kib = map(int, done.stdout.split())
    assert count == 500_000
    assert growth_kib < 48 * 1024


def test_records_are_not_sealflow_errors_in_disguise(api: Client) -> None:
    """errors="return" gives exceptions, never raises them, and plaintexts as bytes."""
    got = list(api.decrypt_many([b"", b"junk"], errors="return"))
    assert all(isinstance(e, SealflowError) and e.index == i for i, e in enumerate(got))


def test_values_that_are_not_bytes_are_refused_by_type(api: Client) -> None:
    with pytest.raises(TypeError, match="bytes-like, not str"):
        next(api.encrypt_many("default", [b"ok", "text"]))  # type: ignore[list-item]
    with pytest.raises(TypeError, match="bytes-like, not int"):
        next(api.encrypt_many("default", [1, 2]))  # type: ignore[list-item]
    assert list(api.decrypt_many(api.encrypt_many("default", [memoryview(b"mv")]))) == [b"mv"]


def test_connections_the_server_closed_while_idle_are_replaced(make_server: Any) -> None:
    srv = make_server(keepalive_timeout=0.3)
    plain = values(3000)
    with Client(srv.url, srv.token) as client:
        assert list(client.decrypt_many(client.encrypt_many("default", plain))) == plain
        before = client.connections_opened
        time.sleep(1.0)  # the server closes the idle connections
        assert list(client.decrypt_many(client.encrypt_many("default", plain))) == plain
        assert client.connections_opened > before
