"""A batch read and answered group by group (``transit._groups``, ``_items.read``, ``_run``)
answers exactly as the same batch in one group, and refuses what it refuses before any sealing.

Groups are made small here (``GROUP_BYTES``, ``COLUMN_BYTES``, ``GROUP_ITEMS``) so that a batch
of a few items is many groups; the tests on a real server (test_batch_memory.py) send batches of
real size.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sealflow.engine import Algorithm
from sealflow.service.config import Settings
from sealflow.service.keystore import make_key_type, prepare
from sealflow.service.server._logging import AccessRecord
from sealflow.service.server._startup import start_services
from sealflow.service.server._state import Services
from sealflow.service.server.errors import ApiError
from sealflow.service.server.transit import _data, _encrypt, _groups, _items
from tests.service.transit.tally import counting

TINY = 64  # bytes of JSON per group: a few items each


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    data: Path = tmp_path_factory.mktemp("groups")
    config = Settings(data_dir=data, crypto_threads=1, max_batch_items=300)
    prepare(config)
    services = start_services(config)
    services.store.create_key("k", Algorithm.AES_256_GCM, False, None, None)
    services.store.rotate_key("k")  # versions 1 and 2
    services.store.create_key("kc", make_key_type("aes256-gcm96", 0, True, True))  # convergent
    try:
        yield services
    finally:
        services.usage.close()
        services.crypto.close()
        services.store.close()


def call(
    svc: Services,
    kind: str,
    raw: bytes,
    grouped: bool,
    log: AccessRecord | None = None,
    name: str = "k",
) -> tuple[Any, Counter[Any]]:
    """The route's operation on a body, in groups of ``TINY`` bytes or in one group: its
    status and parsed answer (or its refusal), and what it counted; what it noted for the
    access log and the audit record in ``log``."""
    operation = {"encrypt": _encrypt.encrypt, "decrypt": _data.decrypt, "rewrap": _data.rewrap}
    counted, tally = counting(svc)
    sizes = (TINY, TINY, 3) if grouped else (1 << 30, 1 << 30, 1 << 30)
    saved = _groups.GROUP_BYTES, _groups.COLUMN_BYTES, _items.GROUP_ITEMS
    _groups.GROUP_BYTES, _groups.COLUMN_BYTES, _items.GROUP_ITEMS = sizes
    try:
        with svc.budget.hold() as hold:
            answered = operation[kind](counted, name, raw, hold, log or AccessRecord())
            status, reply = asyncio.run(answered)
    except ApiError as exc:
        return ("error", exc.status, exc.message), tally.seen
    finally:
        _groups.GROUP_BYTES, _groups.COLUMN_BYTES, _items.GROUP_ITEMS = saved
    pieces = [reply] if isinstance(reply, bytes) else reply
    return (status, orjson.loads(b"".join(pieces))), tally.seen


def opened(svc: Services, result: dict[str, Any], aad: str) -> dict[str, Any]:
    """An encrypt's result with its ciphertext replaced by the plaintext it opens to."""
    if "ciphertext" not in result:
        return result
    body = {"ciphertext": result["ciphertext"], "associated_data": aad}
    status, answer = call(svc, "decrypt", orjson.dumps(body), grouped=False)[0]
    assert status == 200
    return {**result, "ciphertext": answer["data"]["plaintext"]}


def same(svc: Services, kind: str, body: dict[str, Any], how: dict[str, Any]) -> Any:
    """The answer of the batch in many groups and in one: equal but for the random parts."""
    raw = json.dumps(body, **how).encode()
    noted = [AccessRecord(aads=set(), contexts=set()) for _ in range(2)]  # audited
    many, counted_many = call(svc, kind, raw, grouped=True, log=noted[0])
    one, counted_one = call(svc, kind, raw, grouped=False, log=noted[1])
    assert counted_many == counted_one
    if many[0] == "error":
        assert many == one
        return many
    status, answer = many
    assert status == one[0]
    # The same versions, items, AADs and contexts noted whatever the groups.
    assert noted[0] == noted[1]
    entries = [item for item in body["batch_input"] if isinstance(item, dict)]
    assert noted[0].records == len(body["batch_input"])
    for name, values in (("associated_data", noted[0].aads), ("context", noted[0].contexts)):
        sent = [item.get(name) for item in entries]
        assert values == {value for value in sent if isinstance(value, str) and value}
    if kind == "encrypt":  # the versions it sealed under: those its results name
        results = answer["data"]["batch_results"]
        versions = sorted({r["key_version"] for r in results if "ciphertext" in r})
        expected = (versions[0], None) if len(versions) == 1 else (None, versions or None)
        assert (noted[0].version, noted[0].versions) == expected
    for found in (answer, one[1]):
        found.pop("request_id")
        results = found["data"].get("batch_results")
        if kind != "decrypt" and results is not None:
            items = body["batch_input"]
            aads = [i.get("associated_data") or "" if isinstance(i, dict) else "" for i in items]
            found["data"]["batch_results"] = [
                opened(svc, r, a) for r, a in zip(results, aads, strict=True)
            ]
    assert answer == one[1]
    return status, answer


