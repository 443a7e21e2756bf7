"""The ``transit`` master-key provider against a real OpenBao: it wraps a KEK under a Transit key
bound to associated data, unwraps it after the key is rotated, and refuses everything else with
one line that names no secret."""

from __future__ import annotations

import base64
import os
import re
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sealflow.service.config import Settings
from sealflow.service.keystore import KeyStoreUnavailable
from sealflow.service.keystore._transit_seal import TransitSeal
from tests.service.openbao import SEAL_POLICY, OpenBao, SealKey, api, run_openbao, seal_key
from tests.service.transit.conftest import Bao, bao  # noqa: F401 (the session fixture)

AAD = b"sealflow keystore KEK"
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def sealing(bao: Bao, tmp_path: Path) -> SealKey:  # noqa: F811
    return seal_key(bao.url, bao.token, tmp_path)


@pytest.fixture
def seal(bao: Bao, sealing: SealKey) -> TransitSeal:  # noqa: F811
    return TransitSeal(bao.url, sealing.mount, sealing.key, sealing.token_file)


def refusal(call: Callable[[], object], *secrets: str | bytes) -> str:
    """The one-line message ``call`` is refused with; no form of ``secrets`` is in it."""
    with pytest.raises(KeyStoreUnavailable) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message
    for secret in secrets:
        if isinstance(secret, str):
            assert secret not in message
        else:
            for form in (secret.hex(), base64.b64encode(secret).decode()):
                assert form not in message
    # Nothing chained that a traceback could show (an HTTP error's body, a request's headers).
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__ or caught.value.__context__ is None
    return message


def test_round_trip_and_a_new_blob_each_time(seal: TransitSeal, sealing: SealKey) -> None:
    kek = os.urandom(32)
    first, second = seal.wrap(kek, AAD), seal.wrap(kek, AAD)
    assert first != second
    assert re.fullmatch(rb"vault:v1:[A-Za-z0-9+/=]+", first)
    assert kek not in first
    assert seal.unwrap(first, AAD) == kek
    assert seal.unwrap(second, AAD) == kek


def test_describe_names_where_not_how(bao: Bao, seal: TransitSeal, sealing: SealKey) -> None:  # noqa: F811
    described = seal.describe()
    assert described == {"addr": bao.url, "mount": "transit", "key": sealing.key}
    assert sealing.token not in repr(described)


def test_a_rotated_key_still_unwraps_old_blobs(
    bao: Bao,  # noqa: F811
    seal: TransitSeal,
    sealing: SealKey,
) -> None:
    kek = os.urandom(32)
    old = seal.wrap(kek, AAD)
    api(bao.url, bao.token, "POST", f"transit/keys/{sealing.key}/rotate")
    new = seal.wrap(kek, AAD)
    assert old.startswith(b"vault:v1:")
    assert new.startswith(b"vault:v2:")
    assert seal.unwrap(old, AAD) == kek
    assert seal.unwrap(new, AAD) == kek


def test_other_associated_data_is_refused(seal: TransitSeal, sealing: SealKey) -> None:
    kek = os.urandom(32)
    blob = seal.wrap(kek, AAD)
    message = refusal(lambda: seal.unwrap(blob, AAD + b"!"), sealing.token, kek)
    assert "does not open" in message
    assert "message authentication failed" in message


def test_another_key_is_refused(
    bao: Bao,  # noqa: F811
    seal: TransitSeal,
    sealing: SealKey,
    tmp_path: Path,
) -> None:
    kek = os.urandom(32)
    blob = seal.wrap(kek, AAD)
    other = seal_key(bao.url, bao.token, tmp_path)
    # The other key's token may not use this key at all.
    crossed = TransitSeal(bao.url, "transit", sealing.key, other.token_file)
    assert "refused" in refusal(lambda: crossed.unwrap(blob, AAD), other.token, kek)
    # Root may use the other key, and it does not open the blob.
    as_root = TransitSeal(bao.url, "transit", other.key, _root_file(bao, tmp_path))
    assert "does not open" in refusal(lambda: as_root.unwrap(blob, AAD), bao.token, kek)


def _root_file(bao: Bao | OpenBao, tmp_path: Path) -> Path:  # noqa: F811
    path = tmp_path / "root.token"
    path.write_text(bao.token)
    return path


def test_a_changed_or_foreign_blob_is_refused(seal: TransitSeal, sealing: SealKey) -> None:
    blob = seal.wrap(os.urandom(32), AAD)
    flipped = blob[:-3] + (b"A" if blob[-3:-2] != b"A" else b"B") + blob[-2:]
    assert "does not open" in refusal(lambda: seal.unwrap(flipped, AAD), sealing.token)
    assert "not a Transit ciphertext" in refusal(lambda: seal.unwrap(b"SFL1...", AAD))


