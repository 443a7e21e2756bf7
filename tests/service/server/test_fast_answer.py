"""The fast answer (docs/SERVICE.md): a request whose plan is whole-body (a small single-shot
encrypt or a decrypt, a small Transit encrypt) is answered by the protocol once its body has
come, through the same whole-body step as the ASGI path, and answered exactly as that path
answers it: successes and refusals alike.

Two servers, the fast answer on and off (``SEALFLOW_SMALL_LANE``), get the same requests; what
they answer (statuses, headers, error codes, plaintexts), log and count must be the same, and
the fast answer's counter (``sealflow_lane_requests_total``) shows which requests it took.
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.service.conftest import Server
from tests.service.server.test_auth import new_token

MakeServer = Callable[..., Server]
ENCRYPT = "/v1/keys/default/encrypt?mode=single"


def warmed(srv: Server) -> Server:
    """The server after one sealing under ``default``: the first sealing under a key in a
    process leases from the keystore, which the event loop never waits for, so it is served
    through the ASGI path, never as a fast answer."""
    with srv.client() as c:
        assert c.post("/v1/keys/default/encrypt?mode=single", content=b"warm").status_code == 200
    return srv


def lane_count(srv: Server) -> int:
    text = httpx.get(srv.url + "/metrics").text
    match = re.search(r"^sealflow_lane_requests_total ([0-9.e+]+)$", text, re.M)
    assert match is not None
    return int(float(match.group(1)))


def request_counts(srv: Server) -> dict[str, float]:
    """sealflow_requests_total of the data routes, by its labels."""
    text = httpx.get(srv.url + "/metrics").text
    pattern = r'^sealflow_requests_total\{(.*route="/v1/[^"]*crypt".*)\} (\S+)$'
    found = re.findall(pattern, text, re.M)
    return {labels: float(value) for labels, value in found}


def exchange(srv: Server, other: Server) -> list[Any]:
    """The same requests on srv (with other's envelopes where one must fail); what came back."""
    seen: list[Any] = []
    scoped = new_token(srv, "encrypt:other", "decrypt:other")
    with srv.client() as c, srv.client(token=scoped) as narrow:
        body = os.urandom(1024)
        aad = base64.b64encode(b"order 7").decode()
        sealed = c.post(ENCRYPT, content=body)
        with_aad = c.post(ENCRYPT, content=body, headers={"X-AAD": aad})
        with other.client() as elsewhere:
            foreign = elsewhere.post(ENCRYPT, content=body).content
        stream = c.post("/v1/keys/default/encrypt", content=body).content  # stream mode
        tampered = bytearray(sealed.content)
        tampered[-1] ^= 1
        replies = [
            sealed,
            with_aad,
            c.post("/v1/keys/default/decrypt", content=sealed.content),
            c.post("/v1/decrypt", content=sealed.content),
            c.post("/v1/decrypt", content=with_aad.content, headers={"X-AAD": aad}),
            c.post("/v1/decrypt", content=stream),
            c.post("/v1/decrypt", content=b""),
            c.post(ENCRYPT, content=b""),
            # Refusals: from the same error path, on both servers.
            c.post("/v1/decrypt", content=with_aad.content),  # AAD missing
            c.post("/v1/decrypt", content=bytes(tampered)),
            c.post("/v1/decrypt", content=foreign),  # another keystore's key material
            c.post("/v1/decrypt", content=sealed.content[:20]),
            c.post("/v1/keys/t-chacha/decrypt", content=sealed.content),  # not its key
            c.post("/v1/keys/absent/encrypt?mode=single", content=body),
            # A Transit-only name (Vault's rule) on the native routes: refused by name.
            c.post("/v1/keys/Not_Native/encrypt?mode=single", content=body),
            c.post("/v1/keys/Not_Native/decrypt", content=sealed.content),
            c.post(ENCRYPT, content=body, headers={"X-AAD": "!!"}),
            c.post("/v1/keys/default/encrypt?mode=other", content=body),
            narrow.post(ENCRYPT, content=body),
            narrow.post("/v1/decrypt", content=sealed.content),
            httpx.post(srv.url + ENCRYPT, content=body),  # no token
            httpx.post(srv.url + ENCRYPT, content=body, headers={"authorization": "Bearer x"}),
        ]
        for reply in replies:
            error = reply.json()["error"]["code"] if reply.status_code >= 400 else None
            seen.append((reply.status_code, sorted(reply.headers), error, len(reply.content)))
        opened = [r.content for r in replies[2:6]]
        assert opened == [body] * 4
    return seen


@pytest.fixture
def pair(make_server: MakeServer) -> tuple[Server, Server]:
    return make_server(small_lane=True), make_server(small_lane=False)


def test_the_fast_answer_answers_logs_and_counts_as_the_asgi_path_does(
    pair: tuple[Server, Server],
) -> None:
    lane, usual = pair
    assert exchange(lane, usual) == exchange(usual, lane)
    # Every request with a whole-body plan, refusals included: the single-shot encrypts (12,
    # with the other server's foreign one), the decrypts (14, the stream envelope's too); not
    # the stream encrypts, mode=other, nor those refused from the head (no token); nor the
    # first sealing under the key in the process, whose lease waits for the keystore and so is
    # passed to the ASGI path (the event loop never waits on the database).
    assert lane_count(lane) == 19
    assert lane_count(usual) == 0
    assert request_counts(lane) == request_counts(usual)

    def lines(srv: Server) -> list[dict[str, Any]]:
        time.sleep(0.3)  # the access log goes out every 0.1 s
        volatile = ("ts", "duration_ms", "request_id")  # request_id: each server makes its own
        return [
            {k: v for k, v in entry.items() if k not in volatile}
            for entry in srv.access()
            if entry["route"].startswith("/v1/") and "crypt" in entry["route"]
        ]

    # The same lines (each server also served the other's one foreign encrypt, in another
    # place of its log).
    assert sorted(map(json.dumps, lines(lane))) == sorted(map(json.dumps, lines(usual)))


def transit_exchange(srv: Server) -> list[Any]:
    """Transit encrypts on srv: single items and a batch, good and refused."""
    seen: list[Any] = []
    scoped = new_token(srv, "encrypt:other")
    vault = {"X-Vault-Token": srv.token}
    hi = {"plaintext": "aGk="}
    with httpx.Client(base_url=srv.url + "/v1/transit", headers=vault) as c:
        # A key with min_encryption_version 2 of 3 versions, under one of Vault's names.
        for step in ("", "/rotate", "/rotate"):
            assert c.post(f"/keys/Floor_1{step}", json={}).status_code == 200
        floor = c.post("/keys/Floor_1/config", json={"min_encryption_version": 2})
        assert floor.json()["data"]["min_encryption_version"] == 2
        replies = [
            c.post("/encrypt/Floor_1", json={"plaintext": "aGk=", "key_version": 1}),
            c.post("/encrypt/Floor_1", json={"plaintext": "aGk=", "key_version": 2}),
            c.post("/encrypt/Floor_1", json={"plaintext": "aGk="}),
            c.post("/encrypt/default", json={"plaintext": base64.b64encode(b"hi").decode()}),
            c.post("/encrypt/default", json={"plaintext": "aGk=", "associated_data": "eA=="}),
            c.post("/encrypt/default", json={"plaintext": "aGk=", "key_version": "1"}),
            c.post("/encrypt/default", json={"plaintext": "!!"}),
            c.post("/encrypt/default", json={"plaintext": "aGk=", "key_version": 9}),
            c.post("/encrypt/absent", json={"plaintext": "aGk="}),
            c.post("/encrypt/default", content=b"{not json"),
            c.post("/encrypt/default", json={"batch_input": [{"plaintext": "aGk="}]}),
            c.post("/encrypt/default", json=hi, headers={"X-Vault-Token": scoped}),
            c.post("/encrypt/default", json=hi, headers={"X-Vault-Token": "x"}),
        ]  # fmt: skip
        bearer = httpx.post(
            srv.url + "/v1/transit/encrypt/default",
            json={"plaintext": "aGk="},
            headers={"Authorization": f"Bearer {srv.token}"},
        )
        for reply in [*replies, bearer]:
            answer = reply.json()
            data = answer.get("data") or {}
            shape = sorted(answer), sorted(data), answer.get("errors")
            seen.append((reply.status_code, sorted(reply.headers), shape))
        refused = replies[0].json()["errors"]
        assert refused == [
            "requested version for encryption is less than the minimum encryption key version"
        ]
        sealed = replies[3].json()["data"]["ciphertext"]
        opened = c.post("/decrypt/default", json={"ciphertext": sealed}).json()
        assert base64.b64decode(opened["data"]["plaintext"]) == b"hi"
    return seen


def test_transit_encrypts_are_answered_fast_and_the_same(pair: tuple[Server, Server]) -> None:
    lane, usual = pair
    before = lane_count(lane)
    assert transit_exchange(lane) == transit_exchange(usual)
    # Every single encrypt whose head passed (refusals of its body included), the Bearer one
    # too; not the one refused from the head (an unknown token); nor the 3 whose lease must
    # ask the keystore first, which the event loop never waits for (the first sealing under
    # Floor_1 and under default in the process, and Floor_1's version 2 asked for by number,
    # whose sealings are reserved one at a time), nor the one under an unknown key, whose
    # refusal asks the keystore whether a public-key-only key holds the name: the ASGI path
    # serves those.
    assert lane_count(lane) - before == 9
    assert lane_count(usual) == 0
    time.sleep(0.3)  # the access log goes out every 0.1 s

    def lines(srv: Server) -> list[str]:
        volatile = ("ts", "duration_ms", "request_id")  # request_id: each server makes its own
        return sorted(
            json.dumps({k: v for k, v in entry.items() if k not in volatile})
            for entry in srv.access()
            if entry["route"].startswith("/v1/transit/")
        )

    assert lines(lane) == lines(usual)


def raw(srv: Server, data: list[bytes], pause: float = 0.0) -> bytes:
    """Send data in writes (pause between them), then read until the server closes or idles."""
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for piece in data:
        sock.sendall(piece)
        time.sleep(pause)
    sock.settimeout(1.0)
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except TimeoutError:
        pass
    sock.close()
    return received


def head(srv: Server, length: int, extra: str = "") -> bytes:
    return (
        f"POST {ENCRYPT} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {srv.token}\r\n"
        f"Content-Length: {length}\r\n{extra}\r\n"
    ).encode()


def test_a_whole_body_request_is_answered_fast_however_its_body_arrives(
    make_server: MakeServer,
) -> None:
    """The plan decides from the head; the protocol then gathers the body, whether it asked
    for 100-continue, came over HTTP/1.0, or arrived slowly in pieces."""
    srv = warmed(make_server())
    body = os.urandom(1000)
    before = lane_count(srv)
    expect = raw(srv, [head(srv, 1000, "Expect: 100-continue\r\n"), body], pause=0.2)
    assert expect.startswith(b"HTTP/1.1 100 ")
    assert b"HTTP/1.1 200 " in expect
    # HTTP/1.0: its connection closes after the answer.
    old = raw(srv, [head(srv, 1000).replace(b"HTTP/1.1", b"HTTP/1.0") + body])
    assert old.startswith(b"HTTP/1.1 200 ")
    assert b"connection: close" in old.lower()
    slow = raw(srv, [head(srv, 1000) + body[:10], body[10:500], body[500:]], pause=0.3)
    assert slow.startswith(b"HTTP/1.1 200 ")
    assert lane_count(srv) == before + 3


def test_what_is_not_a_whole_body_plan_goes_through_the_app(make_server: MakeServer) -> None:
    srv = make_server()
    body = os.urandom(1000)
    before = lane_count(srv)
    with srv.client() as c:
        # A body longer than a whole-body plan's, a stream, full duplex, records.
        assert c.post(ENCRYPT, content=os.urandom(200_000)).status_code == 200
        assert c.post("/v1/keys/default/encrypt", content=body).status_code == 200
        duplex = c.post(ENCRYPT, content=body, headers={"Sealflow-Duplex": "1"})
        assert duplex.status_code == 200
        framed = len(body).to_bytes(4, "big") + body
        assert c.post("/v1/keys/default/encrypt?mode=records", content=framed).status_code == 200
        # Chunked: no declared length.
        assert c.post(ENCRYPT, content=iter([body])).status_code == 200
    # No token: refused from the head, its body never read.
    stranger = raw(srv, [head(srv, 1000).replace(srv.token.encode(), b"x" * 43) + body[:10]])
    assert stranger.startswith(b"HTTP/1.1 401 ")
    assert lane_count(srv) == before


def test_fast_answers_keep_their_order(make_server: MakeServer) -> None:
    srv = warmed(make_server())
    body = os.urandom(1000)
    before = lane_count(srv)
    # The body in a later read than the head (as httpx and aiohttp send it).
    split = raw(srv, [head(srv, 1000) + body[:10], body[10:]], pause=0.2)
    assert split.startswith(b"HTTP/1.1 200 ")
    # Two requests in one write: both answered, in order.
    two = raw(srv, [head(srv, 1000) + body + head(srv, 3) + b"abc"])
    assert two.count(b"HTTP/1.1 200 ") == 2
    lengths = [int(n) for n in re.findall(rb"content-length: (\d+)", two)]
    assert lengths[0] - lengths[1] == 1000 - 3  # the 1000-byte body's answer first
    assert lane_count(srv) == before + 3


def test_held_answers_leave_in_order_before_anything_else_on_their_connection(
    make_server: MakeServer,
) -> None:
    """Lane answers wait for the end of the loop's turn (docs/SERVICE.md): whatever else is
    written to their connection in that turn (an app's answer, the parser's 400, a refusal,
    the close after a half-close) goes after them."""
    srv = warmed(make_server())
    body = os.urandom(100)
    before = lane_count(srv)
    # Three lane requests and one for the ASGI app, in one write: four answers, in order.
    get = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    mixed = raw(srv, [head(srv, 100) + body + head(srv, 1) + b"a" + head(srv, 2) + b"ab" + get])
    statuses = re.findall(rb"HTTP/1.1 (\d+) ", mixed)
    assert statuses == [b"200"] * 4
    lengths = [int(n) for n in re.findall(rb"content-length: (\d+)", mixed)]
    assert lengths[0] - lengths[1] == 99
    assert lengths[1] - lengths[2] == -1
    assert mixed.rstrip().endswith(b"}")  # the app's JSON answer came last
    # A lane request, then bytes the parser refuses: the answer, then the 400.
    bad = raw(srv, [head(srv, 100) + body + b"NOT HTTP\r\n\r\n"])
    assert re.findall(rb"HTTP/1.1 (\d+) ", bad) == [b"200", b"400"]
    # A lane request, then a head over the limit: the answer, then the 431.
    big = b"POST / HTTP/1.1\r\nX-Big: " + b"x" * 70_000 + b"\r\n\r\n"
    refused = raw(srv, [head(srv, 100) + body + big])
    assert re.findall(rb"HTTP/1.1 (\d+) ", refused) == [b"200", b"431"]
    # A lane request and the client's half-close in the same moment: the answer still comes.
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    sock.sendall(head(srv, 100) + body)
    sock.shutdown(socket.SHUT_WR)
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    sock.close()
    assert received.startswith(b"HTTP/1.1 200 ")
    assert int(re.findall(rb"content-length: (\d+)", received)[0]) > 100
    assert lane_count(srv) == before + 6


def test_held_answers_leave_before_a_keep_alive_timeout_closes_the_connection(
    make_server: MakeServer,
) -> None:
    """Three hundred pipelined requests in one write, with a keep-alive timeout shorter than
    answering them takes: every held answer arrives. (The keep-alive timer, armed after each
    answer, also sends what is held before it closes; with uvloop it has not been seen to
    fire before the turn's end, so this does not prove that guard, only the behaviour.)"""
    srv = make_server(keepalive_timeout=0.001)
    body = os.urandom(100)
    many = 300  # about 15 us each: several milliseconds in one turn
    reply = raw(srv, [(head(srv, 100) + body) * many])
    assert reply.count(b"HTTP/1.1 200 ") == many


def hmac_exchange(srv: Server) -> list[tuple[int, Any]]:
    """Transit HMAC and verify requests, small and single or batched: statuses and answers
    (an HMAC is a function of the key: each server's key differs, so only shapes compare)."""
    seen: list[tuple[int, Any]] = []
    vault = {"X-Vault-Token": srv.token}
    with httpx.Client(base_url=srv.url + "/v1/transit", headers=vault) as c:
        assert c.post("/keys/lane-hmac", json={"type": "hmac", "key_size": 32}).status_code == 200
        made = c.post("/hmac/lane-hmac", json={"input": "aGk="})
        tag = made.json()["data"]["hmac"]
        replies = [
            made,
            c.post("/hmac/lane-hmac/sha3-256", json={"input": "aGk="}),
            c.post("/hmac/lane-hmac", json={"batch_input": [{"input": "aGk="}, {"input": "!"}]}),
            c.post("/hmac/lane-hmac", json={"input": "!!"}),
            c.post("/hmac/lane-hmac", json={}),
            c.post("/verify/lane-hmac", json={"input": "aGk=", "hmac": tag}),
            c.post("/verify/lane-hmac", json={"input": "aGk=", "hmac": tag[:-4] + "AAA="}),
            c.post("/verify/lane-hmac", json={"input": "aGk="}),
        ]
        for reply in replies:
            answer = reply.json()
            data = answer.get("data") or {}
            shape = {k: (v if k == "valid" else type(v).__name__) for k, v in data.items()}
            seen.append((reply.status_code, (shape, answer.get("errors"))))
    return seen


def test_transit_hmacs_are_answered_fast_and_the_same(pair: tuple[Server, Server]) -> None:
    lane, usual = pair
    before = lane_count(lane)
    assert hmac_exchange(lane) == hmac_exchange(usual)
    assert lane_count(lane) - before == 8  # every hmac and verify above: the key is known
    assert lane_count(usual) == 0
