"""Transit's batch encrypt in the common shape (``transit._column``) answers exactly as the
general path does.

Every batch goes through ``_encrypt.encrypt`` (the column first, the general path when the column
declines) and through the general path alone (``_Items``); the two answers must have the same
status and the same JSON bytes once the random parts are set aside (``request_id``, and each
ciphertext, which is opened instead: through Transit's decrypt and with ``cryptography`` and the
version's key material alone), and the same sealings and bytes counted per key version. A
single request (the column of one, without the plan: ``_items.single``) goes through the fast
answer's ``_encrypt.encrypt_now`` too, and pays the memory budget and takes its lease (off the
event loop when it may wait) as the plan does. Both providers.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sealflow import engine
from sealflow.engine import Algorithm
from sealflow.service.config import Settings
from sealflow.service.keystore import Lease, WouldWait, prepare
from sealflow.service.server._budget import MemoryBudget
from sealflow.service.server._logging import AccessRecord
from sealflow.service.server._startup import start_services
from sealflow.service.server._state import Services
from sealflow.service.server.errors import ApiError
from sealflow.service.server.transit import _column, _data, _encrypt, _items, _run, _wire
from tests.service.transit.tally import counting

KEYS = {
    "k": Algorithm.AES_256_GCM,
    "c": Algorithm.CHACHA20_POLY1305,
    "s": Algorithm.AES_128_GCM,
    "m": Algorithm.AES_256_GCM,  # versions 1 to 3, min_encryption_version 2
}


@pytest.fixture(scope="module", params=sorted(engine.PROVIDERS))
def svc(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Services]:
    data: Path = tmp_path_factory.mktemp("column")
    config = Settings(data_dir=data, provider=request.param, crypto_threads=1)
    prepare(config)
    services = start_services(config)
    for name, alg in KEYS.items():
        services.store.create_key(name, alg, False, None, None)
    for _ in range(2):
        services.store.rotate_key("k")  # versions 1 to 3
        services.store.rotate_key("m")
    services.store.configure("m", min_encryption_version=2)
    try:
        yield services
    finally:
        services.usage.close()
        services.crypto.close()
        services.store.close()
        engine.set_provider(None)


def joined(answer: tuple[int, Any]) -> tuple[int, bytes]:
    """An answer with its pieces (a batch's) joined, as the client reads it."""
    status, reply = answer
    return status, reply if isinstance(reply, bytes) else b"".join(reply)


def general(svc: Services, name: str, body: dict[str, Any]) -> tuple[int, bytes]:
    """The general path alone: every item checked, grouped and sealed on its own."""
    return by_plan(svc, name, orjson.dumps(body), columns=False)


def by_plan(svc: Services, name: str, raw: bytes, columns: bool = True) -> tuple[int, bytes]:
    """A body through the plan (``_encrypt.encryption``, ``_run``), whatever its shape."""
    with svc.budget.hold() as hold:
        plan = _encrypt.encryption(svc, name, raw, hold, AccessRecord(), columns=columns)
        return joined(_run.run_now(plan, hold, len(raw)))


def sealed_at_once(svc: Services, name: str, raw: bytes) -> tuple[Any, bytes]:
    """The sealing of a request of one group, and the answer it makes."""
    with svc.budget.hold() as hold:
        plan = _run.planned(_encrypt.encryption(svc, name, raw, hold, AccessRecord()))
        steps = list(plan.steps())
        assert len(steps) == 1
        sealing = steps[0][1]
        return sealing, sealing()[0]


def answer(how: Any, svc: Services, name: str, body: dict[str, Any]) -> tuple[Any, Counter[Any]]:
    counted, tally = counting(svc)
    try:
        status, raw = how(counted, name, body)
    except ApiError as exc:
        return ("error", exc.status, exc.message), tally.seen
    return (status, raw), tally.seen


def opened_both_ways(svc: Services, name: str, ciphertext: str, aad: str) -> bytes:
    """The plaintext of a Transit ciphertext: Transit's decrypt and cryptography must agree."""
    body = {"ciphertext": ciphertext}
    if aad:
        body["associated_data"] = aad
    with svc.budget.hold() as hold:
        decrypted = _data.decrypt(svc, name, orjson.dumps(body), hold, AccessRecord())
        status, raw = joined(asyncio.run(decrypted))
    assert status == 200
    via_transit = base64.b64decode(orjson.loads(raw)["data"]["plaintext"])
    version = int(ciphertext.split(":")[1][1:])
    material = svc.store.key_material(name, version)
    sealed = base64.b64decode(ciphertext.split(":", 2)[2], validate=True)
    aead = ChaCha20Poly1305 if KEYS[name] is Algorithm.CHACHA20_POLY1305 else AESGCM
    associated = base64.b64decode(aad) if aad else b""
    assert aead(material).decrypt(sealed[:12], sealed[12:], associated) == via_transit
    return via_transit


def comparable(svc: Services, name: str, body: dict[str, Any], raw: bytes) -> Any:
    """The answer with its random parts replaced: no request_id, each ciphertext opened."""
    assert orjson.dumps(orjson.loads(raw)) == raw  # orjson's own bytes, as the general path's
    answer = orjson.loads(raw)
    assert len(answer.pop("request_id")) == 36
    if body.get("batch_input") is None:  # a single request
        one = answer["data"]
        one["ciphertext"] = opened_both_ways(
            svc, name, one["ciphertext"], body.get("associated_data") or ""
        )
        return answer
    items = body["batch_input"]
    for i, result in enumerate(answer["data"]["batch_results"]):
        if "ciphertext" in result:
            aad = items[i].get("associated_data") or ""
            result["ciphertext"] = opened_both_ways(svc, name, result["ciphertext"], aad)
    return answer


COMPACT: dict[str, Any] = {"separators": (",", ":")}  # Go's encoding/json
SERIALIZATIONS: list[dict[str, Any]] = [{}, COMPACT, {"indent": 1}, {"separators": (", ", ":")}]


def production(svc: Services, name: str, raw: bytes) -> tuple[int, bytes]:
    """What the encrypt route does with a body."""
    with svc.budget.hold() as hold:
        return joined(asyncio.run(_encrypt.encrypt(svc, name, raw, hold, AccessRecord())))


def fast(svc: Services, name: str, raw: bytes) -> tuple[int, bytes]:
    """What the protocol's fast answer does with a (small) body."""
    return joined(_encrypt.encrypt_now(svc, name, raw, AccessRecord()))


def check_same(
    svc: Services, name: str, body: dict[str, Any], raw: bytes | None = None, now: bool = False
) -> Any:
    """The route's way (and, ``now``, the fast answer's) and the general path on one batch
    (raw: how it is serialized, by default as hvac sends it); the route's answer (parsed,
    random parts opened)."""
    raw = json.dumps(body).encode() if raw is None else raw
    theirs, their_counted = answer(general, svc, name, orjson.loads(raw))
    found = []
    for way in (production, fast) if now else (production,):
        ours, ours_counted = answer(lambda s, n, b, way=way: way(s, n, raw), svc, name, body)
        assert ours_counted == their_counted, way.__name__
        if ours[0] == "error":
            assert ours == theirs, way.__name__
            found.append(ours)
            continue
        assert ours[0] == theirs[0], way.__name__
        mine = comparable(svc, name, body, ours[1])
        assert mine == comparable(svc, name, body, theirs[1]), way.__name__
        found.append((ours[0], mine))
    return found[0]


def b64(n: int) -> str:
    return base64.b64encode(os.urandom(n)).decode()


def test_the_common_batch_takes_the_column(svc: Services) -> None:
    body = {"batch_input": [{"plaintext": b64(100)} for _ in range(1000)]}
    column = _column.column(body)
    assert column is not None
    assert column.count == 1000
    hows: list[dict[str, Any]] = [{}, COMPACT]
    for how in hows:  # hvac's serialization, and Go's (with its trailing newline)
        raw = json.dumps(body, **how).encode() + (b"\n" if how else b"")
        assert _column.from_body(raw) is not None
        counted, tally = counting(svc)
        sealing, rows = sealed_at_once(counted, "k", raw)  # read as a column, never parsed
        assert not isinstance(sealing, _encrypt._Items)
        assert len(orjson.loads(b"[" + rows + b"]")) == 1000
        assert tally.seen == {("k", 3, "sealings"): 1000, ("k", 3, "bytes"): 100_000}
        check_same(svc, "k", body, raw)
    assert column.references is None
    status, answered = check_same(svc, "k", body)
    assert status == 200
    results = answered["data"]["batch_results"]
    assert [base64.b64encode(r["ciphertext"]).decode() for r in results] == [
        item["plaintext"] for item in body["batch_input"]
    ]
    assert {r["key_version"] for r in results} == {3}
    # The column made the answer: one seal of 1,000 items counted once, as 1,000 sealings.
    counted, tally = counting(svc)
    assert _encrypt._by_column(counted, "k", column, {}) is not None
    assert tally.seen == {("k", 3, "sealings"): 1000, ("k", 3, "bytes"): 100_000}


@pytest.mark.parametrize("name", sorted(KEYS))
def test_shared_fields_and_references(svc: Services, name: str) -> None:
    aad = b64(9)
    body = {
        "batch_input": [
            {
                "plaintext": b64(i),
                "reference": f'r"{i}\\é\n',
                "key_version": 3 if name in ("k", "m") else 1,
                "associated_data": aad,
            }
            for i in range(50)
        ]
    }
    assert _column.column(body) is not None
    # A context is each item's to check (and a derived key's to use): item by item.
    with_context = {"batch_input": [{**item, "context": b64(3)} for item in body["batch_input"]]}
    assert _column.column(with_context) is None
    status, answered = check_same(svc, name, body)
    assert status == 200
    assert [r["reference"] for r in answered["data"]["batch_results"]] == [
        f'r"{i}\\é\n' for i in range(50)
    ]


def test_one_bad_item_answers_as_before(svc: Services) -> None:
    """Bad base64 in one item of 1,000: the column declines before counting anything, and
    the general path answers 400 with that item's error."""
    items = [{"plaintext": b64(100)} for _ in range(1000)]
    items[617]["plaintext"] = "not base64!"
    body = {"batch_input": items}
    column = _column.column(body)
    assert column is not None
    counted, tally = counting(svc)
    taken: dict[int, Lease] = {}
    assert _encrypt._by_column(counted, "k", column, taken) is None
    raw = json.dumps(body).encode()
    unparsed = _column.from_body(raw)
    assert unparsed is not None
    assert _encrypt._by_column(counted, "k", unparsed, taken) is None
    assert not tally.seen
    assert not taken
    status, answered = check_same(svc, "k", body, raw)
    assert status == 400
    results = answered["data"]["batch_results"]
    assert results[617] == {"error": "illegal base64 data at input byte 3", "reference": ""}
    assert sum("error" in r for r in results) == 1


GOOD = st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode())
ODD = st.sampled_from(
    ["", "YQ==\n", "YR==", "YQ", "!!!!", "é", "YQ==YQ==", "YW\r\nJj", None, 5, ["YQ=="]]
)
PLAINTEXTS = st.one_of(GOOD, ODD)
MISSING = object()
VERSIONS = st.sampled_from([MISSING, None, 0, 1, 3, 4, -1, "2", True, 1.0])
RESERVED = base64.b64encode(b"SFL1\x02\x02").decode()  # a native envelope's AAD: refused
AADS = st.sampled_from([MISSING, None, "", "YWFk", "!!", 7, RESERVED])
REFERENCES = st.sampled_from([MISSING, None, "", "a", 'q"\\', 3])


