"""The same hvac calls on sealflow and on a real OpenBao dev server, compared field by field.

Shapes (which keys, which JSON types) and outcomes (success, or the error class hvac raises
for the status, with its messages) must match; values that must differ (ciphertexts, times,
request ids) are compared by type, and ciphertexts by decrypting each on its own server.
Known differences are listed in docs/TRANSIT.md and left out here by name.
"""

from __future__ import annotations

import base64
import functools
import secrets
from collections.abc import Callable
from typing import Any

import hvac
import hvac.exceptions
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tests.service.conftest import Server
from tests.service.transit.conftest import unique

# Present in OpenBao's health answer only: sealflow has no cluster id.
ONLY_OPENBAO = {"cluster_id"}
Outcome = tuple[str, Any]
STRANGER = secrets.token_urlsafe(32)  # a token neither server knows


def outcome(call: Callable[[], Any]) -> Outcome:
    """("ok", the answer) or (hvac's exception class for the status, the error body)."""
    try:
        return "ok", call()
    except hvac.exceptions.VaultError as exc:
        return type(exc).__name__, exc.json if exc.json is not None else exc.errors


def shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items() if k not in ONLY_OPENBAO}
    if isinstance(value, list):  # the shapes its items take (lists differ in length)
        shapes: list[Any] = []
        for item in map(shape, value):
            if item not in shapes:
                shapes.append(item)
        return shapes
    return type(value).__name__


class Both:
    """An hvac call made on both servers; the test compares what each answered."""

    def __init__(self, sealflow: hvac.Client, openbao: hvac.Client) -> None:
        self.clients = {"sealflow": sealflow, "openbao": openbao}

    def __call__(self, call: Callable[[hvac.Client], Any]) -> dict[str, Outcome]:
        return {server: outcome(functools.partial(call, c)) for server, c in self.clients.items()}

    def name(self, client: hvac.Client) -> str:
        return next(server for server, c in self.clients.items() if c is client)

    def same(self, call: Callable[[hvac.Client], Any]) -> dict[str, Any]:
        """Call on both; assert the same outcome class and shape; the answers by server."""
        answers = self(call)
        (kind_s, body_s), (kind_o, body_o) = answers["sealflow"], answers["openbao"]
        assert kind_s == kind_o, answers
        if kind_s == "ok" or (isinstance(body_s, dict) and "data" in body_s):
            # sealflow's one addition to a key's metadata (docs/TRANSIT.md), beside Transit's.
            ours = shape(body_s)
            if isinstance(ours, dict) and isinstance(ours.get("data"), dict):
                ours["data"].pop("sealflow_usage", None)
            assert ours == shape(body_o), answers  # incl. a batch's 400 envelope
        else:
            assert body_s == body_o, answers  # errors: the same messages
        return {server: body for server, (_, body) in answers.items()}


@pytest.fixture
def both(vault: hvac.Client, openbao: hvac.Client) -> Both:
    return Both(vault, openbao)


def transit(client: hvac.Client) -> Any:
    return client.secrets.transit


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_key_lifecycle_and_data_calls(both: Both) -> None:
    name = unique("diff")
    both.same(lambda c: transit(c).create_key(name, exportable=True))
    both.same(lambda c: transit(c).read_key(name))
    both.same(lambda c: transit(c).list_keys())
    both.same(lambda c: transit(c).read_key(unique("absent")))

    sealed = both.same(lambda c: transit(c).encrypt_data(name, b64(b"hello")))
    for server, client in both.clients.items():
        ciphertext = sealed[server]["data"]["ciphertext"]
        opened = client.secrets.transit.decrypt_data(name, ciphertext)["data"]["plaintext"]
        assert base64.b64decode(opened) == b"hello"
    aad = b64(b"context")
    with_aad = both.same(lambda c: transit(c).encrypt_data(name, b64(b"x"), associated_data=aad))

    def own(answers: dict[str, Any], c: hvac.Client) -> str:
        return str(answers[both.name(c)]["data"]["ciphertext"])

    both.same(lambda c: transit(c).decrypt_data(name, own(with_aad, c)))

    both.same(lambda c: transit(c).rotate_key(name))
    both.same(lambda c: transit(c).rewrap_data(name, own(sealed, c)))
    both.same(lambda c: transit(c).update_key_configuration(name, min_decryption_version=2))
    both.same(lambda c: transit(c).decrypt_data(name, own(sealed, c)))
    both.same(lambda c: transit(c).export_key(name, "encryption-key"))
    both.same(lambda c: transit(c).export_key(name, "encryption-key", "1"))
    both.same(lambda c: transit(c).export_key(name, "encryption-key", "latest"))
    both.same(lambda c: transit(c).update_key_configuration(name, min_decryption_version=9))

    locked = unique("diff")
    both.same(lambda c: transit(c).create_key(locked))
    both.same(lambda c: transit(c).export_key(locked, "encryption-key"))
    both.same(lambda c: transit(c).read_key(locked))


