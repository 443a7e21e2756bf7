"""Three ``sealflow serve`` replicas (own data dirs and ports) on one real PostgreSQL keystore:
what one writes the others use within a second, concurrent rotations stay contiguous, a killed
replica loses nothing, and an outage of the database is survived."""

from __future__ import annotations

import base64
import functools
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.postgres import Cluster, start_cluster
from tests.service.conftest import SEALFLOW, Server, start_server

ROOT_TOKEN = base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")


def eventually(check: Callable[[], bool], within: float = 1.0) -> float:
    """Seconds until ``check()`` held; fails if it did not within ``within`` seconds."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < within, "not within the time allowed"
        time.sleep(0.01)
    return time.monotonic() - start


def start_replicas(
    folder: Path, url: str, master_key: str, n: int = 3, **settings: object
) -> list[Server]:
    replicas = []
    for i in range(n):
        srv = start_server(
            folder / f"replica{i}",
            keystore_url=url,
            master_key=master_key,
            root_token=ROOT_TOKEN,
            **settings,
        )
        srv.token = ROOT_TOKEN
        srv.env.update(
            SEALFLOW_KEYSTORE_URL=url,
            SEALFLOW_MASTER_KEY=master_key,
            SEALFLOW_DATA_DIR=str(srv.data_dir),
        )
        replicas.append(srv)
    return replicas


@pytest.fixture(scope="module")
def replicas(postgres: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Server]]:
    master = base64.b64encode(os.urandom(32)).decode()
    started = start_replicas(tmp_path_factory.mktemp("replicas"), postgres.new_database(), master)
    try:
        yield started
    finally:
        for srv in started:
            srv.stop()


def version_of(envelope: bytes) -> int:
    assert envelope[:4] == b"SFL1"
    return int.from_bytes(envelope[6:10], "big")


def encrypt(srv: Server, key: str, body: bytes = b"x" * 100) -> bytes:
    with srv.client() as c:
        r = c.post(f"/v1/keys/{key}/encrypt?mode=single", content=body)
        r.raise_for_status()
        return r.content


def create_key(srv: Server, name: str) -> None:
    with srv.client() as c:
        c.post("/v1/keys", json={"name": name, "algorithm": "aes-256-gcm"}).raise_for_status()


def test_a_rotation_on_one_replica_is_used_by_another_within_a_second(
    replicas: list[Server],
) -> None:
    a, b, _ = replicas
    create_key(a, "orders")
    eventually(lambda: httpx_status(b, "/v1/keys/orders") == 200)
    assert version_of(encrypt(b, "orders")) == 1
    with a.client() as c:
        assert c.post("/v1/keys/orders/rotate").json()["latest"] == 2
    eventually(lambda: version_of(encrypt(b, "orders")) == 2)


def test_a_key_deleted_through_one_replica_is_gone_on_another_within_a_second(
    replicas: list[Server],
) -> None:
    """Transit's two-step deletion on replica a; replica c, which had the key and its material
    cached, stops using it within a second, and a new key of the same name is a new key there
    (what the old one sealed does not open under it)."""
    a, _, c = replicas
    vault = {"X-Vault-Token": ROOT_TOKEN}
    with (
        httpx.Client(base_url=a.url + "/v1/transit", headers=vault) as on_a,
        httpx.Client(base_url=c.url + "/v1/transit", headers=vault) as on_c,
    ):
        assert on_a.post("/keys/Doomed_1", json={}).status_code == 200
        eventually(lambda: on_c.get("/keys/Doomed_1").status_code == 200)
        sealed = on_c.post("/encrypt/Doomed_1", json={"plaintext": "aGk="})
        old = sealed.json()["data"]["ciphertext"]
        allow = on_a.post("/keys/Doomed_1/config", json={"deletion_allowed": True})
        assert allow.json()["data"]["deletion_allowed"] is True
        assert on_a.delete("/keys/Doomed_1").status_code == 204
        eventually(lambda: on_c.get("/keys/Doomed_1").status_code == 404)
        refused = on_c.post("/decrypt/Doomed_1", json={"ciphertext": old})
        assert refused.json() == {"errors": ["encryption key not found"]}
        assert on_a.post("/keys/Doomed_1", json={}).status_code == 200
        eventually(lambda: on_c.get("/keys/Doomed_1").status_code == 200)
        stale = on_c.post("/decrypt/Doomed_1", json={"ciphertext": old})
        assert stale.json() == {"errors": ["cipher: message authentication failed"]}
        fresh = on_c.post("/encrypt/Doomed_1", json={"plaintext": "aGk="}).json()["data"]
        opened = on_a.post("/decrypt/Doomed_1", json={"ciphertext": fresh["ciphertext"]})
        assert opened.json()["data"]["plaintext"] == "aGk="


def uses_version(srv: Server, key: str, version: int) -> bool:
    return version_of(encrypt(srv, key)) == version


def httpx_status(srv: Server, path: str) -> int:
    with srv.client() as c:
        return c.get(path).status_code


def test_a_token_revoked_through_one_replica_is_refused_by_another_within_a_second(
    replicas: list[Server],
) -> None:
    a, _, c = replicas
    made = a.cli("tokens", "create", "--scope", "encrypt:*", "--label", "app")
    assert made.returncode == 0, made.stderr
    secret = made.stdout.decode().strip()
    token_id = made.stderr.decode().split()[2].rstrip(",")
    eventually(lambda: post_status(c, secret) == 200)
    revoked = a.cli("tokens", "revoke", token_id)
    assert revoked.returncode == 0, revoked.stderr
    eventually(lambda: post_status(c, secret) == 401)


def post_status(srv: Server, token: str) -> int:
    with srv.client(token) as client:
        return client.post("/v1/keys/default/encrypt?mode=single", content=b"hi").status_code


def rotate(srv: Server, name: str) -> int:
    with srv.client() as c:
        r = c.post(f"/v1/keys/{name}/rotate")
        r.raise_for_status()
        latest: int = r.json()["latest"]
        return latest


def test_100_concurrent_rotations_over_three_replicas_give_versions_1_to_101(
    replicas: list[Server],
) -> None:
    create_key(replicas[0], "busy")
    with ThreadPoolExecutor(24) as pool:
        answers = list(pool.map(lambda i: rotate(replicas[i % 3], "busy"), range(100)))
    # Each rotation answered with the version it made: all different, 2..101.
    assert sorted(answers) == list(range(2, 102))
    for srv in replicas:
        with srv.client() as c:
            versions = [v["version"] for v in c.get("/v1/keys/busy").json()["versions"]]
        assert versions == list(range(1, 102))


def test_a_replica_killed_during_rotations_loses_no_version(
    postgres: Cluster, tmp_path: Path
) -> None:
    master = base64.b64encode(os.urandom(32)).decode()
    a, b, c = start_replicas(tmp_path, postgres.new_database(), master)
    try:
        create_key(a, "k")
        sealed: list[tuple[bytes, bytes]] = []

        def rotate_and_seal(i: int) -> int | None:
            srv = (a, b, c)[i % 3]
            try:
                version = rotate(srv, "k")
                message = f"message {i}".encode()
                envelope = encrypt(srv, "k", message)
                assert version_of(envelope) >= version  # never older than what it has seen
                sealed.append((message, envelope))
            except httpx.HTTPError:
                return None  # the killed replica's requests fail; nothing else may
            return version

        with ThreadPoolExecutor(12) as pool:
            futures = [pool.submit(rotate_and_seal, i) for i in range(150)]
            time.sleep(0.5)
            b.proc.send_signal(signal.SIGKILL)
            answered = [f.result() for f in futures]
        acknowledged = {v for v in answered if v is not None}
        assert len(acknowledged) >= 100  # a and c answered all of theirs
        with a.client() as client:
            info = client.get("/v1/keys/k").json()
            versions = [v["version"] for v in info["versions"]]
            # No gap, nothing acknowledged missing, and every envelope still decrypts.
            assert versions == list(range(1, info["latest"] + 1))
            assert acknowledged <= set(versions)
            assert len(sealed) == len(acknowledged)
            for message, envelope in sealed:
                assert client.post("/v1/decrypt", content=envelope).content == message
    finally:
        for srv in (a, b, c):
            srv.stop()


def test_a_database_outage_is_served_from_cache_refuses_writes_and_recovers(
    tmp_path: Path,
) -> None:
    cluster = start_cluster()
    master = base64.b64encode(os.urandom(32)).decode()
    # "serve": the cache keeps serving past the max cache age (test_keystore_partition.py
    # shows the default, which refuses then).
    a, b = start_replicas(
        tmp_path,
        cluster.new_database(),
        master,
        n=2,
        keystore_max_cache_age=2,
        keystore_stale_cache="serve",
    )
    try:
        sealed = encrypt(a, "default", b"before the outage")
        # B's first sealing under the version reserves a block of them: it needs the database.
        encrypt(b, "default", b"before too")
        cluster.stop()
        try:
            stopped = time.monotonic()
            # Keys and tokens in the cache keep serving, on both replicas.
            assert encrypt(b, "default", b"during")[:4] == b"SFL1"
            with a.client() as client:
                assert client.post("/v1/decrypt", content=sealed).content == b"before the outage"
                refused = client.post("/v1/keys/default/rotate")
                assert refused.status_code == 503
                assert refused.json()["error"]["code"] == "keystore_unavailable"
                eventually(lambda: client.get("/readyz").status_code == 503, within=10)
                assert client.get("/readyz").json()["status"] == "keystore_unreachable"
                metrics = client.get("/metrics").text
                assert "sealflow_keystore_reachable 0.0" in metrics
            assert "keystore unreachable" in a.log.read_text()
            time.sleep(max(0.0, 5 - (time.monotonic() - stopped)))
        finally:
            cluster.start()
        with a.client() as client:
            eventually(lambda: client.get("/readyz").status_code == 200, within=10)
            assert "keystore reachable again" in a.log.read_text()
            assert client.post("/v1/keys/default/rotate").json()["latest"] == 2
        eventually(lambda: version_of(encrypt(b, "default")) == 2, within=10)
    finally:
        for srv in (a, b):
            srv.stop()
        cluster.remove()


def test_serve_without_a_master_key_on_a_shared_keystore_says_so(
    postgres: Cluster, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "SEALFLOW_KEYSTORE_URL": postgres.new_database(),
        "SEALFLOW_DATA_DIR": str(tmp_path / "d"),
    }
    env.pop("SEALFLOW_MASTER_KEY", None)
    done = subprocess.run(  # noqa: S603
        [SEALFLOW, "serve", "--port", "0"], env=env, capture_output=True, timeout=60, check=False
    )
    assert done.returncode != 0
    assert b"shared keystore (SEALFLOW_KEYSTORE_URL) needs its master key" in done.stderr


def test_max_encryptions_1000_over_three_replicas_rotates_exactly_once(
    replicas: list[Server],
) -> None:
    with replicas[0].client() as c:
        body = {"name": "limited", "algorithm": "aes-256-gcm", "max_encryptions": 1000}
        assert c.post("/v1/keys", json=body).json()["max_encryptions"] == 1000
    eventually(lambda: all(httpx_status(r, "/v1/keys/limited") == 200 for r in replicas))

    def seal(i: int) -> int:
        return version_of(encrypt(replicas[i % 3], "limited"))

    with ThreadPoolExecutor(12) as pool:
        first = list(pool.map(seal, range(1000)))
    assert first == [1] * 1000  # never earlier than the limit allows
    for srv in replicas:
        eventually(functools.partial(uses_version, srv, "limited", 2))
    with ThreadPoolExecutor(12) as pool:
        later = list(pool.map(seal, range(300)))
    assert later == [2] * 300
    with replicas[1].client() as c:
        info = c.get("/v1/keys/limited").json()
    assert [v["version"] for v in info["versions"]] == [1, 2]  # one new version, not more
    assert info["versions"][0]["encryptions"] == 1000
    assert info["encryptions_left"] <= 1000 - 300
    with replicas[2].client() as c:
        metrics = c.get("/metrics").text
    ratio = float(metrics.split("\nsealflow_keys_usage_max_ratio ", 1)[1].split()[0])
    assert ratio >= 0.3  # the limited key's version 2, if no other key is further along


def test_a_replica_killed_with_reserved_sealings_over_counts_never_under(
    postgres: Cluster, tmp_path: Path
) -> None:
    master = base64.b64encode(os.urandom(32)).decode()
    a, b = start_replicas(tmp_path, postgres.new_database(), master, n=2)
    try:
        for _ in range(100):
            encrypt(a, "default")
        a.proc.send_signal(signal.SIGKILL)  # with most of its block unused
        a.proc.wait()
        for _ in range(50):
            encrypt(b, "default")
        with b.client() as c:
            counted = c.get("/v1/keys/default").json()["versions"][0]["encryptions"]
        assert counted >= 150
        b.stop()  # a clean stop gives back what it did not use
        shown = b.cli("keys", "show", "default", "--json")
        assert shown.returncode == 0, shown.stderr
        after = json.loads(shown.stdout)["versions"][0]["encryptions"]
        assert 150 <= after < counted
    finally:
        for srv in (a, b):
            srv.stop()