def item(plaintext: Any, version: Any, aad: Any, reference: Any) -> Any:
    entry = {"plaintext": plaintext}
    for field, value in (
        ("key_version", version),
        ("associated_data", aad),
        ("reference", reference),
    ):
        if value is not MISSING:
            entry[field] = value
    return entry


@st.composite
def batches(draw: st.DrawFn) -> dict[str, Any]:
    """Mostly batches the column may take (one version and AAD for all), some anything."""
    n = draw(st.integers(1, 12))
    if draw(st.booleans()):
        odd = draw(st.integers(0, 2)) == 0  # some odd values, else plausible ones
        version = draw(VERSIONS if odd else st.sampled_from([MISSING, None, 0, 1, 3, 4, -1]))
        aad = draw(AADS if odd else st.sampled_from([MISSING, None, "", "YWFk", "!!", RESERVED]))
        texts, references = (
            (PLAINTEXTS, REFERENCES) if odd else (GOOD, REFERENCES.filter(lambda r: r != 3))
        )
        items = [item(draw(texts), version, aad, draw(references)) for _ in range(n)]
    else:
        items = [draw(st.builds(item, PLAINTEXTS, VERSIONS, AADS, REFERENCES)) for _ in range(n)]
    if draw(st.integers(0, 19)) == 0:
        items[draw(st.integers(0, n - 1))] = draw(st.sampled_from([None, "x", [1], {}]))
    if draw(st.integers(0, 19)) == 0:
        for entry in items:
            if isinstance(entry, dict):
                entry.pop("plaintext", None)
    body: dict[str, Any] = {"batch_input": items}
    if draw(st.booleans()):
        body["partial_failure_response_code"] = draw(st.sampled_from([207, 0, "299"]))
    return body


