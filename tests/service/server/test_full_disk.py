"""A spool disk that fills up: 507 before the answer starts, the space freed, and the next
request works (issue 24, item 8). The disk is a real 64 MiB tmpfs as the server's TMPDIR."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests import tmpfs
from tests.service.conftest import Server

MakeServer = Callable[..., Server]
MiB = 1 << 20


@pytest.fixture
def small_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A 64 MiB tmpfs, the TMPDIR of the servers the test starts after asking for it (their
    fixture stops them first: the disk is unmounted once nothing holds a file there)."""
    with tmpfs.mounted(tmp_path / "tmpfs", 64 * MiB) as where:
        monkeypatch.setenv("TMPDIR", str(where))
        yield where


def test_an_encrypt_larger_than_the_spool_disk_is_507_and_the_next_one_works(
    small_disk: Path, make_server: MakeServer
) -> None:
    srv = make_server()
    data = os.urandom(100 * MiB)
    with srv.client() as c:
        refused = c.post("/v1/keys/default/encrypt", content=data)
        assert refused.status_code == 507
        assert refused.json()["error"]["code"] == "insufficient_storage"
        # The spool file was closed before the answer: what it held is free again (df).
        assert tmpfs.used(small_disk) < MiB
        # The same connection, the same disk: a body that fits is spooled and answered.
        part = data[: 24 * MiB]
        sealed = c.post("/v1/keys/default/encrypt", content=part)
        assert sealed.status_code == 200
        opened = c.post("/v1/decrypt", content=sealed.content)
        assert opened.status_code == 200
        assert hashlib.sha256(opened.content).digest() == hashlib.sha256(part).digest()
    assert tmpfs.used(small_disk) < MiB
    scrape = httpx.get(srv.url + "/metrics").text
    assert "sealflow_spool_disk_full_total 1.0" in scrape.splitlines()
    srv.stop()
    encrypts = [e for e in srv.access() if e["route"].endswith("/encrypt")]
    assert [(e["status"], e.get("error")) for e in encrypts] == [
        (507, "insufficient_storage"),
        (200, None),
    ]


def test_a_stream_decrypt_larger_than_the_spool_disk_is_507_and_the_next_one_works(
    small_disk: Path, make_server: MakeServer
) -> None:
    # The two-pass decrypt spools the envelope it authenticates: the same disk fills.
    srv = make_server()
    data = os.urandom(100 * MiB)
    with srv.post("/v1/keys/default/encrypt", [data], len(data), {"Sealflow-Duplex": "1"}) as reply:
        assert reply.status == 200
        envelope = reply.read()
    with srv.client() as c:
        refused = c.post("/v1/decrypt", content=envelope)
        assert refused.status_code == 507
        assert refused.json()["error"]["code"] == "insufficient_storage"
        assert tmpfs.used(small_disk) < MiB
        small = c.post("/v1/keys/default/encrypt", content=data[: 8 * MiB])
        assert small.status_code == 200
        opened = c.post("/v1/decrypt", content=small.content)
        assert opened.status_code == 200
        assert opened.content == data[: 8 * MiB]
