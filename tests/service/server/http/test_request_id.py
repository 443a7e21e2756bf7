"""X-Request-Id on every response the protocol writes, in-process (``conftest``): the
client's id when it is well-formed, a new one otherwise. That the access-log line has the same
id: tests/service/server/test_client_address.py, against a real server."""

from __future__ import annotations

import os
import re

import pytest

from sealflow.service.server.http import Head, _request_id
from tests.service.server.http.conftest import Conn, Run, Service
from tests.service.server.http.test_protocol import ENCRYPT, get, post

MADE = re.compile(r"[0-9a-f]{16}-[0-9]+")  # an id made by the server
_RESPONSE = re.compile(rb"HTTP/1\.1 (\d{3}) [^\r\n]*\r\n((?:[^\r\n]+\r\n)*)\r\n")


def answered(data: bytes) -> list[tuple[int, list[str]]]:
    """(status, its X-Request-Id values) of each final response written, in order."""
    found = []
    for match in _RESPONSE.finditer(data):
        status = int(match.group(1))
        if status != 100:
            lines = match.group(2).decode("latin-1").split("\r\n")
            ids = [
                line.split(": ", 1)[1] for line in lines if line.lower().startswith("x-request-id:")
            ]
            found.append((status, ids))
    return found


async def one(conn: Conn, request: bytes, status: int) -> str:
    """Send a request alone on its connection: the id its one response carries."""
    conn.send(request)
    assert await conn.answers(1) == [status], bytes(conn.wire.data)[:300]
    ((_, ids),) = answered(bytes(conn.wire.data))
    assert len(ids) == 1, ids
    return ids[0]


def warm(svc: Service) -> bytes:
    """A small single-shot encrypt that the protocol answers itself (once the key's first
    sealing in the process, which leases from the keystore, has gone through the app)."""
    return post(ENCRYPT, svc.token, b"x" * 1024)


def test_every_kind_of_answer_names_its_request(run: Run) -> None:
    async def test(svc: Service) -> None:
        vault = f"X-Vault-Token: {svc.token}\r\n"
        transit = b'{"plaintext": "aGk="}'
        await one(svc.connect(), warm(svc), 200)  # through the app: the key's first sealing
        seen = len(svc.seen)
        kinds = [
            ("fast answer", warm(svc), 200),
            ("Transit fast answer",
             post("/v1/transit/encrypt/default", body=transit, headers=vault), 200),
            ("stream", post("/v1/keys/default/encrypt", svc.token, b"x" * 1024), 200),
            ("Transit", get("/v1/transit/keys/default", vault), 200),
            ("admin", get("/v1/keys", f"Authorization: Bearer {svc.token}\r\n"), 200),
            ("probe", get("/healthz"), 200),
            ("readiness", get("/readyz"), 200),
            ("metrics", get("/metrics"), 200),
            ("docs", get("/openapi.json"), 200),
            ("not found", get("/nowhere"), 404),
            ("401 from the head", post(ENCRYPT, body=b"x"), 401),
            ("403 from the head (Transit)", post("/v1/transit/encrypt/default", body=transit,
                                                 headers="X-Vault-Token: nope\r\n"), 403),
            ("400 from the head", post(ENCRYPT, svc.token, b"x", "X-AAD: a\r\nX-AAD: a\r\n"), 400),
            ("413 from the head", post("/v1/keys", svc.token, b"x" * 70_000), 413),
            ("400 from the protocol", b"NOT HTTP\r\n\r\n", 400),
            ("431 from the head", get("/healthz", "X-Big: " + "x" * 17_000 + "\r\n"), 431),
            ("431 from the protocol", b"GET / HTTP/1.1\r\nX-Big: " + b"x" * 20_000, 431),
            ("414 from the protocol", get("/" + "x" * 20_000), 414),
        ]  # fmt: skip
        ids = []
        for name, request, status in kinds:
            request_id = await one(svc.connect(), request, status)
            assert MADE.fullmatch(request_id), (name, request_id)
            ids.append(request_id)
        # A head that never ends in time: the protocol's 408.
        conn = svc.connect(head_timeout=0.1)
        conn.send(b"GET /healthz HTTP/1.1\r\nHost")
        assert await conn.answers(1) == [408]
        ((_, late),) = answered(bytes(conn.wire.data))
        ids.extend(late)
        assert len(set(ids)) == len(kinds) + 1
        # The two fast answers never reached the app: the stream is the first that did.
        stream, keys = ("POST", "/v1/keys/default/encrypt"), ("GET", "/v1/transit/keys/default")
        assert svc.seen[seen : seen + 2] == [stream, keys]

    run(test)