@given(body=batches(), name=st.sampled_from(sorted(KEYS)), how=st.sampled_from(SERIALIZATIONS))
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_both_paths_answer_alike(
    svc: Services, body: dict[str, Any], name: str, how: dict[str, Any]
) -> None:
    column = _column.column(body)
    event("column" if column is not None else "not a column")
    if column is not None:
        counted = counting(svc)[0]
        seal = _encrypt._by_column(counted, name, column, {})
        event("sealed by the column" if seal is not None else "declined")
    raw = json.dumps(body, **how).encode()
    event("unparsed" if _column.from_body(raw) is not None else "parsed")
    check_same(svc, name, body, raw)


@st.composite
def singles(draw: st.DrawFn) -> dict[str, Any]:
    """A single request: mostly a plaintext alone or with a version and AAD, some anything."""
    odd = draw(st.integers(0, 2)) == 0
    body: dict[str, Any] = item(
        draw(PLAINTEXTS if odd else GOOD),
        draw(VERSIONS),
        draw(AADS if odd else st.sampled_from([MISSING, None, "", "YWFk", RESERVED])),
        draw(REFERENCES) if draw(st.integers(0, 4)) == 0 else MISSING,
    )
    if draw(st.integers(0, 4)) == 0:  # some with a JSON escape (json.dumps writes \u00e9)
        body["context"] = draw(st.sampled_from(["eA==", "é"]))
    if draw(st.integers(0, 9)) == 0:
        del body["plaintext"]
    if draw(st.integers(0, 9)) == 0:  # a single request all the same: read by the plan
        body["batch_input"] = None
    return body