def b64(n: int) -> str:
    return base64.b64encode(os.urandom(n)).decode()


TEXTS = st.one_of(
    st.binary(max_size=30).map(lambda b: base64.b64encode(b).decode()),
    st.sampled_from(["", "!!", "YQ", "YR==", None, 5]),
)
# References that hold what a cut looks for, and the key's name.
REFERENCES = st.sampled_from(["", "r", "},{", '"},{"', "}]", "batch_input", '}, "x": [', 7])
AADS = st.sampled_from([None, "", "YWFk", "YmJi", "!"])
CONTEXTS = st.sampled_from([None, "", "Y3R4", "ZGVm", 5, [1]])  # ignored, but audited
VERSIONS = st.sampled_from([None, 0, 1, 2, 3, "1", True])


@st.composite
def batches(draw: st.DrawFn, field: str) -> dict[str, Any]:
    n = draw(st.integers(1, 40))
    items: list[Any] = []
    for _ in range(n):
        item: dict[str, Any] = {field: draw(TEXTS)}
        for name, values in (
            ("reference", REFERENCES),
            ("associated_data", AADS),
            ("key_version", VERSIONS),
            ("context", CONTEXTS),
        ):
            if draw(st.integers(0, 2)) == 0:
                item[name] = draw(values)
        items.append(item)
    if draw(st.integers(0, 9)) == 0:
        items[draw(st.integers(0, n - 1))] = draw(st.sampled_from(["x", [1], None]))
    body: dict[str, Any] = {"batch_input": items}
    if draw(st.booleans()):
        body["partial_failure_response_code"] = draw(st.sampled_from([207, 0, "299"]))
    if draw(st.booleans()):
        body = dict(reversed(body.items()))  # the array last, or first
    return body


SERIALIZATIONS: list[dict[str, Any]] = [{}, {"separators": (",", ":")}, {"indent": 2}]


@given(body=batches("plaintext"), how=st.sampled_from(SERIALIZATIONS))
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_an_encrypt_in_groups_answers_as_in_one(
    svc: Services, body: dict[str, Any], how: dict[str, Any]
) -> None:
    found = _groups.split(json.dumps(body, **how).encode())
    event("cut" if found is not None else "parsed whole")
    same(svc, "encrypt", body, how)


def sealed(svc: Services, texts: list[str], aad: str = "") -> list[str]:
    items = [{"plaintext": t, "associated_data": aad} for t in texts]
    status, answer = call(svc, "encrypt", orjson.dumps({"batch_input": items}), False)[0]
    assert status == 200
    return [r["ciphertext"] for r in answer["data"]["batch_results"]]


@given(body=batches("ciphertext"), how=st.sampled_from(SERIALIZATIONS))
@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_a_decrypt_and_a_rewrap_in_groups_answer_as_in_one(
    svc: Services, body: dict[str, Any], how: dict[str, Any]
) -> None:
    # Real ciphertexts for most items (under the item's AAD where it is valid base64).
    for entry in body["batch_input"]:
        if isinstance(entry, dict) and isinstance(entry.get("ciphertext"), str):
            aad = entry.get("associated_data")
            usable = aad if isinstance(aad, str) and aad != "!" else ""
            entry["ciphertext"] = sealed(svc, [b64(5)], usable)[0]
    same(svc, "decrypt", body, how)
    same(svc, "rewrap", body, how)


def test_a_problem_in_the_last_group_refuses_the_whole_batch_before_any_sealing(
    svc: Services,
) -> None:
    items: list[Any] = [{"plaintext": b64(10)} for _ in range(50)]
    items[47] = {"plaintext": 5}
    raw = orjson.dumps({"batch_input": items})
    assert _groups.split(raw) is not None
    refused, counted = call(svc, "encrypt", raw, grouped=True)
    assert refused == (
        "error",
        400,
        "failed to parse batch input: '[47].plaintext' expected type 'string', got "
        "unconvertible type 'json.Number'",
    )
    assert not counted
    items[47] = "x"
    refused, counted = call(svc, "encrypt", orjson.dumps({"batch_input": items}), grouped=True)
    message = "failed to parse batch input: [47] expected a map, got 'string'"
    assert refused == ("error", 400, message)
    assert not counted