def test_empty_associated_data_is_a_caller_error(seal: TransitSeal) -> None:
    with pytest.raises(ValueError, match="non-empty associated data"):
        seal.wrap(os.urandom(32), b"")


# Each refusal, and the words that say which it is.


def test_a_bad_token_is_refused(bao: Bao, sealing: SealKey, tmp_path: Path) -> None:  # noqa: F811
    wrapped = TransitSeal(bao.url, "transit", sealing.key, sealing.token_file).wrap(b"k" * 32, AAD)
    bad = "s." + os.urandom(12).hex()
    token_file = tmp_path / "bad.token"
    token_file.write_text(bad)
    seal = TransitSeal(bao.url, "transit", sealing.key, token_file)
    for call in (lambda: seal.wrap(b"k" * 32, AAD), lambda: seal.unwrap(wrapped, AAD)):
        message = refusal(call, bad)
        assert "refused (permission denied)" in message
        assert f"transit/decrypt/{sealing.key}" in message


def test_a_token_that_may_not_decrypt_cannot_wrap_or_unwrap(
    bao: Bao,  # noqa: F811
    seal: TransitSeal,
    tmp_path: Path,
) -> None:
    encrypt_only = SEAL_POLICY.split("}}\n")[0] + "}}\n"
    assert "decrypt" not in encrypt_only
    limited = seal_key(bao.url, bao.token, tmp_path, policy=encrypt_only)
    as_limited = TransitSeal(bao.url, "transit", limited.key, limited.token_file)
    # Refused before anything is wrapped: start-up could never unwrap it.
    assert "permission denied" in refusal(lambda: as_limited.wrap(b"k" * 32, AAD), limited.token)
    blob = TransitSeal(bao.url, "transit", limited.key, _root_file(bao, tmp_path)).wrap(
        b"k" * 32, AAD
    )
    assert "permission denied" in refusal(lambda: as_limited.unwrap(blob, AAD), limited.token)


def test_a_missing_key_is_named_and_not_created(
    bao: Bao,  # noqa: F811
    tmp_path: Path,
) -> None:
    # With root, Transit's encrypt would create the key: the seal must not let it.
    name = "absent-" + os.urandom(4).hex()
    seal = TransitSeal(bao.url, "transit", name, _root_file(bao, tmp_path))
    blob = b"vault:v1:" + b"A" * 40
    for call in (lambda: seal.wrap(b"k" * 32, AAD), lambda: seal.unwrap(blob, AAD)):
        message = refusal(call, bao.token)
        assert f"transit/{name} at {bao.url}: no such key (encryption key not found)" in message
    listed = api(bao.url, bao.token, "LIST", "transit/keys").json()["data"]["keys"]
    assert name not in listed


@pytest.mark.parametrize("key_type", ["ed25519", "rsa-2048", "ecdsa-p256"])
def test_a_key_that_is_not_aead_is_refused(
    bao: Bao,  # noqa: F811
    tmp_path: Path,
    key_type: str,
) -> None:
    # RSA keys encrypt too, but Transit ignores associated data for them: refused all the same.
    sealing = seal_key(bao.url, bao.token, tmp_path, key_type=key_type)
    seal = TransitSeal(bao.url, "transit", sealing.key, sealing.token_file)
    message = refusal(lambda: seal.wrap(os.urandom(32), AAD), sealing.token)
    vaults_words = f"'[0].associated_data' provided for non-AEAD cipher suite {key_type}"
    assert f"the key is not an AEAD key ({vaults_words})" in message
    assert "aes256-gcm96" in message


def test_a_missing_transit_engine_is_named(
    bao: Bao,  # noqa: F811
    sealing: SealKey,
    tmp_path: Path,
) -> None:
    # A token whose policy does not name the path gets 403, mount or not; root gets 404.
    limited = TransitSeal(bao.url, "no-such-mount", sealing.key, sealing.token_file)
    assert "refused (permission denied)" in refusal(
        lambda: limited.unwrap(b"vault:v1:AAAA", AAD), sealing.token
    )
    as_root = TransitSeal(bao.url, "no-such-mount", sealing.key, _root_file(bao, tmp_path))
    message = refusal(lambda: as_root.unwrap(b"vault:v1:AAAA", AAD), bao.token)
    assert "no Transit engine at no-such-mount (404: no handler for route" in message