@given(body=singles(), name=st.sampled_from(sorted(KEYS)), how=st.sampled_from(SERIALIZATIONS))
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_single_requests_answer_alike(
    svc: Services, body: dict[str, Any], name: str, how: dict[str, Any]
) -> None:
    """A single request of a plaintext is the column of one, and goes without the plan
    (``_items.single``) unless its bytes may hold a ``batch_input``; the answer, the route's
    and the fast answer's, is the general path's, counted alike, and so is every refusal."""
    raw = json.dumps(body, **how).encode()
    with svc.budget.hold() as hold:
        try:
            alone = _items.single(raw, hold) is not None
        except ApiError:
            alone = True  # refused as it is read, the same way on every path
    event("read as a single request" if alone else "read by the plan")
    assert alone or b"\\" in raw or "batch_input" in body
    column = _column.column(body)
    event("column of one" if column is not None else "not a column")
    if column is not None:
        assert column.single
        assert column.count == 1
        counted = counting(svc)[0]
        seal = _encrypt._by_column(counted, name, column, {})
        event("sealed by the column" if seal is not None else "declined")
    check_same(svc, name, body, raw, now=True)


def test_a_single_request_takes_from_the_memory_budget_as_a_batch_does(svc: Services) -> None:
    """Without the plan, a single request still pays the budget as the plan does: its
    parse before parsing, then the bound of its answer before any check (503 ``overloaded``
    past either); a body that does not parse is a 400 once its parse is paid for."""
    raw = json.dumps({"plaintext": b64(100)}).encode()
    cost, bound = _wire.parse_cost(raw), _run.answer_bound(len(raw), 1)
    bad = raw[:-1]  # not JSON: the same parse cost, almost
    unknown = ("absent", raw)  # refused by the checks, after both are paid
    cases = [
        (("k", raw), cost - 1, 503),
        (("k", raw), cost + bound - 1, 503),
        (("k", raw), cost + bound, 200),
        (unknown, cost + bound - 1, 503),
        (unknown, cost + bound, 400),
        (("k", bad), _wire.parse_cost(bad) - 1, 503),
        (("k", bad), _wire.parse_cost(bad), 400),
    ]
    for (name, body), limit, status in cases:
        tight = dataclasses.replace(svc, budget=MemoryBudget(limit))
        for way in (production, fast, by_plan):
            try:
                got = way(tight, name, body)[0]
            except ApiError as exc:
                got = exc.status
            assert got == status, (name, limit, way.__name__)
            assert tight.budget.used == 0  # all of it given back


