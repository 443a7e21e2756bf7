"""``sealflow keystore rotate-master`` from the file provider to a SoftHSM2 token, on SQLite and
on PostgreSQL: a keystore of 1,000 keys x 3 versions, the command killed with SIGKILL at 20
random points and run again each time, opens after every kill with the provider its record
names and ends rotated, every version's material as it was; a PostgreSQL replica serving
through a rotation follows it without a restart; pkcs11 to a Transit seal (OpenBao), then to a
key file."""

from __future__ import annotations

import base64
import contextlib
import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from sealflow import Client, engine
from sealflow.engine import Algorithm
from sealflow.service.config import Settings
from sealflow.service.envelope import Mode, Prefix
from sealflow.service.keystore import (
    KeyStore,
    KeyStoreUnavailable,
    current_provider,
    open_store,
    prepare,
)
from tests.service.conftest import SEALFLOW, start_server
from tests.service.openbao import run_openbao, seal_key

from .conftest import stored
from .restart import open_each, seal_names
from .softhsm import Token

MASTER_B64 = base64.b64encode(os.urandom(32)).decode()
KEYS = 1000
KILLS = 20
# The head of a value under the KEK of generation 1 (``_generations``), as stored.
HEAD_1 = b"sfk\x00\x00\x00\x01"

Materials = dict[tuple[str, int], bytes]


@pytest.fixture
def settings(backend: str, token: Token, request: pytest.FixtureRequest) -> dict[str, object]:
    """The file provider in use, and the token's settings ready for --to pkcs11."""
    given = token.settings(master_key_provider="file", master_key=MASTER_B64)
    if backend == "postgresql":
        given["keystore_url"] = request.getfixturevalue("pg_url")
    return given


def _env(data: Path, settings: dict[str, object]) -> dict[str, str]:
    env = {f"SEALFLOW_{k.upper()}": str(v) for k, v in settings.items()}
    return {**os.environ, **env, "SEALFLOW_DATA_DIR": str(data)}


def _open(data: Path, settings: dict[str, object], provider: str) -> KeyStore:
    opened = Settings(data_dir=data, **{**settings, "master_key_provider": provider})  # type: ignore[arg-type]
    return open_store(opened, watch=False)


def _materials(store: KeyStore) -> Materials:
    return {
        (info.name, v.version): store.key_material(info.name, v.version)
        for info in store.list_keys()
        for v in info.versions
    }


def _envelopes(data: Path, settings: dict[str, object]) -> dict[bytes, bytes]:
    """One single-shot envelope under every version of every key (sealed here with the version's
    material, as the service seals), by its plaintext."""
    sealed = {}
    with closing(_open(data, settings, "file")) as store:
        for info in store.list_keys():
            for v in info.versions:
                prefix = Prefix(Mode.SINGLE, info.algorithm, v.version, info.name).encode()
                nonce = os.urandom(engine.NONCE_LEN)
                plain = f"{info.name} version {v.version}".encode()
                material = store.key_material(info.name, v.version)
                body = engine.seal(info.algorithm, material, nonce, prefix, plain)
                sealed[plain] = prefix + nonce + body
    return sealed


def _fill(data: Path, settings: dict[str, object], keys: int) -> Materials:
    """The keystore with ``keys`` keys of three versions each (through the keystore's API)."""
    prepare(Settings(data_dir=data, **settings))  # type: ignore[arg-type]
    with closing(_open(data, settings, "file")) as store:
        for i in range(keys):
            name = f"key-{i:04d}"
            store.create_key(name, Algorithm.AES_256_GCM)
            store.rotate_key(name)
            store.rotate_key(name)
        return _materials(store)


