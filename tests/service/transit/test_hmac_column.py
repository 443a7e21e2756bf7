"""Transit ``hmac`` batches as one column (``_hmac_column``, issue 28): the same answer as
OpenBao item for item, whichever way the batch comes in (the usual serializations unparsed,
a parsed batch with references, a batch with one item the column cannot take), for every
digest (tags whose size leaves 0, 1 or 2 bytes over a multiple of 3: the padding of the joint
base64), at the sizes where the column's edges are (one item, empty inputs, exactly
``max_batch_items`` and one more)."""

from __future__ import annotations

import base64
import hmac
import json
import os
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest

from sealflow.service.server.transit import _hmac_column
from tests.service.byok import wrap
from tests.service.conftest import Server
from tests.service.transit.conftest import Bao, unique

MakeServer = Callable[..., Server]
# OpenBao's names and hashlib's, with tag sizes 20, 28, 32, 48 and 64 (size % 3: 2, 1, 2, 0, 1).
DIGESTS = {
    "sha1": "sha1",
    "sha2-224": "sha224",
    "sha2-256": "sha256",
    "sha2-384": "sha384",
    "sha2-512": "sha512",
    "sha3-224": "sha3_224",
    "sha3-512": "sha3_512",
}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _post(url: str, token: str, path: str, raw: bytes) -> httpx.Response:
    headers = {"X-Vault-Token": token, "Content-Type": "application/json"}
    return httpx.post(f"{url}/v1/transit/{path}", content=raw, headers=headers, timeout=60)


def _import(url: str, token: str, name: str, material: bytes) -> None:
    headers = {"X-Vault-Token": token}
    pem = httpx.get(f"{url}/v1/transit/wrapping_key", headers=headers).json()["data"]
    body = {"ciphertext": wrap(pem["public_key"], material), "type": "hmac"}
    r = httpx.post(f"{url}/v1/transit/keys/{name}/import", json=body, headers=headers)
    assert r.is_success, r.text


def _want(material: bytes, values: list[bytes], digest: str, refs: list[str] | None) -> list[Any]:
    """Each row as OpenBao writes it, computed here from the material."""
    return [
        {
            "hmac": "vault:v1:" + b64(hmac.digest(material, value, DIGESTS[digest])),
            "reference": refs[i] if refs else "",
        }
        for i, value in enumerate(values)
    ]


@pytest.mark.parametrize("digest", list(DIGESTS))
def test_every_serialization_answers_as_openbao_item_for_item(
    server: Server, bao: Bao, digest: str
) -> None:
    """Go's compact JSON and ``json.dumps``'s (read unparsed), references (parsed, a column),
    and one item of non-canonical base64 (Go's lenient decoding: item by item) give the rows
    OpenBao gives, and the rows the material gives."""
    name, material = unique("hc"), os.urandom(32)
    for url, token in ((server.url, server.token), (bao.url, bao.token)):
        _import(url, token, name, material)
    values = [os.urandom(n % 41) for n in range(120)]  # empty inputs among them
    items: list[dict[str, str]] = [{"input": b64(v)} for v in values]
    refs = [f'ref {i} "q" é' for i in range(len(values))]
    referenced = [{**it, "reference": r} for it, r in zip(items, refs, strict=True)]
    lenient = [*items[:-1], {"input": "QR=="}]  # "A" with nonzero trailing bits: Go takes it
    bodies = {
        "compact": (orjson.dumps({"batch_input": items}), None),
        "json.dumps": (json.dumps({"batch_input": items}).encode(), None),
        "references": (json.dumps({"batch_input": referenced}).encode(), refs),
        "lenient": (json.dumps({"batch_input": lenient}).encode(), None),
    }
    # The ways in: unparsed, parsed into a column, item by item.
    assert _hmac_column.from_body(bodies["compact"][0]) is not None
    assert _hmac_column.from_body(bodies["json.dumps"][0]) is not None
    assert _hmac_column.from_items(referenced) is not None
    assert _hmac_column.from_items(lenient) is None
    for form, (raw, expect_refs) in bodies.items():
        ours = _post(server.url, server.token, f"hmac/{name}/{digest}", raw)
        theirs = _post(bao.url, bao.token, f"hmac/{name}/{digest}", raw)
        assert ours.status_code == theirs.status_code == 200, (form, ours.text, theirs.text)
        rows = ours.json()["data"]["batch_results"]
        assert rows == theirs.json()["data"]["batch_results"], form
        shown = [*values[:-1], b"A"] if form == "lenient" else values
        assert rows == _want(material, shown, digest, expect_refs), form


