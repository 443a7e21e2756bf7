"""Transit batches on a real server: memory a small multiple of the body, paid from the
buffered-bytes budget, and ``max_batch_items`` (bounds on memory and counts, not timings).

The bodies are the issue's shape (references, two associated_data values: the general path,
item by item). The server's peak resident size is read from the kernel (VmHWM, reset before
each measure), so a peak between two samples is not missed.
"""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson

from tests.service.conftest import Server

MiB = 1 << 20
ITEMS = 200_000  # about 17 MB of JSON: each item about 86 bytes
MakeServer = Callable[..., Server]


def batch(n: int, start: int = 0) -> list[dict[str, str]]:
    return [
        {
            "plaintext": base64.b64encode(os.urandom(16)).decode(),
            "reference": f"ref-{i}",
            "associated_data": "YWFk" if i % 2 else "YmJi",
        }
        for i in range(start, start + n)
    ]


def peak_from_here(srv: Server) -> int:
    """The server's resident size now, its high-water mark reset to it (proc(5), clear_refs)."""
    Path(f"/proc/{srv.proc.pid}/clear_refs").write_text("5")
    return srv.status("VmRSS")


def transit(srv: Server) -> httpx.Client:
    return httpx.Client(base_url=srv.url, headers={"x-vault-token": srv.token}, timeout=300)


def warm(client: httpx.Client) -> None:
    """Code loaded and pools filled before anything is measured."""
    client.post("/v1/transit/keys/k").raise_for_status()
    raw = orjson.dumps({"batch_input": batch(20_000)})
    assert client.post("/v1/transit/encrypt/k", content=raw).status_code == 200


def test_a_large_batch_encrypt_and_its_decrypt_take_a_small_multiple_of_the_body(
    make_server: MakeServer,
) -> None:
    srv = make_server()
    with transit(srv) as client:
        warm(client)
        items = batch(ITEMS)
        raw = orjson.dumps({"batch_input": items})
        before = peak_from_here(srv)
        r = client.post("/v1/transit/encrypt/k", content=raw)
        grew = srv.status("VmHWM") - before
        assert r.status_code == 200
        results = r.json()["data"]["batch_results"]
        assert [x["reference"] for x in results] == [i["reference"] for i in items]
        # Parsed whole and answered item by item, it took 17 times the body (issue 24).
        assert grew < 4 * len(raw), f"{grew / MiB:.0f} MiB for a {len(raw) / MiB:.0f} MiB body"

        back = [
            {"ciphertext": x["ciphertext"], "associated_data": i["associated_data"]}
            for x, i in zip(results, items, strict=True)
        ]
        del results, r
        raw = orjson.dumps({"batch_input": back})
        before = peak_from_here(srv)
        r = client.post("/v1/transit/decrypt/k", content=raw)
        grew = srv.status("VmHWM") - before
        assert r.status_code == 200
        opened = [x["plaintext"] for x in r.json()["data"]["batch_results"]]
        assert opened == [i["plaintext"] for i in items]
        assert grew < 4 * len(raw), f"{grew / MiB:.0f} MiB for a {len(raw) / MiB:.0f} MiB body"


