"""The pkcs11 master-key provider against a real SoftHSM2 token (``softhsm``): a server that
keeps no master key anywhere but the token, restarts, and start-ups refused in one line."""

from __future__ import annotations

import base64
import os
import subprocess
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from sealflow.service.config import Settings
from sealflow.service.keystore import (
    KeyStoreUnavailable,
    Pkcs11Seal,
    keystore_keys,
    open_store,
    prepare,
)
from tests.service.conftest import SEALFLOW, Server

from .conftest import stored
from .restart import reopened, seal, unseal
from .softhsm import LIBRARY, Token

SECRET = b"sealed under a key on the token"


@pytest.fixture
def served(token: Token, make_server: Callable[..., Server]) -> Server:
    return make_server(**token.settings())


def _kek(data_dir: Path, token: Token) -> bytes:
    """The keystore's KEK, unsealed here through the token (a process of the test's own)."""
    settings = Settings(data_dir=data_dir, **token.settings())  # type: ignore[arg-type]
    return keystore_keys(settings).kek


def _forms(secret: bytes) -> list[bytes]:
    return [
        secret,
        base64.b64encode(secret),
        base64.urlsafe_b64encode(secret),
        secret.hex().encode(),
    ]


def test_serve_with_pkcs11_keeps_no_master_key_outside_the_token(
    served: Server, token: Token
) -> None:
    assert unseal(served, seal(served, SECRET)) == SECRET
    assert sorted(p.name for p in served.data_dir.iterdir() if p.is_file()) == [
        "keystore.db",
        "keystore.db-shm",
        "keystore.db-wal",
    ]
    kek = _kek(served.data_dir, token)
    # The data directory: the keystore holds the KEK sealed by the token, never in the clear.
    for path in served.data_dir.iterdir():
        content = path.read_bytes()
        assert not any(form in content for form in _forms(kek)), path
    # The process's environment and every file it has open.
    pid = served.proc.pid
    environ = Path(f"/proc/{pid}/environ").read_bytes()
    assert b"SEALFLOW_MASTER_KEY=" not in environ
    assert not any(form in environ for form in _forms(kek))
    opened = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = Path(os.readlink(fd))
        if target.is_file():
            opened += 1
            content = target.read_bytes()
            assert not any(form in content for form in _forms(kek)), target
            assert target.name != "master.key"
    assert opened  # the keystore at least


def test_a_restart_opens_the_keystore_and_old_envelopes(served: Server, token: Token) -> None:
    envelope = seal(served, SECRET)
    assert reopened(served, served.data_dir, envelope, **token.settings()) == SECRET


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"wrong_pin": True}, "refused the PIN"),
        ({"master_key_pkcs11_key_label": "no-such-key"}, "no PKCS#11 key 'no-such-key'"),
        (
            {"master_key_pkcs11_library": "/usr/lib/softhsm/no-such-library.so"},
            "cannot load the PKCS#11 library",
        ),
    ],
    ids=["wrong-pin", "missing-key-label", "missing-library"],
)
def test_a_refusing_token_stops_the_start_in_one_line(
    served: Server, token: Token, tmp_path: Path, change: dict[str, object], says: str
) -> None:
    served.stop()
    more = dict(change)
    if more.pop("wrong_pin", False):
        wrong = tmp_path / "wrong-pin"
        wrong.write_text("00000000\n")
        wrong.chmod(0o600)  # else the start warns about its mode first, a line of its own
        more["master_key_pkcs11_pin_file"] = wrong
    started = token.sealflow("serve", "--port", "0", "--data-dir", str(served.data_dir), **more)
    assert started.returncode == 1
    lines = started.stderr.splitlines()
    assert len(lines) == 1, started.stderr
    assert lines[0].startswith("sealflow: ")
    assert says in lines[0]
    assert "Traceback" not in started.stderr


def test_init_master_refuses_a_key_that_is_there(token: Token, tmp_path: Path) -> None:
    again = token.sealflow("keystore", "init-master", "--data-dir", str(tmp_path / "d"))
    assert again.returncode == 1
    assert "exists; nothing was created" in again.stderr


def test_the_key_on_the_token_is_sensitive_and_not_extractable(token: Token) -> None:
    import pkcs11
    from pkcs11 import Attribute

    lib = pkcs11.lib(str(LIBRARY))
    with lib.get_token(token_label=token.label).open(
        user_pin=token.pin_file.read_text().strip()
    ) as session:
        key = session.get_key(label=token.key_label, object_class=pkcs11.ObjectClass.SECRET_KEY)
        assert key[Attribute.SENSITIVE] is True
        assert key[Attribute.EXTRACTABLE] is False
        assert key[Attribute.VALUE_LEN] == 32
        with pytest.raises(pkcs11.exceptions.AttributeSensitive):
            key[Attribute.VALUE]