def test_one_item_and_empty_inputs(server: Server, bao: Bao) -> None:
    """A batch of one item, of one empty input, and of empty inputs only, in both
    serializations: OpenBao's rows."""
    name, material = unique("hc1"), os.urandom(32)
    for url, token in ((server.url, server.token), (bao.url, bao.token)):
        _import(url, token, name, material)
    for values in ([b"x"], [b""], [b"", b""], [b"", b"ab", b""]):
        batch = {"batch_input": [{"input": b64(v)} for v in values]}
        for raw in (orjson.dumps(batch), json.dumps(batch).encode() + b"\n"):
            ours = _post(server.url, server.token, f"hmac/{name}", raw)
            theirs = _post(bao.url, bao.token, f"hmac/{name}", raw)
            assert ours.json()["data"] == theirs.json()["data"]
            assert ours.json()["data"]["batch_results"] == _want(material, values, "sha2-256", None)


def test_an_unparsed_batch_is_bounded_by_max_batch_items(make_server: MakeServer) -> None:
    """The unparsed column is counted before any HMAC: one item more than ``max_batch_items``
    is refused whole in Vault's words, in both serializations, on the fast answer (a small
    body) and the route (a large one); exactly the limit is answered."""
    srv = make_server(max_batch_items=1000)
    headers = {"X-Vault-Token": srv.token}
    r = httpx.post(
        f"{srv.url}/v1/transit/keys/h", json={"type": "hmac", "key_size": 32}, headers=headers
    )
    assert r.is_success, r.text
    words = ["failed to parse batch input: more than 1000 items in one request"]
    for value in (b"", os.urandom(100)):  # bodies of about 20 KB and 150 KB
        for dump in (orjson.dumps, _dumps):
            over = dump({"batch_input": [{"input": b64(value)}] * 1001})
            r = _post(srv.url, srv.token, "hmac/h", over)
            assert (r.status_code, r.json().get("errors")) == (400, words)
            item = {"input": b64(value)}
            r = _post(srv.url, srv.token, "hmac/h", dump({"batch_input": [item]}))
            one = r.json()["data"]["batch_results"][0]
            r = _post(srv.url, srv.token, "hmac/h", dump({"batch_input": [item] * 1000}))
            assert r.status_code == 200
            assert r.json()["data"]["batch_results"] == [one] * 1000


def _dumps(body: Any) -> bytes:
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    "batch",
    [
        [{"input": "QR=="}],  # canonical base64 only: Go's lenient decoding goes item by item
        [{"input": "AA==\nAA=="}],  # a separator inside a text
        [{"input": "AA=="}, {"reference": "no input"}],
        [{"input": 5}],
        [{"input": "AA==", "reference": 5}],
        ["AA=="],
        [{"input": "é"}],
    ],
)
def test_what_the_column_does_not_take(batch: list[Any]) -> None:
    """Any batch but the common shape is None here: the item path words its problems."""
    assert _hmac_column.from_items(batch) is None
    assert _hmac_column.from_body(json.dumps({"batch_input": batch}).encode()) is None


def test_the_unparsed_way_takes_only_the_usual_bytes() -> None:
    """A body with anything between the fixed bytes (a space, another field, an escape) is not
    read unparsed; the usual ones are, trailing newline and all."""
    usual = json.dumps({"batch_input": [{"input": "YWJj"}, {"input": ""}]})
    column = _hmac_column.from_body(usual.encode() + b"\n")
    assert column is not None
    assert (bytes(column.records.data), list(column.records.lengths)) == (b"abc", [3, 0])
    for other in (
        usual.replace('"input": "YWJj"', '"input":  "YWJj"'),
        usual.replace('{"input": ""}', '{"input": "", "reference": "r"}'),
        usual.replace("YWJj", "YW\\u0042j"),
        '{"key_version": 1, ' + usual[1:],
    ):
        assert _hmac_column.from_body(other.encode()) is None