def test_answers_of_one_connection_each_name_their_own_request(run: Run) -> None:
    async def test(svc: Service) -> None:
        conn = svc.connect()
        # Pipelined: fast answers and the app's, interleaved, then a refusal of the bytes.
        conn.send(warm(svc) + get("/healthz") + warm(svc) + get("/metrics") + b"NOT HTTP\r\n\r\n")
        assert await conn.answers(5) == [200, 200, 200, 200, 400]
        ids = [ids for _, ids in answered(bytes(conn.wire.data))]
        assert all(len(each) == 1 for each in ids)
        assert len({each[0] for each in ids}) == 5

    run(test)


# An id at each edge of the rule: one character, 128, every allowed character.
GOOD = ["a", "A" * 128, "Req-1.2_3", "0123456789abcdefghijklmnopqrstuvwxyz.ABCXYZ_-"]


@pytest.mark.parametrize("given", GOOD)
def test_a_well_formed_id_comes_back(run: Run, given: str) -> None:
    async def test(svc: Service) -> None:
        header = f"X-Request-Id: {given}\r\n"
        await one(svc.connect(), warm(svc), 200)
        requests = [
            (warm(svc).replace(b"Host: x\r\n", f"Host: x\r\n{header}".encode()), 200),
            (post("/v1/keys/default/encrypt", svc.token, b"x", header), 200),
            (post(ENCRYPT, body=b"x", headers=header), 401),
            (get("/v1/transit/keys/default", f"X-Vault-Token: {svc.token}\r\n{header}"), 200),
            (get("/healthz", header), 200),
        ]
        for request, status in requests:
            assert await one(svc.connect(), request, status) == given

    run(test)


BAD = [
    "A" * 129,  # too long
    "",  # empty
    "has space",
    "a/b",
    "a:b",
    "caf\xe9",  # a byte outside ASCII
    "id\t1",
]


@pytest.mark.parametrize("given", BAD)
def test_a_malformed_id_is_replaced(run: Run, given: str) -> None:
    async def test(svc: Service) -> None:
        header = f"X-Request-Id: {given}\r\n".encode("latin-1")
        for path, status in [("/healthz", 200), (ENCRYPT, 401)]:
            request = b"GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n" % (path.encode(), header)
            request_id = await one(svc.connect(), request, status)
            assert MADE.fullmatch(request_id)

    run(test)


def test_an_id_sent_twice_is_replaced_even_when_both_are_well_formed(run: Run) -> None:
    async def test(svc: Service) -> None:
        for twice in ["X-Request-Id: a\r\nX-Request-Id: b\r\n", "X-Request-Id: a\r\n" * 2]:
            request_id = await one(svc.connect(), get("/healthz", twice), 200)
            assert MADE.fullmatch(request_id)

    run(test)


def test_ids_made_for_a_thousand_requests_are_all_different(run: Run) -> None:
    async def test(svc: Service) -> None:
        await one(svc.connect(), warm(svc), 200)
        ids: list[str] = []
        for _ in range(10):
            conn = svc.connect()
            # Each connection: 100 requests pipelined, fast answers and the app's.
            conn.send((warm(svc) + get("/healthz")) * 50)
            assert await conn.answers(100) == [200] * 100
            ids += [each for _, found in answered(bytes(conn.wire.data)) for each in found]
        assert len(ids) == 1000
        assert len(set(ids)) == 1000
        assert all(MADE.fullmatch(each) for each in ids)

    run(test)


def test_a_head_from_a_scope_has_an_id_and_the_client() -> None:
    scope = {"method": "GET", "path": "/healthz", "query_string": b"", "client": ("192.0.2.1", 1)}
    head = Head.from_scope({**scope, "headers": [(b"x-request-id", b"abc")]})
    assert (head.request_id, head.peer) == ("abc", "192.0.2.1")
    head = Head.from_scope({**scope, "headers": [], "client": None})
    assert MADE.fullmatch(head.request_id)
    assert head.peer is None


def test_a_forked_process_makes_ids_of_its_own() -> None:
    """Workers forked from one parent must not repeat each other's ids."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, and out, whatever happens
        try:
            os.write(write, _request_id.new().encode())
        finally:
            os._exit(0)
    os.close(write)
    child = os.read(read, 100).decode()
    os.close(read)
    os.waitpid(pid, 0)
    mine = _request_id.new()
    assert MADE.fullmatch(child)
    assert child.split("-")[0] != mine.split("-")[0]


@pytest.mark.parametrize(
    ("value", "ok"),
    [(b"a", True), (b"z" * 128, True), (b"a.b_c-D9", True), (b"", False), (b"z" * 129, False),
     (b"a b", False), (b"a\x00", False), (b"a\xff", False), (b"a,b", False)],
)  # fmt: skip
def test_the_rule_of_a_well_formed_id(value: bytes, ok: bool) -> None:
    assert _request_id.well_formed(value) is ok