@pytest.mark.parametrize("content", [None, b"", b"  \n", b"\xff\xfe", b"two\ntokens", b"x" * 5000])
def test_a_token_file_without_a_token_is_refused(
    bao: Bao,  # noqa: F811
    sealing: SealKey,
    tmp_path: Path,
    content: bytes | None,
) -> None:
    token_file = tmp_path / "token"
    if content is not None:
        token_file.write_bytes(content)
    seal = TransitSeal(bao.url, "transit", sealing.key, token_file)
    message = refusal(lambda: seal.wrap(b"k" * 32, AAD))
    where = f"SEALFLOW_MASTER_KEY_TRANSIT_TOKEN_FILE {token_file}"
    assert where in message
    if content is None:
        assert message.endswith(f"cannot read {where}: No such file or directory")
    elif not content.strip():
        assert message.endswith("is empty")
    else:
        assert message.endswith("does not hold one token (printable ASCII, one line)")


def test_a_token_file_that_is_a_directory_is_refused(
    bao: Bao,  # noqa: F811
    sealing: SealKey,
    tmp_path: Path,
) -> None:
    seal = TransitSeal(bao.url, "transit", sealing.key, tmp_path)
    assert "Is a directory" in refusal(lambda: seal.wrap(b"k" * 32, AAD))


def test_a_token_renewed_in_its_file_is_used_at_the_next_call(
    bao: Bao,  # noqa: F811
    seal: TransitSeal,
    sealing: SealKey,
) -> None:
    blob = seal.wrap(b"k" * 32, AAD)
    sealing.token_file.write_text("s.revoked-or-replaced")
    assert "permission denied" in refusal(lambda: seal.unwrap(blob, AAD), "s.revoked-or-replaced")
    sealing.token_file.write_text(sealing.token)
    assert seal.unwrap(blob, AAD) == b"k" * 32


# Transit out of reach.


def test_openbao_stopped_or_unreachable_is_refused(tmp_path: Path) -> None:
    with run_openbao(tmp_path) as own:
        sealing = seal_key(own.url, own.token, tmp_path)
        seal = TransitSeal(own.url, "transit", sealing.key, sealing.token_file)
        blob = seal.wrap(b"k" * 32, AAD)
        own.stop()
        message = refusal(lambda: seal.unwrap(blob, AAD), sealing.token)
    assert message == (
        f"transit master key transit/{sealing.key} at {own.url}: cannot reach it:"
        " Connection refused"
    )


def test_a_name_that_does_not_resolve_is_refused(sealing: SealKey) -> None:
    seal = TransitSeal("https://no-such-host.invalid:8200", "transit", "k", sealing.token_file)
    assert "cannot resolve no-such-host.invalid" in refusal(lambda: seal.wrap(b"k" * 32, AAD))


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


def test_a_server_that_never_answers_times_out(silent_port: int, sealing: SealKey) -> None:
    seal = TransitSeal(
        f"http://127.0.0.1:{silent_port}", "transit", "k", sealing.token_file, timeout=0.2
    )
    assert refusal(lambda: seal.wrap(b"k" * 32, AAD)).endswith("no answer within 0.2 s")


# TLS: verified always, against the system's CAs or the CA file.


@pytest.fixture(scope="module")
def tls_bao(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenBao]:
    with run_openbao(tmp_path_factory.mktemp("tls"), tls=True) as own:
        yield own


def test_tls_with_the_ca_file(tls_bao: OpenBao, tmp_path: Path) -> None:
    assert tls_bao.ca_file is not None
    sealing = seal_key(tls_bao.url, tls_bao.token, tmp_path, ca_file=tls_bao.ca_file)
    seal = TransitSeal.from_settings(_settings(**sealing.settings(tls_bao.url, tls_bao.ca_file)))
    kek = os.urandom(32)
    assert seal.unwrap(seal.wrap(kek, AAD), AAD) == kek


def test_tls_without_the_ca_is_refused(tls_bao: OpenBao, tmp_path: Path) -> None:
    assert tls_bao.ca_file is not None
    sealing = seal_key(tls_bao.url, tls_bao.token, tmp_path, ca_file=tls_bao.ca_file)
    seal = TransitSeal(tls_bao.url, "transit", sealing.key, sealing.token_file)
    message = refusal(lambda: seal.wrap(b"k" * 32, AAD), sealing.token)
    assert message.startswith(f"transit master key transit/{sealing.key} at {tls_bao.url}: TLS: ")
    assert "certificate" in message