def test_a_file_keystore_is_not_opened_by_pkcs11(token: Token, tmp_path: Path) -> None:
    """The keystore records its provider: the token is not tried on a file-sealed keystore."""
    data = tmp_path / "file-data"
    data.mkdir()
    made = subprocess.run(  # noqa: S603
        [SEALFLOW, "keys", "list", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        env={**os.environ, "SEALFLOW_MASTER_KEY": base64.b64encode(os.urandom(32)).decode()},
        check=False,
    )
    assert made.returncode == 0, made.stderr
    listed = token.sealflow("keys", "list", "--data-dir", str(data))
    assert listed.returncode == 1
    assert "sealed by the file master-key provider" in listed.stderr
    [(record,)] = stored(data, {})("SELECT value FROM meta WHERE key = 'master_seal'")
    assert b'"provider":"file"' in record


def test_the_pkcs11_settings_are_checked_first(tmp_path: Path) -> None:
    with pytest.raises(KeyStoreUnavailable, match="SEALFLOW_MASTER_KEY_PKCS11_LIBRARY"):
        Pkcs11Seal.from_settings(Settings(master_key_provider="pkcs11"))


def test_requests_never_reach_the_token(served: Server, token: Token) -> None:
    """With the token gone after start-up, requests that use and make key material go on."""
    tokens = token.conf.parent / "tokens"
    tokens.rename(tokens.with_name("tokens-away"))
    try:
        with served.client() as client:
            envelope = client.post("/v1/keys/default/encrypt", content=SECRET).content
            assert client.post("/v1/decrypt", content=envelope).content == SECRET
            assert client.post("/v1/keys/default/rotate").status_code == 200
            made = client.post("/v1/keys", json={"name": "after", "algorithm": "aes-256-gcm"})
            assert made.status_code == 201
            again = client.post("/v1/keys/after/encrypt", content=SECRET).content
            assert client.post("/v1/decrypt", content=again).content == SECRET
        # The CLI, a process of its own, asks the token, and is refused without it.
        listed = token.sealflow("keys", "list", "--data-dir", str(served.data_dir))
        assert listed.returncode == 1
        assert listed.stderr.startswith("sealflow: PKCS#11 library")
        assert "would not initialise" in listed.stderr
    finally:
        tokens.with_name("tokens-away").rename(tokens)


def test_a_process_asks_the_token_once(token: Token, tmp_path: Path) -> None:
    """prepare, open_store and the audit's keys, in one process: one provider call (a wrong
    PIN afterwards is never tried)."""
    settings = Settings(data_dir=tmp_path / "once", **token.settings())  # type: ignore[arg-type]
    assert prepare(settings) is not None
    token.pin_file.write_text("00000000\n")
    with closing(open_store(settings)) as store:
        assert [k.name for k in store.list_keys()] == ["default"]
    assert len(keystore_keys(settings).secret) == 32
    # A process of its own asks again, and is refused.
    listed = token.sealflow("keys", "list", "--data-dir", str(settings.data_dir))
    assert listed.returncode == 1
    assert "refused the PIN" in listed.stderr


def test_a_backup_restores_with_the_token_alone(
    served: Server, token: Token, tmp_path: Path
) -> None:
    """The keystore lost, its backup (format 2, the sealed record in its header) restores into
    a new data directory with the token's settings only, and old envelopes decrypt."""
    envelope = seal(served, SECRET)
    backup = tmp_path / "keystore.sfkb"
    made = token.sealflow("keystore", "backup", str(backup), "--data-dir", str(served.data_dir))
    assert made.returncode == 0, made.stderr
    assert backup.read_bytes()[4] == 2  # the format
    served.stop()
    elsewhere = tmp_path / "restored"
    done = token.sealflow("keystore", "restore", str(backup), "--data-dir", str(elsewhere))
    assert done.returncode == 0, done.stderr
    assert reopened(served, elsewhere, envelope, **token.settings()) == SECRET
    # Without the token's key, the backup opens to nobody.
    other = token.sealflow(
        "keystore",
        "restore",
        str(backup),
        "--data-dir",
        str(tmp_path / "nowhere"),
        master_key_pkcs11_key_label="another-key",
    )
    assert other.returncode == 1
    assert "no PKCS#11 key 'another-key'" in other.stderr


def test_each_worker_unseals_its_own(token: Token, make_server: Callable[..., Server]) -> None:
    """--workers 2: every worker serves, and none has a master key or the KEK in its
    environment (each asked the token itself)."""
    srv = make_server(**token.settings(workers=2))
    for _ in range(8):  # over new connections: both workers answer some
        assert unseal(srv, seal(srv, SECRET)) == SECRET
    kek = _kek(srv.data_dir, token)
    children = Path(f"/proc/{srv.proc.pid}/task/{srv.proc.pid}/children").read_text().split()
    assert len(children) >= 2
    for pid in [str(srv.proc.pid), *children]:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        assert b"SEALFLOW_MASTER_KEY=" not in environ
        assert not any(form in environ for form in _forms(kek)), pid


def test_a_postgres_keystore_under_pkcs11(
    token: Token, tmp_path: Path, pg_url: str, make_server: Callable[..., Server]
) -> None:
    """A new shared keystore made under the token: restart, and a replica's CLI, open it."""
    settings = token.settings(keystore_url=pg_url)
    srv = make_server(**settings)
    envelope = seal(srv, SECRET)
    assert reopened(srv, tmp_path / "data2", envelope, **settings) == SECRET
    listed = token.sealflow("keys", "list", "--json", keystore_url=pg_url)
    assert listed.returncode == 0, listed.stderr
    assert '"default"' in listed.stdout


def test_keystore_migrate_takes_the_record_along(
    served: Server, token: Token, tmp_path: Path, pg_url: str
) -> None:
    """An SQLite keystore sealed by the token moves to PostgreSQL with its sealed record: the
    replicas open it with the token, and old envelopes decrypt."""
    envelope = seal(served, SECRET)
    served.stop()
    source = f"sqlite:{served.data_dir / 'keystore.db'}"
    moved = token.sealflow("keystore", "migrate", "--from", source, "--to", pg_url)
    assert moved.returncode == 0, moved.stderr
    replica = tmp_path / "replica"
    assert reopened(served, replica, envelope, **token.settings(keystore_url=pg_url)) == SECRET