def test_data_keys(both: Both) -> None:
    name = unique("diff")
    both.same(lambda c: transit(c).create_key(name))

    def made(kind: str, **fields: Any) -> Callable[[hvac.Client], Any]:
        # hvac's generate_data_key has no key_version: the route through hvac's adapter.
        path = f"/v1/transit/datakey/{kind}/{name}"
        return lambda c: c.adapter.post(path, json=fields)

    for kind in ("plaintext", "wrapped"):
        for bits in (128, 256, 512):
            answers = both.same(made(kind, bits=bits))
            for server, client in both.clients.items():
                data = answers[server]["data"]
                opened = transit(client).decrypt_data(name, data["ciphertext"])["data"]
                assert len(base64.b64decode(opened["plaintext"])) == bits // 8
                if kind == "plaintext":
                    assert opened["plaintext"] == data["plaintext"]
        both.same(made(kind, bits=64))
        both.same(made(kind, key_version=3))
        both.same(made(kind, context="!!"))
    both.same(lambda c: transit(c).generate_data_key(unique("absent"), "wrapped"))
    both.same(lambda c: transit(c).generate_data_key(name, "other"))


@pytest.mark.parametrize(
    "ciphertext",
    [
        "vault:v9:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "vault:v1:AAAA",
        "vault:v1:AAA",
        "vault:v1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "vaul:v1:AAAA",
        "vault:vx:AAAA",
        "vault:v1",
        # Versions outside what a key can have (issue 24, item 9): past Go's int64, past
        # Python's 4,300-digit int() limit, past 2^31, negative, signed.
        "vault:v9223372036854775808:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "vault:v" + "9" * 5000 + ":AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "vault:v2147483648:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "vault:v9223372036854775807:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "vault:v-5:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "vault:v+1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "vault:v-9223372036854775809:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "vault:v" + "0" * 5000 + "1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    ],
)
def test_decrypt_errors(both: Both, ciphertext: str) -> None:
    name = unique("diff")
    both.same(lambda c: c.secrets.transit.create_key(name))
    both.same(lambda c: c.secrets.transit.decrypt_data(name, ciphertext))


def test_numbers_beyond_an_int64_are_refused_as_openbao_refuses_them(both: Both) -> None:
    """Issue 24, item 9: every number Transit reads from text, however long (a 500 before)."""
    name = unique("diff")
    both.same(lambda c: transit(c).create_key(name, exportable=True))
    huge = "9" * 5000
    export = f"/v1/transit/export/encryption-key/{name}/"

    def exported(version: str) -> Callable[[hvac.Client], Any]:
        return lambda c: c.adapter.get(export + version)

    def rotating(period: str) -> Callable[[hvac.Client], Any]:
        return lambda c: transit(c).update_key_configuration(name, auto_rotate_period=period)

    for version in (huge, "99999999999999999999", "+-+1", "1" + "0" * 19, "0" * 5000 + "1"):
        both.same(exported(version))
    for period in (f"{huge}h", "99999999999999999999h"):
        both.same(rotating(period))