def _rotate(env: dict[str, str], *flags: str) -> subprocess.CompletedProcess[str]:
    """``sealflow keystore rotate-master`` run to its end."""
    return subprocess.run(  # noqa: S603
        [SEALFLOW, "keystore", "rotate-master", *flags],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _kill_run(env: dict[str, str], rng: random.Random) -> int | None:
    """rotate-master killed with SIGKILL at a random point: a third of the time a random delay
    after it started (while it starts, asks the token, begins, or in its first batches), else
    a random moment after a random number of batches (mostly inside the next one's
    transaction); its exit status if it ended first."""
    proc = subprocess.Popen(  # noqa: S603
        [SEALFLOW, "keystore", "rotate-master", "--to", "pkcs11", "--batch-size", "25"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    try:
        if rng.random() < 1 / 3:
            with contextlib.suppress(subprocess.TimeoutExpired):
                return proc.wait(rng.uniform(0.0, 0.8))
        else:
            batches = rng.randint(1, 6)
            for line in proc.stderr:
                batches -= line.startswith("rewrapped ")
                if batches == 0:
                    time.sleep(rng.uniform(0.0, 0.01))
                    break
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return None if proc.returncode == -signal.SIGKILL else proc.returncode
    finally:
        proc.stderr.close()


def test_rotate_master_file_to_pkcs11_killed_20_times(
    tmp_path: Path, settings: dict[str, object]
) -> None:
    data = tmp_path / "data"
    before = _fill(data, settings, KEYS)
    assert len(before) == 3 * KEYS + 1  # and key default
    envelopes = _envelopes(data, settings)
    assert len(envelopes) == len(before)
    env = _env(data, settings)
    query = stored(data, settings)
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    under_way = 0
    for kill in range(KILLS):
        status = _kill_run(env, rng)
        assert status is None, (seed, kill, status)
        # The keystore opens with the provider its record names, every version as it was.
        provider = current_provider(Settings(data_dir=data, **settings))  # type: ignore[arg-type]
        assert provider == "file", (seed, kill)
        with closing(_open(data, settings, provider)) as store:
            assert _materials(store) == before, (seed, kill)
        under_way += bool(query("SELECT key FROM meta WHERE key = 'master_seal_next'"))
    assert under_way > 0, seed  # some kill fell inside the rotation, not all before it

    done = _rotate(env, "--to", "pkcs11", "--batch-size", "25")
    assert done.returncode == 0, done.stderr
    assert "to generation 1, sealed by the pkcs11 (key_label" in done.stderr
    assert "the file master key is no longer needed to open this keystore" in done.stderr

    assert current_provider(Settings(data_dir=data, **settings)) == "pkcs11"  # type: ignore[arg-type]
    with closing(_open(data, settings, "pkcs11")) as store:
        assert _materials(store) == before
    # Every envelope sealed before the rotation opens on a server under the new provider.
    srv = start_server(data, **{**settings, "master_key_provider": "pkcs11"})
    try:
        made = srv.cli("tokens", "create", "--scope", "decrypt:*")
        assert made.returncode == 0, made.stderr
        with Client(srv.url, made.stdout.decode().strip()) as client:
            opened = list(client.decrypt_many(envelopes.values()))
        assert opened == list(envelopes)
    finally:
        srv.stop()
    with pytest.raises(KeyStoreUnavailable, match="sealed by the pkcs11"):
        _open(data, settings, "file")
    # Every row is under the new KEK, and nothing of the rotation is left behind.
    keys = [key for (key,) in query("SELECT key FROM meta")]
    assert "master_seal_next" not in keys
    assert "master_kek_next" not in keys
    assert all(mac.startswith(HEAD_1) for (mac,) in query("SELECT mac FROM keys"))
    wrapped = query("SELECT wrapped FROM key_versions")
    assert len(wrapped) == 3 * KEYS + 1
    assert all(blob.startswith(HEAD_1) for (blob,) in wrapped)
    (check,) = query("SELECT value FROM meta WHERE key = 'check'")
    assert check[0].startswith(HEAD_1)


@pytest.fixture
def replica(
    tmp_path: Path, token: Token, pg_url: str
) -> Iterator[tuple[Path, dict[str, object], Any]]:
    settings = token.settings(master_key_provider="file", master_key=MASTER_B64)
    settings["keystore_url"] = pg_url
    data = tmp_path / "replica"
    srv = start_server(data, **settings)
    try:
        yield data, settings, srv
    finally:
        srv.stop()


def test_a_postgresql_replica_follows_a_rotation_without_a_restart(
    replica: tuple[Path, dict[str, object], Any],
) -> None:
    data, settings, srv = replica
    with closing(_open(data, settings, "file")) as store:
        for i in range(200):
            store.create_key(f"key-{i:03d}", Algorithm.AES_256_GCM)
    pid = srv.proc.pid
    query = stored(data, settings)
    with srv.client() as client:
        envelopes = seal_names(client, "default", "key-000", "key-199")
        proc = subprocess.Popen(  # noqa: S603
            [SEALFLOW, "keystore", "rotate-master", "--to", "pkcs11", "--batch-size", "5"],
            env=_env(data, settings),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        served, made = 0, False
        while proc.poll() is None:
            served += open_each(client, envelopes)
            if not made and query("SELECT key FROM meta WHERE key = 'master_seal_next'"):
                # A write while the rotation runs: under the new KEK (the replica followed).
                reply = client.post("/v1/keys", json={"name": "made-during"})
                assert reply.status_code == 201, reply.text
                made = True
        assert proc.stderr is not None
        assert proc.wait() == 0, proc.stderr.read()
        proc.stderr.close()
        assert made
        assert served > 0
        # After: the same process, serving old envelopes and writing under the new KEK.
        open_each(client, envelopes)
        assert client.post("/v1/keys", json={"name": "made-after"}).status_code == 201
        sealed = client.post("/v1/keys/made-after/encrypt", content=b"after").content
        assert client.post("/v1/decrypt", content=sealed).content == b"after"
    assert srv.proc.pid == pid
    assert srv.proc.poll() is None
    assert "was not following" not in srv.log.read_text()
    # What the replica wrote opens with the new provider alone.
    with closing(_open(data, settings, "pkcs11")) as store:
        for name in ("made-during", "made-after", "key-199"):
            assert len(store.key_material(name, 1)) == 32


def test_pkcs11_to_transit_then_to_file(tmp_path: Path, token: Token) -> None:
    """Generation 1 under a Transit seal, then generation 2 under a key file: each rotation
    needs only the target's settings besides the current provider's, and once it is done the
    old provider is not asked again (OpenBao stopped, the file key alone opens it)."""
    data = tmp_path / "data"
    file_key = base64.b64encode(os.urandom(32)).decode()
    with run_openbao(tmp_path) as bao:
        sealing = seal_key(bao.url, bao.token, tmp_path)
        settings = {**token.settings(), **sealing.settings(bao.url), "master_key": file_key}
        prepare(Settings(data_dir=data, **settings))  # type: ignore[arg-type]
        with closing(_open(data, settings, "pkcs11")) as store:
            for i in range(50):
                store.create_key(f"key-{i:02d}", Algorithm.CHACHA20_POLY1305)
                store.rotate_key(f"key-{i:02d}")
            before = _materials(store)
        env = _env(data, settings)
        to_transit = _rotate(env, "--to", "transit", "--batch-size", "7")
        assert to_transit.returncode == 0, to_transit.stderr
        assert "to generation 1, sealed by the transit (" in to_transit.stderr
        assert "the pkcs11 (key_label 'sealflow-master'" in to_transit.stderr
        with closing(_open(data, settings, "transit")) as store:
            assert _materials(store) == before
        with pytest.raises(KeyStoreUnavailable, match="sealed by the transit"):
            _open(data, settings, "pkcs11")
        to_file = _rotate(env, "--to", "file")
        assert to_file.returncode == 0, to_file.stderr
        assert "to generation 2, sealed by the file master-key provider" in to_file.stderr
    with closing(_open(data, settings, "file")) as store:  # OpenBao is gone
        assert _materials(store) == before
    head_2 = b"sfk\x00\x00\x00\x02"
    query = stored(data, settings)
    assert all(blob.startswith(head_2) for (blob,) in query("SELECT wrapped FROM key_versions"))
