"""``max_encryptions`` on the native data routes, against a real server: every sealing
(single-shot, stream, each record of ``mode=records``) is leased by the one usage rule, so a
version seals exactly its limit and the key then rotates once (docs/OPERATIONS.md, Usage
limits)."""

from __future__ import annotations

import os
import uuid

import httpx
import pytest

from sealflow.service.envelope import parse, prefix_length
from tests.service.server.data.test_records import OK, open_records, seal

LIMIT = 10


def limited_key(client: httpx.Client, algorithm: str = "aes-256-gcm") -> str:
    name = f"lim-{uuid.uuid4().hex[:8]}"
    body = {"name": name, "algorithm": algorithm, "max_encryptions": LIMIT}
    assert client.post("/v1/keys", json=body).status_code == 201
    return name


def version_of(envelope: bytes) -> int:
    n = prefix_length(envelope)
    assert n is not None
    return parse(envelope[:n]).version


def counted(client: httpx.Client, name: str) -> dict[int, int]:
    """Sealings counted per version, as the key's metadata shows them."""
    info = client.get(f"/v1/keys/{name}").json()
    return {v["version"]: v["encryptions"] for v in info["versions"]}


@pytest.mark.parametrize("mode", ["single", "stream"])
def test_a_version_seals_exactly_max_encryptions_then_the_key_rotates_once(
    client: httpx.Client, mode: str
) -> None:
    name = limited_key(client, "chacha20-poly1305" if mode == "stream" else "aes-128-gcm")
    envelopes = []
    for i in range(LIMIT + 5):
        r = client.post(f"/v1/keys/{name}/encrypt?mode={mode}", content=b"%d" % i)
        assert r.status_code == 200, r.text
        envelopes.append(r.content)
    assert [version_of(e) for e in envelopes] == [1] * LIMIT + [2] * 5
    assert counted(client, name) == {1: LIMIT, 2: 5}
    for i in (0, LIMIT - 1, LIMIT, LIMIT + 4):
        assert client.post("/v1/decrypt", content=envelopes[i]).content == b"%d" % i


def test_records_seal_exactly_max_encryptions_per_version(client: httpx.Client) -> None:
    """Batches of 4 records under a limit of 10: the third batch is split, its first two
    records under version 1 and the others under version 2 (each record is an envelope of its
    own); before, every record of a batch was sealed under the version the request began
    with, past its limit."""
    name = limited_key(client)
    batches = [[os.urandom(20) for _ in range(4)] for _ in range(4)]
    envelopes = [e for records in batches for e in seal(client, name, records)]
    assert [version_of(e) for e in envelopes] == [1] * LIMIT + [2] * 6
    assert counted(client, name) == {1: LIMIT, 2: 6}
    opened = open_records(client, f"/v1/keys/{name}/decrypt", envelopes)
    assert opened == [(OK, r) for records in batches for r in records]
    # A batch larger than a version's whole limit goes on under as many versions as it needs.
    many = [b"%d" % i for i in range(20)]
    versions = [version_of(e) for e in seal(client, name, many)]
    assert versions == [2] * 4 + [3] * LIMIT + [4] * 6
    assert counted(client, name) == {1: LIMIT, 2: LIMIT, 3: LIMIT, 4: 6}


def test_an_empty_records_request_counts_nothing(client: httpx.Client) -> None:
    name = limited_key(client)
    assert seal(client, name, []) == []
    assert counted(client, name) == {1: 0}