def test_a_single_lease_that_may_wait_is_taken_off_the_event_loop(tmp_path: Path) -> None:
    """On the event loop (``UsageMeter.bind_loop``) a lease that needs the keystore raises
    ``WouldWait`` before anything is counted: the fast answer gives such a request up (the
    protocol then serves it through the route), and the route takes its lease in a thread. A
    key never sealed under holds nothing yet; a ``key_version`` other than the latest is
    reserved from the store each time."""
    config = Settings(data_dir=tmp_path, crypto_threads=1, provider="native")
    prepare(config)
    services = start_services(config)
    try:
        services.store.create_key("cold", Algorithm.AES_256_GCM, False, None, None)
        services.store.rotate_key("cold")  # versions 1 and 2
        plain = {"plaintext": b64(10)}
        older = {**plain, "key_version": 1}

        async def on_the_loop() -> None:
            services.usage.bind_loop()
            for body, version in ((plain, 2), (older, 1)):
                counted, tally = counting(services)
                raw = json.dumps(body).encode()
                with pytest.raises(WouldWait):
                    _encrypt.encrypt_now(counted, "cold", raw, AccessRecord())
                assert not tally.seen  # given up before counting
                with services.budget.hold() as hold:
                    status, _ = await _encrypt.encrypt(counted, "cold", raw, hold, AccessRecord())
                assert status == 200
                assert tally.seen == {
                    ("cold", version, "sealings"): 1,
                    ("cold", version, "bytes"): 10,
                }
            # The name spelled with an escape still asks for version 1 (JSON reads it so): the
            # lease is taken in a thread all the same, a single request or a batch.
            escaped = json.dumps(older).replace("key_version", "key\\u005fversion").encode()
            batch = b'{"batch_input": [%s, %s]}' % (escaped, escaped)
            for raw, sealings in ((escaped, 1), (batch, 2)):
                counted, tally = counting(services)
                with services.budget.hold() as hold:
                    status, _ = await _encrypt.encrypt(counted, "cold", raw, hold, AccessRecord())
                assert status == 200
                assert tally.seen[("cold", 1, "sealings")] == sealings
            # The latest is warm now (a block held): the fast answer serves it on the spot.
            warm = json.dumps(plain).encode()
            assert _encrypt.encrypt_now(services, "cold", warm, AccessRecord())[0] == 200

        asyncio.run(on_the_loop())
    finally:
        services.usage.close()
        services.crypto.close()
        services.store.close()
        engine.set_provider(None)


