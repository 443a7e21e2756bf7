"""Issue 26, item 2: Vault's token routes, the same hvac script on sealflow and on a real
OpenBao dev server, with the same outcomes and field sets (``Both.same``): create with a TTL,
``lookup-self`` counting down, ``renew-self`` capped at ``explicit_max_ttl`` with Vault's
warning, ``revoke-accessor``, a child revoked with its parent while an orphan survives, a child
asking for a policy its parent lacks refused, token management refused to a plain token, and
``lookup``/``renew``/``renew-accessor``/``revoke``/``revoke-self`` with their errors.

The token manager holds ``admin`` and ``encrypt:orders`` on sealflow, and on OpenBao a policy
granting ``auth/token/*`` (without ``sudo``) and ``encrypt:orders``; OpenBao adds its ``default``
policy to every token, which sealflow never shows, so policies are compared without it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import hvac

from tests.service.conftest import Server
from tests.service.transit.conftest import unique
from tests.service.transit.test_differential import Both

Call = Callable[[hvac.Client], Any]
SUBSET = {"errors": ["child policies must be subset of parent"]}


class Pair:
    """One token on each server, and hvac clients holding them."""

    def __init__(self, urls: dict[str, str], answers: dict[str, Any]) -> None:
        self.secret = {s: a["auth"]["client_token"] for s, a in answers.items()}
        self.accessor = {s: a["auth"]["accessor"] for s, a in answers.items()}
        self.both = Both(
            *(hvac.Client(url=urls[s], token=self.secret[s], strict_http=True) for s in urls)
        )
        self.urls = urls

    def of(self, what: dict[str, str]) -> Callable[[hvac.Client], str]:
        """The value for the server a client (any client) talks to."""
        return lambda c: what[next(s for s, url in self.urls.items() if url == c.url)]


def policies(answers: dict[str, Any]) -> set[tuple[str, ...]]:
    return {tuple(p for p in a["auth"]["policies"] if p != "default") for a in answers.values()}


def test_vault_token_routes_match_openbao(
    server: Server, vault: hvac.Client, openbao: hvac.Client
) -> None:
    manager_policy = unique("token-manager")
    openbao.sys.create_or_update_policy(
        manager_policy, 'path "auth/token/*" { capabilities = ["create", "read", "update"] }'
    )
    for name, path in (("encrypt:orders", "encrypt"), ("decrypt:orders", "decrypt")):
        # Named as sealflow's scopes, so that OpenBao does not warn of policies it lacks.
        grant = f'path "transit/{path}/orders" {{ capabilities = ["update"] }}'
        openbao.sys.create_or_update_policy(name, grant)
    roots = Both(vault, openbao)
    urls = {"sealflow": vault.url, "openbao": openbao.url}
    granted = {"sealflow": "admin", "openbao": manager_policy}

    def created(by: Both, call: Call) -> Pair:
        return Pair(urls, by.same(call))

    manager = created(
        roots,
        lambda c: c.auth.token.create(
            policies=[granted[roots.name(c)], "encrypt:orders"], ttl="1h", display_name="ops"
        ),
    )
    # A token with a TTL and a maximum, made by the manager.
    app_answers = manager.both.same(
        lambda c: c.auth.token.create(
            policies=["encrypt:orders"], ttl="60s", explicit_max_ttl="90s", display_name="app"
        )
    )
    assert policies(app_answers) == {("encrypt:orders",)}
    for answer in app_answers.values():
        auth = answer["auth"]
        assert (auth["lease_duration"], auth["renewable"], auth["orphan"]) == (60, True, False)
    app = Pair(urls, app_answers)

    # lookup-self counts down.
    first = app.both.same(lambda c: c.auth.token.lookup_self())
    time.sleep(1.1)
    second = app.both.same(lambda c: c.auth.token.lookup_self())
    for name in urls:
        before, after = first[name]["data"], second[name]["data"]
        assert after["ttl"] < before["ttl"] <= 60
        assert (after["creation_ttl"], after["explicit_max_ttl"]) == (60, 90)
        assert after["accessor"] == app.accessor[name]

    # renew-self past the maximum: capped, with Vault's warning.
    renewed = app.both.same(lambda c: c.auth.token.renew_self(increment="3m"))
    for answer in renewed.values():
        assert 60 < answer["auth"]["lease_duration"] <= 90
        (warning,) = answer["warnings"]
        assert warning.startswith('TTL of "3m" exceeded the effective max_ttl of "1m')
        assert warning.endswith('"; TTL value is capped accordingly')

    # A child asking for what its parent lacks; token management by a plain token.
    refused = manager.both.same(lambda c: c.auth.token.create(policies=["decrypt:orders"]))
    assert refused["sealflow"] == SUBSET
    app.both.same(lambda c: c.auth.token.create(policies=["encrypt:orders"]))
    app.both.same(lambda c: c.auth.token.lookup(app.of(manager.secret)(c)))

    # revoke-accessor ends a token.
    victim = created(roots, lambda c: c.auth.token.create(policies=["encrypt:orders"], ttl="1h"))
    roots.same(lambda c: c.auth.token.revoke_accessor(victim.of(victim.accessor)(c)))
    victim.both.same(lambda c: c.auth.token.lookup_self())
    assert victim.both(lambda c: c.auth.token.lookup_self())["sealflow"][0] == "Forbidden"

    # A child dies with its parent; an orphan does not.
    child = created(
        manager.both, lambda c: c.auth.token.create(policies=["encrypt:orders"], ttl="10m")
    )
    orphan_answers = manager.both.same(
        lambda c: c.auth.token.create_orphan(policies=["encrypt:orders"], ttl="10m")
    )
    assert {a["auth"]["orphan"] for a in orphan_answers.values()} == {True}
    orphan = Pair(urls, orphan_answers)
    roots.same(lambda c: c.auth.token.revoke(manager.of(manager.secret)(c)))
    for gone in (manager, child, app):
        refusal = gone.both.same(lambda c: c.auth.token.lookup_self())
        assert refusal["sealflow"] == {"errors": ["permission denied"]}
    orphan.both.same(lambda c: c.auth.token.lookup_self())

    # By secret and by accessor, as an administrator.
    looked = roots.same(lambda c: c.auth.token.lookup(orphan.of(orphan.secret)(c)))
    for name, answer in looked.items():
        assert answer["data"]["accessor"] == orphan.accessor[name]
        assert answer["data"]["orphan"] is True
    stranger = "s" * 43
    assert roots.same(lambda c: c.auth.token.lookup(stranger))["sealflow"] == {
        "errors": ["bad token"]
    }
    assert roots.same(lambda c: c.auth.token.renew(stranger))["sealflow"] == {
        "errors": ["token not found"]
    }
    roots.same(lambda c: c.auth.token.revoke(stranger))
    renewed_by_secret = roots.same(
        lambda c: c.auth.token.renew(orphan.of(orphan.secret)(c), increment=120)
    )
    for name, answer in renewed_by_secret.items():
        assert answer["auth"]["client_token"] == orphan.secret[name]
        assert answer["auth"]["lease_duration"] == 120
    by_accessor = roots.same(
        lambda c: c.auth.token.renew_accessor(orphan.of(orphan.accessor)(c), increment="90s")
    )
    for answer in by_accessor.values():
        assert answer["auth"]["client_token"] == ""  # the secret never leaves
        assert answer["auth"]["lease_duration"] == 90
    roots.same(lambda c: c.auth.token.renew_accessor("tok_0123456789abcdef"))
    roots.same(lambda c: c.adapter.post("/v1/auth/token/renew", json={}))
    roots.same(lambda c: c.adapter.post("/v1/auth/token/revoke", json={}))
    roots.same(lambda c: c.auth.token.create(policies=["encrypt:orders"], ttl="bogus"))
    roots.same(lambda c: c.auth.token.create(policies=["encrypt:orders"], num_uses=-1))
    # A root-like token that never expires is not renewable.
    roots.same(lambda c: c.auth.token.renew_self())

    # revoke-self.
    orphan.both.same(lambda c: c.auth.token.revoke_self())
    orphan.both.same(lambda c: c.auth.token.lookup_self())
