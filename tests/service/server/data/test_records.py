"""Batches of small records: ``POST /v1/keys/{name}/encrypt|decrypt?mode=records``.

Every test runs against a real server. Encrypt answers ``u32 length || envelope`` per record,
each envelope a single-shot one that ``/v1/decrypt`` opens alone; decrypt answers
``u8 status || u32 length || plaintext`` per record (docs/API.md)."""

from __future__ import annotations

import base64
import os
import socket
import struct
import uuid
from collections.abc import Callable, Iterator

import httpx
import pytest

from sealflow.service.server.data._records import FrameWatch
from sealflow.service.server.errors import ApiError
from tests.service.conftest import Server
from tests.service.server.test_auth import new_token

MakeServer = Callable[..., Server]
MiB = 1 << 20
OK, FAILED, MALFORMED, RETIRED, NOT_FOUND = range(5)


def framed(records: list[bytes]) -> bytes:
    return b"".join(struct.pack(">I", len(r)) + r for r in records)


def unframe(body: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(body):
        (n,) = struct.unpack_from(">I", body, pos)
        out.append(body[pos + 4 : pos + 4 + n])
        pos += 4 + n
    assert pos == len(body)
    return out


def statuses(body: bytes) -> list[tuple[int, bytes]]:
    out, pos = [], 0
    while pos < len(body):
        status, n = struct.unpack_from(">BI", body, pos)
        out.append((status, body[pos + 5 : pos + 5 + n]))
        pos += 5 + n
    assert pos == len(body)
    return out


def seal(client: httpx.Client, key: str, records: list[bytes], **kw: object) -> list[bytes]:
    r = client.post(f"/v1/keys/{key}/encrypt?mode=records", content=framed(records), **kw)  # type: ignore[arg-type]
    assert r.status_code == 200, r.text
    return unframe(r.content)


def open_records(
    client: httpx.Client, path: str, envelopes: list[bytes], **kw: object
) -> list[tuple[int, bytes]]:
    r = client.post(path + "?mode=records", content=framed(envelopes), **kw)  # type: ignore[arg-type]
    assert r.status_code == 200, r.text
    return statuses(r.content)


@pytest.mark.parametrize("duplex", [False, True], ids=["request-then-response", "duplex"])
def test_records_round_trip_and_open_alone(client: httpx.Client, duplex: bool) -> None:
    headers = {"sealflow-duplex": "1"} if duplex else {}
    records = [b"", b"x", os.urandom(100), os.urandom(70_000)] + [os.urandom(37)] * 3000
    envelopes = seal(client, "default", records, headers=headers)
    assert len(envelopes) == len(records)
    prefix_len = 11 + len("default")
    assert len({e[prefix_len : prefix_len + 12] for e in envelopes}) == len(envelopes)  # nonces
    for envelope, record in list(zip(envelopes, records, strict=True))[:5]:
        assert client.post("/v1/decrypt", content=envelope).content == record
    opened = open_records(client, "/v1/keys/default/decrypt", envelopes, headers=headers)
    assert opened == [(OK, r) for r in records]


def test_the_empty_batch(client: httpx.Client) -> None:
    assert seal(client, "default", []) == []
    assert open_records(client, "/v1/keys/default/decrypt", []) == []


def test_one_bad_record_fails_alone(client: httpx.Client) -> None:
    records = [os.urandom(50) for _ in range(6)]
    envelopes = seal(client, "default", records)
    tampered = bytearray(envelopes[2])
    tampered[-1] ^= 1
    stream = client.post("/v1/keys/default/encrypt", content=b"stream envelope").content
    other = f"other-{uuid.uuid4().hex[:8]}"
    client.post("/v1/keys", json={"name": other}).raise_for_status()
    foreign = seal(client, other, [b"foreign"])[0]
    batch = [
        *envelopes[:2],
        bytes(tampered),
        b"junk",
        stream,  # a stream envelope is not a record
        foreign,  # another key's envelope, on this key's route
        envelopes[0][:30],  # cut short
        *envelopes[3:],
    ]
    got = open_records(client, "/v1/keys/default/decrypt", batch)
    assert [s for s, _ in got] == [OK, OK, FAILED, MALFORMED, MALFORMED, FAILED, FAILED, OK, OK, OK]
    assert [t for s, t in got if s == OK] == [*records[:2], *records[3:]]
    assert all(t == b"" for s, t in got if s != OK)  # no plaintext of a failed record


def failures(client: httpx.Client, reason: str) -> float:
    name = f'sealflow_decryption_failures_total{{reason="{reason}"}}'
    lines = client.get("/metrics").text.splitlines()
    return sum(float(line.split()[-1]) for line in lines if line.startswith(name))


@pytest.mark.parametrize(
    "sizes", [(0, 1, 100, 7, 300, 100, 100, 64), (100,) * 8], ids=["lengths", "one-length"]
)
def test_failed_records_among_records_of_one_version(
    client: httpx.Client, sizes: tuple[int, ...]
) -> None:
    # Every record under the first one's prefix: one engine call answers the batch whole
    # (records of one length are cut out of its output in one call).
    records = [os.urandom(n) for n in sizes]
    envelopes = seal(client, "default", records)
    bad = {0, 3, 7}  # the first, one inside, the last
    batch = []
    for i, envelope in enumerate(envelopes):
        if i in bad:
            tampered = bytearray(envelope)
            tampered[-1 - i] ^= 1
            envelope = bytes(tampered)
        batch.append(envelope)
    cut = envelopes[2][:-1]  # its prefix whole, its tag cut short
    before = failures(client, "authentication")
    got = open_records(client, "/v1/keys/default/decrypt", [*batch, cut])
    assert got == [
        *((FAILED, b"") if i in bad else (OK, r) for i, r in enumerate(records)),
        (FAILED, b""),
    ]
    assert failures(client, "authentication") == before + len(bad) + 1
    got = open_records(client, "/v1/keys/default/decrypt", batch)  # all of one length, or not
    assert got == [(FAILED, b"") if i in bad else (OK, r) for i, r in enumerate(records)]
    assert open_records(client, "/v1/decrypt", envelopes) == [(OK, r) for r in records]


def test_records_of_several_keys_and_versions(client: httpx.Client) -> None:
    name = f"rec-{uuid.uuid4().hex[:8]}"
    client.post("/v1/keys", json={"name": name}).raise_for_status()
    first = seal(client, name, [b"v1-a", b"v1-b"])
    client.post(f"/v1/keys/{name}/rotate").raise_for_status()
    second = seal(client, name, [b"v2"])
    other = seal(client, "default", [b"default"])
    mixed = [first[0], second[0], first[1], other[0]]
    # Under the key's route: versions mix freely; another key's envelope fails.
    got = open_records(client, f"/v1/keys/{name}/decrypt", mixed)
    assert got == [(OK, b"v1-a"), (OK, b"v2"), (OK, b"v1-b"), (FAILED, b"")]
    # /v1/decrypt takes every key the token may decrypt with.
    got = open_records(client, "/v1/decrypt", mixed)
    assert got == [(OK, b"v1-a"), (OK, b"v2"), (OK, b"v1-b"), (OK, b"default")]
    client.patch(f"/v1/keys/{name}", json={"min_decryption_version": 2}).raise_for_status()
    got = open_records(client, f"/v1/keys/{name}/decrypt", mixed[:3])
    assert got == [(RETIRED, b""), (OK, b"v2"), (RETIRED, b"")]
    version9 = bytearray(second[0])
    version9[6:10] = (9).to_bytes(4, "big")
    assert open_records(client, f"/v1/keys/{name}/decrypt", [bytes(version9)]) == [(NOT_FOUND, b"")]


def test_aad_binds_every_record(client: httpx.Client) -> None:
    aad = {"x-aad": base64.b64encode(b"tenant=7").decode()}
    envelopes = seal(client, "default", [b"a", b"b"], headers=aad)
    assert client.post("/v1/decrypt", content=envelopes[0], headers=aad).content == b"a"
    assert client.post("/v1/decrypt", content=envelopes[0]).status_code == 400
    got = open_records(client, "/v1/keys/default/decrypt", envelopes, headers=aad)
    assert got == [(OK, b"a"), (OK, b"b")]
    got = open_records(client, "/v1/keys/default/decrypt", envelopes)
    assert got == [(FAILED, b""), (FAILED, b"")]


def test_bad_framing_and_limits(make_server: MakeServer) -> None:
    srv = make_server(max_record_bytes=1000, max_batch_records=10)
    with srv.client() as c:
        path = "/v1/keys/default/encrypt?mode=records"
        cut = c.post(path, content=framed([b"abc"])[:-1])
        assert (cut.status_code, cut.json()["error"]["code"]) == (400, "bad_request")
        header_only = c.post(path, content=b"\0\0")
        assert header_only.status_code == 400
        big = c.post(path, content=struct.pack(">I", 1001) + bytes(1001))
        assert (big.status_code, big.json()["error"]["code"]) == (413, "too_large")
        assert "1000 bytes" in big.json()["error"]["message"]
        at_limit = c.post(path, content=framed([bytes(1000)] * 10))
        assert at_limit.status_code == 200
        too_many = c.post(path, content=framed([b"r"] * 11))
        assert (too_many.status_code, too_many.json()["error"]["code"]) == (413, "too_large")
        other_mode = c.post("/v1/keys/default/encrypt?mode=batch", content=b"x")
        assert other_mode.status_code == 400


def answer_to_a_held_body(srv: Server, path: str, sent: list[bytes], duplex: bool) -> bytes:
    """The answer to a records request that declares 64 MiB and sends only ``sent`` (each
    piece a write of its own), the rest of the body held back: whatever the server says
    while the client still has 64 MiB to send."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {srv.token}\r\n"
        f"Content-Length: {64 * MiB}\r\n" + ("Sealflow-Duplex: 1\r\n" if duplex else "") + "\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=60) as conn:
        conn.sendall(head)
        for piece in sent:
            conn.sendall(piece)
        answer = b""
        while b"\r\n\r\n" not in answer:
            more = conn.recv(65536)
            if not more:
                break
            answer += more
        return answer


@pytest.mark.parametrize("duplex", [False, True])
def test_a_too_large_length_is_refused_as_its_four_bytes_arrive(
    make_server: MakeServer, duplex: bool
) -> None:
    """Issue 24, item 10: a length field beyond the limit gets its 413 with nothing after it
    sent (before, the server waited for 512 KiB more body), also when the field is split
    across writes or follows good records."""
    srv = make_server(max_record_bytes=1000)
    good = framed([os.urandom(100) for _ in range(5)])
    for path in ("/v1/keys/default/encrypt?mode=records", "/v1/keys/default/decrypt?mode=records"):
        for sent in (
            [b"\xff\xff\xff\xff"],
            [b"\x00\x00", b"\x03\xe9"],  # 1001, in two writes
            [good + struct.pack(">I", 1 << 20)] if "encrypt" in path else [b"\0\0\x10\0"],
        ):
            answer = answer_to_a_held_body(srv, path, sent, duplex)
            assert answer.startswith(b"HTTP/1.1 413 "), (path, sent, answer[:200])


def test_the_frame_watch_refuses_exactly_the_first_length_beyond_the_limit() -> None:
    """``FrameWatch`` over every way of cutting a body into two or three pieces: it refuses
    in the piece that completes the first too-large length field, never before."""
    limit = 40
    records = [os.urandom(n) for n in (0, 1, 39, 40, 7)]
    good = framed(records)
    body = good + struct.pack(">I", 41) + b"x" * 10
    first_bad = len(good) + 4  # the byte after the too-large field
    for cut in range(len(body) + 1):
        for cut2 in (cut, min(len(body), cut + 3), min(len(body), cut + 45)):
            watch = FrameWatch(limit)
            fed = 0
            refused_at = None
            for piece in (body[:cut], body[cut:cut2], body[cut2:]):
                fed += len(piece)
                try:
                    watch(piece)
                except ApiError as exc:
                    refused_at, status = fed, exc.status
                    break
            assert refused_at is not None
            assert status == 413
            assert refused_at >= first_bad
            assert refused_at - len(piece) < first_bad  # the piece that completed the field
    watch = FrameWatch(limit)
    for i in range(len(good)):  # byte by byte, nothing refused
        watch(good[i : i + 1])


def test_the_frame_watch_counts_the_records_whose_length_field_arrived() -> None:
    """``FrameWatch.started`` bounds the records a batch can hold (the sealer's lease asked
    for beforehand): exactly the length fields seen so far, however the body is cut."""
    records = [os.urandom(n) for n in (0, 1, 39, 40, 7, 0)]
    body = framed(records)
    fields = []  # the offset just past each record's length field
    pos = 0
    for r in records:
        fields.append(pos + 4)
        pos += 4 + len(r)
    for cut in range(len(body) + 1):
        for cut2 in (cut, min(len(body), cut + 3), min(len(body), cut + 45)):
            watch = FrameWatch(40)
            fed = 0
            for piece in (body[:cut], body[cut:cut2], body[cut2:]):
                watch(piece)
                fed += len(piece)
                assert watch.started == sum(end <= fed for end in fields)
    assert watch.started == len(records)


def test_scopes_apply(server: Server) -> None:
    only_encrypt = new_token(server, "encrypt:default")
    with server.client(only_encrypt) as c:
        envelopes = seal(c, "default", [b"secret"])
        r = c.post("/v1/keys/default/decrypt?mode=records", content=framed(envelopes))
        assert r.status_code == 403
        # /v1/decrypt checks each envelope's key: this token may decrypt none.
        got = open_records(c, "/v1/decrypt", envelopes)
        assert got == [(FAILED, b"")]


def test_a_large_batch_streams_in_bounded_memory(server: Server) -> None:
    # 128 MiB of 1 KiB records: the body is never held whole (request-then-response spools
    # the output, sealed, to disk); the server's RSS stays within 64 MiB of where it was.
    record = os.urandom(1024)
    count = 128 * 1024

    start = server.status("VmRSS")
    peak = [0]

    def body() -> Iterator[bytes]:
        piece = framed([record] * 1024)
        for _ in range(count // 1024):
            peak[0] = max(peak[0], server.status("VmRSS"))
            yield piece

    received = 0
    with server.post("/v1/keys/default/encrypt?mode=records", body(), count * 1028) as r:
        assert r.status == 200
        for chunk in r.pieces():
            received += len(chunk)
            peak[0] = max(peak[0], server.status("VmRSS"))
    envelope = len(record) + 12 + 16 + 11 + len("default")
    assert received == count * (4 + envelope)
    assert peak[0] - start < 64 * MiB