def test_encrypt_errors_and_batches(both: Both) -> None:
    name = unique("diff")
    both.same(lambda c: transit(c).create_key(name))
    both.same(lambda c: transit(c).encrypt_data(name, "aGVsbG8"))
    both.same(lambda c: transit(c).encrypt_data(name, "aGk=", key_version=2))
    both.same(lambda c: transit(c).encrypt_data(name, batch_input=[]))
    batch = [
        {"plaintext": b64(b"one"), "reference": "a"},
        {"plaintext": "!!"},
        {"plaintext": b64(b"three"), "key_version": 5, "reference": "c"},
    ]
    answers = both.same(lambda c: transit(c).encrypt_data(name, batch_input=batch))
    errors = {s: [r.get("error") for r in a["data"]["batch_results"]] for s, a in answers.items()}
    assert errors["sealflow"] == errors["openbao"]
    for server, client in both.clients.items():
        good = answers[server]["data"]["batch_results"][0]["ciphertext"]
        to_open = [{"ciphertext": good, "reference": "r"}, {"ciphertext": "vault:v7:AAAA"}]
        opened = outcome(functools.partial(transit(client).decrypt_data, name, batch_input=to_open))
        assert opened[0] == "InvalidRequest"
        results = opened[1]["data"]["batch_results"]
        assert base64.b64decode(results[0]["plaintext"]) == b"one"
        assert results[1] == {
            "plaintext": "",
            "error": "invalid ciphertext: version is too new",
            "reference": "",
        }


def test_list_method(vault: hvac.Client, openbao: hvac.Client) -> None:
    """hvac's default clients (strict_http=False) list with Vault's LIST method."""
    plain = Both(
        hvac.Client(url=vault.url, token=vault.token),
        hvac.Client(url=openbao.url, token=openbao.token),
    )
    name = unique("diff")
    plain.same(lambda c: transit(c).create_key(name))
    listed = plain.same(lambda c: transit(c).list_keys())
    assert all(name in answer["data"]["keys"] for answer in listed.values())
    plain.same(lambda c: c.adapter.list(f"/v1/transit/encrypt/{name}"))
    plain.same(lambda c: c.adapter.list(f"/v1/transit/keys/{name}"))
    plain.same(lambda c: c.adapter.get(f"/v1/transit/encrypt/{name}"))
    plain.same(lambda c: c.adapter.get("/v1/transit/nonsense"))


def test_tokens_and_health(both: Both, vault: hvac.Client, openbao: hvac.Client) -> None:
    both.same(lambda c: c.auth.token.lookup_self())
    both.same(lambda c: c.sys.read_health_status(method="GET"))
    strangers = Both(
        hvac.Client(url=vault.url, token=STRANGER, strict_http=True),
        hvac.Client(url=openbao.url, token=STRANGER, strict_http=True),
    )
    strangers.same(lambda c: c.secrets.transit.encrypt_data("k", "aGk="))
    strangers.same(lambda c: c.secrets.transit.list_keys())
    assert [c.is_authenticated() for c in strangers.clients.values()] == [False, False]


def sealflow_token(server: Server, *scopes: str) -> tuple[str, str]:
    """A token made by ``sealflow tokens create``: its secret (stdout) and accessor (stderr)."""
    flags = [flag for scope in scopes for flag in ("--scope", scope)]
    done = server.cli("tokens", "create", *flags, "--label", "diff")
    assert done.returncode == 0, done.stderr
    accessor = done.stderr.decode().split("token id ", 1)[1].split(",")[0]
    return done.stdout.decode().strip(), accessor


def openbao_token(openbao: hvac.Client, *policies: str) -> tuple[str, str]:
    auth = openbao.auth.token.create(policies=list(policies))["auth"]
    return auth["client_token"], auth["accessor"]