def test_concurrent_batches_take_a_small_multiple_of_what_they_send(
    make_server: MakeServer,
) -> None:
    srv = make_server()
    with transit(srv) as client:
        warm(client)
    bodies = [orjson.dumps({"batch_input": batch(ITEMS // 2, i * ITEMS)}) for i in range(3)]
    statuses: list[int] = []

    def send(raw: bytes) -> None:
        with transit(srv) as client:
            statuses.append(client.post("/v1/transit/encrypt/k", content=raw).status_code)

    before = peak_from_here(srv)
    senders = [threading.Thread(target=send, args=(raw,)) for raw in bodies]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()
    grew = srv.status("VmHWM") - before
    assert statuses == [200, 200, 200]
    sent = sum(map(len, bodies))
    assert grew < 4 * sent, f"{grew / MiB:.0f} MiB for {sent / MiB:.0f} MiB sent"


def test_batches_are_paid_from_the_buffered_bytes_budget(make_server: MakeServer) -> None:
    srv = make_server(max_buffered_bytes=24 * MiB)
    with transit(srv) as client:
        client.post("/v1/transit/keys/k").raise_for_status()
        big = orjson.dumps({"batch_input": batch(ITEMS // 2)})  # 8.6 MB, answered in 12
        r = client.post("/v1/transit/encrypt/k", content=big)
        assert r.status_code == 503
        assert r.json() == {"errors": ["too many concurrent requests; retry later"]}
        small = orjson.dumps({"batch_input": batch(1000)})
        assert client.post("/v1/transit/encrypt/k", content=small).status_code == 200
        # Paid back at the end of each request: the same small batch again, and again.
        for _ in range(3):
            assert client.post("/v1/transit/encrypt/k", content=small).status_code == 200


def usage(client: httpx.Client) -> Any:
    return client.get("/v1/transit/keys/k").json()["data"]["sealflow_usage"]["versions"]


def test_more_items_than_max_batch_items_are_refused_in_vaults_shape(
    make_server: MakeServer,
) -> None:
    srv = make_server(max_batch_items=1000)
    with transit(srv) as client:
        client.post("/v1/transit/keys/k").raise_for_status()
        counted = usage(client)
        too_many = [{"plaintext": "YWJj"}] * 1001
        for raw in (
            orjson.dumps({"batch_input": too_many}),  # the unparsed column's serialization
            orjson.dumps({"batch_input": batch(1001)}),
        ):
            r = client.post("/v1/transit/encrypt/k", content=raw)
            assert r.status_code == 400
            assert r.json() == {
                "errors": ["failed to parse batch input: more than 1000 items in one request"]
            }
        assert usage(client) == counted
        sealed = client.post("/v1/transit/encrypt/k", json={"batch_input": too_many[:1000]})
        assert sealed.status_code == 200
        back = [{"ciphertext": x["ciphertext"]} for x in sealed.json()["data"]["batch_results"]]
        for route in ("decrypt", "rewrap"):
            r = client.post(f"/v1/transit/{route}/k", json={"batch_input": back + back[:1]})
            assert r.status_code == 400
            assert r.json()["errors"] == [
                "failed to parse batch input: more than 1000 items in one request"
            ]
            assert client.post(f"/v1/transit/{route}/k", json={"batch_input": back}).is_success


def test_hmac_and_verify_batches_are_bounded_by_max_batch_items(make_server: MakeServer) -> None:
    """``hmac`` and ``verify`` batches: at most ``max_batch_items`` items, as every Transit
    batch; one more is refused whole in Vault's shape, on the fast answer and the route alike
    (a small body and a body above what the protocol answers itself)."""
    srv = make_server(max_batch_items=1000)
    with transit(srv) as client:
        client.post("/v1/transit/keys/h", json={"type": "hmac", "key_size": 32}).raise_for_status()
        words = ["failed to parse batch input: more than 1000 items in one request"]
        for pad in ("", "A" * 100):
            item = {"input": "YWJj", "reference": pad}
            r = client.post("/v1/transit/hmac/h", json={"batch_input": [item] * 1001})
            assert (r.status_code, r.json().get("errors")) == (400, words)
            made = client.post("/v1/transit/hmac/h", json={"batch_input": [item] * 1000})
            assert made.status_code == 200
            tag = made.json()["data"]["batch_results"][0]["hmac"]
            check = {"input": "YWJj", "hmac": tag, "reference": pad}
            r = client.post("/v1/transit/verify/h", json={"batch_input": [check] * 1001})
            assert (r.status_code, r.json().get("errors")) == (400, words)
            ok = client.post("/v1/transit/verify/h", json={"batch_input": [check] * 1000})
            assert all(row["valid"] for row in ok.json()["data"]["batch_results"])