def test_the_wrong_scheme_is_refused(
    bao: Bao,  # noqa: F811
    tls_bao: OpenBao,
    tmp_path: Path,
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(tls_bao.token)
    plain_as_tls = TransitSeal(bao.url.replace("http:", "https:"), "transit", "k", token_file)
    tls_as_plain = TransitSeal(tls_bao.url.replace("https:", "http:"), "transit", "k", token_file)
    message = refusal(lambda: plain_as_tls.unwrap(b"vault:v1:AAAA", AAD), tls_bao.token)
    assert message.startswith(
        f"transit master key transit/k at {plain_as_tls.describe()['addr']}: TLS: "
    )
    message = refusal(lambda: tls_as_plain.unwrap(b"vault:v1:AAAA", AAD), tls_bao.token)
    # Go answers 400 and closes; a close before our request is read resets the connection, and
    # the 400 may be lost with it: either way one line, and not a success.
    assert message.endswith(
        (
            "decrypt answered 400: Client sent an HTTP request to an HTTPS server.",
            "cannot reach it: Connection reset by peer",
        )
    )


def test_an_unreadable_ca_file_is_refused(tls_bao: OpenBao, tmp_path: Path) -> None:
    for ca_file, reason in ((tmp_path / "none.pem", "No such file or directory"), (tmp_path, "")):
        with pytest.raises(KeyStoreUnavailable) as caught:
            TransitSeal(tls_bao.url, "transit", "k", tmp_path / "t", ca_file=ca_file)
        assert str(caught.value).startswith(
            f"cannot read SEALFLOW_MASTER_KEY_TRANSIT_CA_FILE {ca_file}: {reason}"
        )
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(KeyStoreUnavailable, match="holds no PEM certificate"):
        TransitSeal(tls_bao.url, "transit", "k", tmp_path / "t", ca_file=junk)


# Settings.


def _settings(**given: object) -> Settings:
    return Settings(**given)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("missing", "flag"),
    [
        ("master_key_transit_addr", "--master-key-transit-addr"),
        ("master_key_transit_key", "--master-key-transit-key"),
        ("master_key_transit_token_file", "--master-key-transit-token-file"),
    ],
)
def test_each_missing_setting_is_named(missing: str, flag: str, tmp_path: Path) -> None:
    given: dict[str, object] = {
        "master_key_transit_addr": "https://vault:8200",
        "master_key_transit_key": "sealflow",
        "master_key_transit_token_file": tmp_path / "token",
    }
    del given[missing]
    with pytest.raises(KeyStoreUnavailable) as caught:
        TransitSeal.from_settings(_settings(**given))
    variable = "SEALFLOW_" + missing.upper()
    assert str(caught.value).startswith(
        f"the transit master-key provider needs {variable} ({flag})"
    )


def test_from_settings_reads_every_setting(
    bao: Bao,  # noqa: F811
    sealing: SealKey,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SEALFLOW_MASTER_KEY_TRANSIT_ADDR", bao.url + "/")
    monkeypatch.setenv("SEALFLOW_MASTER_KEY_TRANSIT_KEY", sealing.key)
    monkeypatch.setenv("SEALFLOW_MASTER_KEY_TRANSIT_TOKEN_FILE", str(sealing.token_file))
    monkeypatch.setenv("SEALFLOW_MASTER_KEY_TRANSIT_TIMEOUT", "3")
    seal = TransitSeal.from_settings(Settings())
    assert seal.describe() == {"addr": bao.url, "mount": "transit", "key": sealing.key}
    kek = os.urandom(32)
    assert seal.unwrap(seal.wrap(kek, AAD), AAD) == kek


def test_a_bad_address_is_refused(sealing: SealKey) -> None:
    for addr in ("vault:8200", "ftp://vault", "https://", "http://vault:99999", "https://u:p@v"):
        with pytest.raises(KeyStoreUnavailable, match="SEALFLOW_MASTER_KEY_TRANSIT_ADDR"):
            TransitSeal(addr, "transit", "k", sealing.token_file)


# Namespaces (OpenBao's, and Vault Enterprise's): X-Vault-Namespace.


def test_a_namespace_is_sent_and_described(tmp_path: Path) -> None:
    with run_openbao(tmp_path) as own:
        team = "team-" + os.urandom(3).hex()
        own.call("POST", f"sys/namespaces/{team}")
        api(own.url, own.token, "POST", "sys/mounts/transit", {"type": "transit"}, namespace=team)
        api(own.url, own.token, "POST", "transit/keys/k", {"type": "aes256-gcm96"}, namespace=team)
        root_file = _root_file(own, tmp_path)
        seal = TransitSeal(own.url, "transit", "k", root_file, namespace=team)
        kek = os.urandom(32)
        assert seal.unwrap(seal.wrap(kek, AAD), AAD) == kek
        assert seal.describe()["namespace"] == team
        # Outside the namespace the key does not exist.
        outside = TransitSeal(own.url, "transit", "k", root_file)
        assert "no such key" in refusal(lambda: outside.wrap(kek, AAD), own.token)


def test_the_policy_in_the_docs_is_the_tested_one() -> None:
    deploy = (ROOT / "docs" / "DEPLOY.md").read_text()
    assert SEAL_POLICY.format(mount="transit", key="sealflow-seal") in deploy