def test_a_single_plaintext_is_sealed_as_a_column_of_one(svc: Services) -> None:
    plaintext = b64(1024)
    body = {"plaintext": plaintext, "associated_data": "YWFk", "key_version": 2}
    counted, tally = counting(svc)
    sealing, raw = sealed_at_once(counted, "k", json.dumps(body).encode())
    assert not isinstance(sealing, _encrypt._Items)
    assert tally.seen == {("k", 2, "sealings"): 1, ("k", 2, "bytes"): 1024}
    data = orjson.loads(raw)["data"]
    assert list(data) == ["ciphertext", "key_version"]
    assert data["key_version"] == 2
    assert opened_both_ways(svc, "k", data["ciphertext"], "YWFk") == base64.b64decode(plaintext)
    # Anything beyond plaintext, key_version and associated_data goes the general way.
    assert _column.column({**body, "reference": "r"}) is None
    assert _column.column({**body, "key_version": True}) is None


def test_refusals_alike(svc: Services) -> None:
    refused: list[tuple[str, dict[str, Any]]] = [
        ("absent", {"batch_input": [{"plaintext": "YQ=="}]}),
        ("k", {"batch_input": []}),
        ("k", {"batch_input": {"plaintext": "YQ=="}}),
        ("k", {"batch_input": [{"plaintext": 1}, {"plaintext": "YQ=="}]}),
    ]
    for name, body in refused:
        assert check_same(svc, name, body)[0] == "error"


def test_from_body_reads_only_the_usual_serializations(svc: Services) -> None:
    head = b'{"batch_input":[{"plaintext":"'
    column = _column.from_body(head + b'YQ=="},{"plaintext":"YWI="}]}\n')
    assert column is not None
    records = engine.Records.from_base64(column.texts, column.count, column.sep)
    assert bytes(records.data) == b"aab"
    for raw in [
        head + b'YQ=="}]}' + b" " * 9,  # a long run of trailing whitespace: parsed instead
        b" " + head + b'YQ=="}]}',
        head + b'YQ=="}], "partial_failure_response_code": 207}',
        b'{"batch_input":[]}',
    ]:
        assert _column.from_body(raw) is None
    # Framed like a batch, but the decoder refuses what is between: escapes, other fields,
    # the other serialization's separator. Each is parsed and answered as before.
    for middle in [
        b"YQ\\u003d=",
        b'YQ==","reference":"r',
        b'YQ=="}, {"plaintext": "YQ==',
        b"YQ\\/=",
    ]:
        raw = head + middle + b'"}]}'
        column = _column.from_body(raw)
        assert column is not None
        assert _encrypt._by_column(svc, "k", column, {}) is None
        status, _ = production(svc, "k", raw)
        assert status == 200


def test_min_encryption_version_alike(svc: Services) -> None:
    """A key_version below the key's min_encryption_version: the column declines before
    counting, and each item gets Transit's error; the latest and allowed versions seal."""
    for version, sealed in ((1, False), (2, True), (0, True)):
        items = [{"plaintext": b64(10), "key_version": version} for _ in range(20)]
        body = {"batch_input": items}
        column = _column.column(body)
        assert column is not None
        counted, tally = counting(svc)
        assert (_encrypt._by_column(counted, "m", column, {}) is not None) is sealed
        assert bool(tally.seen) is sealed
        status, answered = check_same(svc, "m", body)
        results = answered["data"]["batch_results"]
        if sealed:
            assert status == 200
            assert {r["key_version"] for r in results} == {version or 3}
        else:
            assert status == 400
            assert {r["error"] for r in results} == {
                "requested version for encryption is less than the minimum encryption key version"
            }