def test_lookup_and_revoke_by_accessor(
    both: Both, server: Server, vault: hvac.Client, openbao: hvac.Client
) -> None:
    """Issue 25, item 1: ``auth/token/lookup-accessor`` and ``revoke-accessor`` by an admin (the
    root token), their refusals and errors, and the revoked token refused afterwards. Each
    server's target is a token that never expires (OpenBao's: the root policy, as only such a
    token has no TTL), so the two lookups have the same shape; each server's plain token is one
    a token manager does not hold (``encrypt:*``; OpenBao's default policy)."""
    target = {
        "sealflow": sealflow_token(server, "encrypt:*"),
        "openbao": openbao_token(openbao, "root"),
    }
    plain = {
        "sealflow": sealflow_token(server, "encrypt:*"),
        "openbao": openbao_token(openbao, "default"),
    }
    urls = {"sealflow": vault.url, "openbao": openbao.url}

    def holding(tokens: dict[str, tuple[str, str]]) -> Both:
        return Both(*(hvac.Client(url=urls[s], token=tokens[s][0], strict_http=True) for s in urls))

    def accessor_of(tokens: dict[str, tuple[str, str]]) -> Callable[[hvac.Client], str]:
        """The accessor of the token made on the server a client (any client) talks to."""
        return lambda c: tokens[next(s for s, url in urls.items() if url == c.url)][1]

    target_accessor = accessor_of(target)
    found = both.same(lambda c: c.auth.token.lookup_accessor(target_accessor(c)))
    for server_name, answer in found.items():
        data = answer["data"]
        assert data["accessor"] == target[server_name][1]
        assert data["id"] == ""  # the secret never leaves
        assert target[server_name][0] not in str(answer)

    # Errors: a missing, empty, unknown or mistyped accessor, a method the route does not take.
    def sent(method: str, path: str, **kwargs: Any) -> Callable[[hvac.Client], Any]:
        return lambda c: getattr(c.adapter, method)(path, **kwargs)

    def by_accessor(name: str, accessor: str) -> Callable[[hvac.Client], Any]:
        return lambda c: getattr(c.auth.token, name)(accessor)

    post = "/v1/auth/token/lookup-accessor"
    values: list[Any] = [None, "", {}, [], True, 1.5]
    for path in (post, "/v1/auth/token/revoke-accessor"):
        for body in [{}, *({"accessor": value} for value in values)]:
            both.same(sent("post", path, json=body))
        both.same(sent("get", path))
        both.same(sent("put", path, json={"accessor": 12}))
    for unknown in ("tok_0123456789abcdef", "nope", "x" * 200):
        both.same(by_accessor("lookup_accessor", unknown))
        absent = both.same(by_accessor("revoke_accessor", unknown))
        assert {a["warnings"][0] for a in absent.values()} == {"No token found with this accessor"}
    # A body that is not JSON: 400 on both, in each parser's words (docs/TRANSIT.md).
    broken = both(lambda c: c.adapter.post(post, data='{"accessor":'))
    assert {kind for kind, _ in broken.values()} == {"InvalidRequest"}
    for _, body in broken.values():
        assert body["errors"][0].startswith("failed to "), body
    # Token management is not a plain token's, not even for itself (Vault's default policy).
    plains = holding(plain)
    plain_accessor = accessor_of(plain)
    refused = plains.same(lambda c: c.auth.token.lookup_accessor(plain_accessor(c)))
    assert refused["sealflow"] == {"errors": ["1 error occurred:\n\t* permission denied\n\n"]}
    plains.same(lambda c: c.auth.token.revoke_accessor(target_accessor(c)))
    strangers = Both(
        *(hvac.Client(url=url, token=STRANGER, strict_http=True) for url in urls.values())
    )
    strangers.same(lambda c: c.auth.token.revoke_accessor(target_accessor(c)))
    # Revoked: 204, then the token is refused, and its accessor names nothing.
    targets = holding(target)
    targets.same(lambda c: c.auth.token.lookup_self())
    done = both.same(lambda c: c.auth.token.revoke_accessor(target_accessor(c)))
    assert {answer.status_code for answer in done.values()} == {204}
    targets.same(lambda c: c.auth.token.lookup_self())
    targets.same(lambda c: transit(c).list_keys())
    both.same(lambda c: c.auth.token.lookup_accessor(target_accessor(c)))
    both.same(lambda c: c.auth.token.revoke_accessor(target_accessor(c)))
    lives = plains(lambda c: c.auth.token.lookup_self())  # the other token lives on (its
    assert {kind for kind, _ in lives.values()} == {"ok"}  # TTL on OpenBao: not the same shape)