def test_bad_json_at_the_end_is_refused_as_a_whole_parse_refuses_it(svc: Services) -> None:
    raw = orjson.dumps({"batch_input": [{"plaintext": b64(10)} for _ in range(50)]})[:-3]
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        expected = f"failed to parse JSON input: {exc.msg}"
    refused, counted = call(svc, "encrypt", raw, grouped=True)
    assert refused == ("error", 400, expected)
    assert not counted


def test_item_numbers_in_messages_count_from_the_first_group(svc: Services) -> None:
    items = [{"plaintext": b64(10), "associated_data": "YWFk"} for _ in range(40)]
    items[33]["associated_data"] = "!"
    status, answer = call(svc, "encrypt", orjson.dumps({"batch_input": items}), True)[0]
    assert status == 400
    results = answer["data"]["batch_results"]
    assert results[33] == {
        "error": "'[33].associated_data' illegal base64 data at input byte 0",
        "reference": "",
    }
    assert sum("error" in r for r in results) == 1


@pytest.mark.parametrize("kind", ["encrypt", "decrypt", "rewrap"])
@pytest.mark.parametrize("grouped", [True, False])
def test_more_items_than_max_batch_items_are_refused_before_any_sealing(
    svc: Services, kind: str, grouped: bool
) -> None:
    field = "plaintext" if kind == "encrypt" else "ciphertext"
    text = b64(4) if kind == "encrypt" else sealed(svc, [b64(4)])[0]
    for n, refused in ((300, False), (301, True)):
        for raw in (
            orjson.dumps({"batch_input": [{field: text}] * n}),  # Go's compact serialization
            json.dumps({"batch_input": [{field: text, "reference": "r"}] * n}).encode(),
        ):
            answer, counted = call(svc, kind, raw, grouped)
            if refused:
                message = "failed to parse batch input: more than 300 items in one request"
                assert answer == ("error", 400, message)
                assert not counted
            else:
                assert answer[0] == 200


def test_a_batch_is_answered_group_by_group_in_pieces(svc: Services) -> None:
    """Each group's results are a piece of the answer, between the envelope's head and tail."""
    items = [{"plaintext": b64(10), "reference": f"r{i}"} for i in range(50)]
    saved = _groups.GROUP_BYTES
    _groups.GROUP_BYTES = TINY
    try:
        with svc.budget.hold() as hold:
            raw = orjson.dumps({"batch_input": items})
            status, reply = asyncio.run(_encrypt.encrypt(svc, "k", raw, hold, AccessRecord()))
    finally:
        _groups.GROUP_BYTES = saved
    assert status == 200
    assert isinstance(reply, list)
    assert len(reply) > 10  # head, tail, and a piece (and a comma) per group of a few items
    results = orjson.loads(b"".join(reply))["data"]["batch_results"]
    assert [r["reference"] for r in results] == [f"r{i}" for i in range(50)]


def test_a_convergent_batch_in_groups_seals_and_opens_as_in_one(svc: Services) -> None:
    """Each item under its own context's key, whatever the groups: a convergent key's answer is
    the same bytes in many groups and in one, and opens item by item; a context missing from
    an item of a later group refuses the whole batch before anything is counted."""
    contexts = [base64.b64encode(b"tenant-%d" % (i % 3)).decode() for i in range(40)]
    items = [{"plaintext": b64(i % 5), "context": c} for i, c in enumerate(contexts)]
    raw = json.dumps({"batch_input": items}).encode()
    (status, many), _ = call(svc, "encrypt", raw, grouped=True, name="kc")
    (_, one), counted = call(svc, "encrypt", raw, grouped=False, name="kc")
    assert status == 200
    sealed = [r["ciphertext"] for r in many["data"]["batch_results"]]
    assert sealed == [r["ciphertext"] for r in one["data"]["batch_results"]]
    assert counted[("kc", 1, "sealings")] == 40
    back = [{"ciphertext": c, "context": x} for c, x in zip(sealed, contexts, strict=True)]
    raw = json.dumps({"batch_input": back}).encode()
    (status, opened), _ = call(svc, "decrypt", raw, grouped=True, name="kc")
    assert [r["plaintext"] for r in opened["data"]["batch_results"]] == [
        item["plaintext"] for item in items
    ]
    raw = json.dumps({"batch_input": [*items, {"plaintext": b64(1)}]}).encode()
    for grouped in (True, False):
        refused, counted = call(svc, "encrypt", raw, grouped, name="kc")
        words = "context should be set either in all the request blocks or in none"
        assert refused == ("error", 400, words)
        assert not counted
