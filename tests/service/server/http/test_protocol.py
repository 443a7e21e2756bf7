"""sealflow's HTTP/1.1 protocol, in-process (``conftest``): what a request's head, its body and
its trailers can and cannot do, on the first request of a connection or a pipelined one."""

from __future__ import annotations

import base64
import re

from tests.service.server.http.conftest import Run, Service

ENCRYPT = "/v1/keys/default/encrypt?mode=single"


def post(
    path: str,
    token: str | None = None,
    body: bytes = b"",
    headers: str = "",
    chunked: bytes | None = None,
) -> bytes:
    """A request's bytes; ``chunked``: the chunked body (framing included) instead of body."""
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\n{headers}"
    if token is not None:
        head += f"Authorization: Bearer {token}\r\n"
    if chunked is not None:
        return (head + "Transfer-Encoding: chunked\r\n\r\n").encode() + chunked
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def get(path: str, headers: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode()


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def bodies(data: bytes) -> list[bytes]:
    """The bodies of Content-Length responses, in order."""
    found = []
    for match in re.finditer(rb"content-length: (\d+)\r\n(?:[^\r\n]*\r\n)*?\r\n", data):
        start = match.end()
        found.append(data[start : start + int(match.group(1))])
    return found


def test_trailer_fields_never_become_request_headers(run: Run) -> None:
    async def test(svc: Service) -> None:
        # A token only in the trailer: refused from the head, which has none.
        conn = svc.connect()
        trailer = f"Authorization: Bearer {svc.token}\r\n\r\n".encode()
        conn.send(post("/v1/keys/default/encrypt", chunked=chunk(b"secret") + b"0\r\n" + trailer))
        assert await conn.answers(1) == [401]
        # Vault's header the same way, on Transit.
        conn = svc.connect()
        body = b'{"plaintext": "aGk="}'
        trailer = f"X-Vault-Token: {svc.token}\r\n\r\n".encode()
        conn.send(post("/v1/transit/encrypt/default", chunked=chunk(body) + b"0\r\n" + trailer))
        assert await conn.answers(1) == [403]
        # X-AAD in the trailer is not bound into the envelope: it opens with no AAD.
        conn = svc.connect()
        aad = base64.b64encode(b"bound?").decode()
        trailer = f"X-AAD: {aad}\r\n\r\n".encode()
        conn.send(post(ENCRYPT, svc.token, chunked=chunk(b"secret") + b"0\r\n" + trailer))
        assert await conn.answers(1) == [200]
        (envelope,) = bodies(bytes(conn.wire.data))
        conn.send(post("/v1/decrypt", svc.token, envelope))
        assert await conn.answers(2) == [200, 200]
        assert bodies(bytes(conn.wire.data))[1] == b"secret"

    run(test)


def test_trailers_are_bounded_in_size_and_in_time(run: Run) -> None:
    async def test(svc: Service) -> None:
        # Endless trailer lines after the last chunk: refused once past the head limit.
        conn = svc.connect(head_limit=16384)
        conn.send(post("/healthz", chunked=b"0\r\n"))
        sent = 0
        while not conn.wire.eof and not conn.wire.closed and sent < 1 << 20:
            conn.send(b"X-Junk: " + b"j" * 4000 + b"\r\n")
            sent += 4010
            await conn.turn(0)
        assert sent <= 16384 + 8020  # refused within a line or two of the limit
        assert conn.wire.eof or conn.wire.closed
        # One trailer line that never ends: the same budget.
        conn = svc.connect(head_limit=16384)
        conn.send(post("/healthz", chunked=b"0\r\nX-Junk: "))
        for _ in range(64):
            if conn.wire.eof or conn.wire.closed:
                break
            conn.send(b"j" * 1024)
            await conn.turn(0)
        assert conn.wire.eof or conn.wire.closed
        # Slow trailers: the head timeout, even once the app has answered.
        conn = svc.connect(head_timeout=0.2)
        conn.send(post("/healthz", chunked=b"0\r\nX-Slow: 1\r\n"))
        await conn.turn(0.5)
        assert conn.wire.closed

    run(test)


def test_every_head_on_a_connection_is_bounded_pipelined_or_not(run: Run) -> None:
    async def test(svc: Service) -> None:
        unending = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"x" * 60_000
        conn = svc.connect(head_limit=16384)
        conn.send(get("/healthz") + unending)  # a whole request, then a head in the same read
        assert await conn.answers(2) == [200, 431]
        assert conn.wire.eof or conn.wire.closed
        # After a chunked request, the same.
        conn = svc.connect(head_limit=16384)
        conn.send(post("/healthz", chunked=chunk(b"abc") + b"0\r\n\r\n") + unending)
        assert (await conn.answers(2))[-1] == 431
        # The head timeout for a pipelined head that never ends.
        conn = svc.connect(head_timeout=0.2)
        conn.send(get("/healthz") + b"GET /healthz HTTP/1.1\r\nHost")
        assert await conn.answers(2) == [200, 408]
        assert conn.wire.eof or conn.wire.closed

    run(test)


def test_list_belongs_to_its_request_only(run: Run) -> None:
    async def test(svc: Service) -> None:
        vault = f"X-Vault-Token: {svc.token}\r\n"
        conn = svc.connect()
        conn.send(get("/healthz"))
        conn.send(b"POST /healthz HTTP/1.1\r\nHost: x\r\nX-Note: ")  # a head ends mid-header
        conn.send(b"LIST z\r\nContent-Length: 0\r\n\r\n")  # ...in a read that starts LIST
        conn.send(get("/v1/transit/keys/default", vault))
        assert (await conn.answers(3))[-1] == 200
        assert svc.seen[-1] == ("GET", "/v1/transit/keys/default")
        # A LIST is one when it starts a head: pipelined, or split across reads.
        listing = b"LIST /v1/transit/keys HTTP/1.1\r\nHost: x\r\n" + vault.encode() + b"\r\n"
        conn.send(get("/healthz") + listing)
        conn.send(listing[:2])
        conn.send(listing[2:])
        assert (await conn.answers(6))[-3:] == [200, 200, 200]
        assert svc.seen[-2:] == [("LIST", "/v1/transit/keys")] * 2

    run(test)


def test_the_keep_alive_timer_waits_for_what_is_pending(run: Run) -> None:
    async def test(svc: Service) -> None:
        conn = svc.connect()
        conn.protocol.keepalive_timeout = 0.001
        small = post(ENCRYPT, svc.token, b"x" * 100)  # fast answers
        app = get("/healthz")  # the ASGI app's
        conn.send((small + app) * 30)
        assert await conn.answers(60) == [200] * 60
        await conn.turn(0.05)
        assert conn.wire.closed  # then, idle, it closed

    run(test)


def test_a_header_that_must_appear_once_is_refused_twice(run: Run) -> None:
    async def test(svc: Service) -> None:
        aad = base64.b64encode(b"a").decode()
        twice = [
            (ENCRYPT, f"Authorization: Bearer {svc.token}\r\n" * 2),
            (ENCRYPT, f"Authorization: Bearer {svc.token}\r\nX-AAD: {aad}\r\nX-AAD: {aad}\r\n"),
            (ENCRYPT, f"Authorization: Bearer {svc.token}\r\nHost: y\r\n"),
            ("/v1/transit/encrypt/default", f"X-Vault-Token: x\r\nX-Vault-Token: {svc.token}\r\n"),
            ("/v1/auth/token/lookup-self", f"X-Vault-Token: x\r\nX-Vault-Token: {svc.token}\r\n"),
        ]
        for path, headers in twice:
            conn = svc.connect()
            conn.send(post(path, body=b'{"plaintext": "aGk="}', headers=headers))
            assert await conn.answers(1) == [400], headers
            assert b"more than one" in conn.wire.data
        conn = svc.connect()
        conn.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\na")
        assert await conn.answers(1) == [400]

    run(test)


def test_pipelined_answers_keep_their_order_whoever_answers_them(run: Run) -> None:
    async def test(svc: Service) -> None:
        conn = svc.connect()
        one, three = post(ENCRYPT, svc.token, b"1"), post(ENCRYPT, svc.token, b"333")
        stream = post("/v1/keys/default/encrypt", svc.token, b"22")  # the ASGI app's
        conn.send(one + stream + three + get("/healthz") + b"NOT HTTP\r\n\r\n")
        assert await conn.answers(5) == [200, 200, 200, 200, 400]
        lengths = [int(n) for n in re.findall(rb"content-length: (\d+)", conn.wire.data)]
        # The fast answers' envelopes differ by their plaintexts' lengths; the stream's is
        # longer (its chunked header) but second.
        assert lengths[2] - lengths[0] == 2
        assert lengths[1] > lengths[2]

    run(test)


def test_expect_100_continue_and_head(run: Run) -> None:
    async def test(svc: Service) -> None:
        conn = svc.connect()
        head = post(ENCRYPT, svc.token, b"x" * 10, "Expect: 100-continue\r\n")
        conn.send(head[:-10])
        await conn.turn()
        assert bytes(conn.wire.data) == b"HTTP/1.1 100 Continue\r\n\r\n"
        conn.send(head[-10:])
        assert await conn.answers(2) == [100, 200]
        conn = svc.connect()
        conn.send(b"HEAD /v1/sys/health HTTP/1.1\r\nHost: x\r\n\r\n" + get("/healthz"))
        assert await conn.answers(2) == [200, 200]
        data = bytes(conn.wire.data)
        first = data[: data.index(b"HTTP/1.1", 1)]
        assert first.endswith(b"\r\n\r\n")  # a head, no body

    run(test)


def test_a_whole_body_that_does_not_come_in_time_is_408(run: Run) -> None:
    async def test(svc: Service) -> None:
        conn = svc.connect(receive_timeout=0.2)
        conn.send(post(ENCRYPT, svc.token, b"x" * 100)[:-50])
        assert await conn.answers(1) == [408]
        assert conn.wire.eof or conn.wire.closed

    run(test)


def test_a_content_length_with_thousands_of_leading_zeros_is_its_value(run: Run) -> None:
    """The parser takes any number of leading zeros; the length is still the number (a 500
    before: Python's int() refuses more than 4,300 digits)."""

    async def test(svc: Service) -> None:
        conn = svc.connect()
        head = f"POST {ENCRYPT} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {svc.token}\r\n"
        conn.send(f"{head}Content-Length: {'0' * 5000}4\r\n\r\nabcd".encode() + get("/healthz"))
        assert await conn.answers(2) == [200, 200]
        conn = svc.connect()
        conn.send(f"{head}Content-Length: {'0' * 5000}\r\n\r\n".encode())
        assert await conn.answers(1) == [200]

    run(test)