def test_min_encryption_version_deletion_and_vault_names(both: Both) -> None:
    name = f"Diff_{secrets.token_hex(4)}"  # one of Vault's names, outside sealflow's native rule
    both.same(lambda c: transit(c).create_key(name))
    both.same(lambda c: transit(c).rotate_key(name))
    both.same(lambda c: transit(c).rotate_key(name))
    answers = both.same(
        lambda c: transit(c).update_key_configuration(name, min_encryption_version=2)
    )
    assert {a["data"]["min_encryption_version"] for a in answers.values()} == {2}
    both.same(lambda c: transit(c).read_key(name))
    both.same(lambda c: transit(c).encrypt_data(name, b64(b"x"), key_version=1))
    both.same(lambda c: transit(c).encrypt_data(name, b64(b"x"), key_version=2))
    batch = [{"plaintext": b64(b"a"), "key_version": 1}, {"plaintext": b64(b"b")}]
    mixed = both.same(lambda c: transit(c).encrypt_data(name, batch_input=batch))
    errors = {s: [r.get("error") for r in a["data"]["batch_results"]] for s, a in mixed.items()}
    assert errors["sealflow"] == errors["openbao"]

    def config(**fields: Any) -> Callable[[hvac.Client], Any]:
        # The adapter: hvac refuses some of these itself before they reach a server.
        return lambda c: c.adapter.post(f"/v1/transit/keys/{name}/config", json=fields)

    both.same(config(min_encryption_version=9))
    both.same(config(min_encryption_version=-1))
    both.same(config(min_decryption_version=3))
    both.same(config(min_decryption_version=3, min_encryption_version=3))
    both.same(config(min_encryption_version=0))

    both.same(lambda c: transit(c).delete_key(name))
    absent = unique("absent")
    both.same(lambda c: transit(c).delete_key(absent))
    allowed = both.same(config(deletion_allowed=True))
    assert {a["data"]["deletion_allowed"] for a in allowed.values()} == {True}
    deleted = both.same(lambda c: transit(c).delete_key(name))
    assert {a.status_code for a in deleted.values()} == {204}
    both.same(lambda c: transit(c).read_key(name))
    both.same(lambda c: transit(c).create_key(name))
    again = both.same(lambda c: transit(c).read_key(name))
    assert {a["data"]["latest_version"] for a in again.values()} == {1}


def test_a_key_made_exportable(both: Both) -> None:
    """config exportable false -> true as Transit: the key exports every version, whose
    material opens that server's own ciphertext; true -> false is ignored, without an error."""
    name = unique("diff")
    both.same(lambda c: transit(c).create_key(name))
    sealed = both.same(lambda c: transit(c).encrypt_data(name, b64(b"before")))
    both.same(lambda c: transit(c).rotate_key(name))
    both.same(lambda c: transit(c).export_key(name, "encryption-key"))  # refused on both
    made = both.same(lambda c: transit(c).update_key_configuration(name, exportable=True))
    assert {a["data"]["exportable"] for a in made.values()} == {True}
    exported = both.same(lambda c: transit(c).export_key(name, "encryption-key"))
    for server, answer in exported.items():
        keys = answer["data"]["keys"]
        assert sorted(keys) == ["1", "2"]
        raw = base64.b64decode(sealed[server]["data"]["ciphertext"].split(":", 2)[2])
        opened = AESGCM(base64.b64decode(keys["1"])).decrypt(raw[:12], raw[12:], None)
        assert opened == b"before"
    kept = both.same(lambda c: transit(c).update_key_configuration(name, exportable=False))
    assert {a["data"]["exportable"] for a in kept.values()} == {True}
    read = both.same(lambda c: transit(c).read_key(name))
    assert {a["data"]["exportable"] for a in read.values()} == {True}


def test_a_48_mib_plaintext_works_on_sealflow_and_not_on_openbao(
    vault: hvac.Client, openbao: hvac.Client
) -> None:
    """Transit's largest payloads: 48 MiB of plaintext (64 MiB of base64) round trips on
    sealflow with its default limits; OpenBao refuses the request (Vault caps them at 32 MiB)."""
    plaintext = secrets.token_bytes(48 * 1024 * 1024)
    encoded = b64(plaintext)
    name = unique("large")
    transit(vault).create_key(name)
    sealed = transit(vault).encrypt_data(name, encoded)["data"]["ciphertext"]
    opened = transit(vault).decrypt_data(name, sealed)["data"]["plaintext"]
    assert base64.b64decode(opened) == plaintext
    transit(openbao).create_key(name)
    with pytest.raises(hvac.exceptions.VaultError):
        transit(openbao).encrypt_data(name, encoded)
