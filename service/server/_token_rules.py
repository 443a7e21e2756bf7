"""Who may make which token, for both APIs' token routes (``admin._tokens`` natively,
``transit._token_writes`` for Vault's): one rule, so the two cannot drift apart.

Only an ``admin`` token creates tokens or acts on another token (the front doors refuse the rest
from the head), and it creates only tokens whose scopes it holds itself (``missing``): a glob
covers the narrower scopes it matches (``encrypt:orders*`` covers ``encrypt:orders-eu`` and
``encrypt:orders-eu*``), ``admin`` covers only ``admin``. So an ``admin``-only token cannot mint
data scopes for itself or anyone (separation of duties); the first-start root token has every
scope. A child is recorded with its creator as parent and, unless orphan, lives within it
(``KeyStore.create_token``) and is revoked with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import NamedTuple

from sealflow.service.keystore import KeyStore, TokenInfo

_GLOB = frozenset("*?[]!")


class Minted(NamedTuple):
    token: TokenInfo
    secret: str
    warnings: tuple[str, ...]


def covers(held: str, wanted: str) -> bool:
    """Whether scope ``held`` grants everything scope ``wanted`` does. A plain name is covered
    by a glob that matches it; a glob only by itself, by ``<action>:*``, or by a glob that is a
    plain prefix and ``*`` (``orders*``) and begins it: anything subtler is refused, which is
    the safe side."""
    if held == wanted:
        return True
    action, _, pattern = held.partition(":")
    asked, _, name = wanted.partition(":")
    if not pattern or action != asked or not name:
        return False  # ``admin`` covers only itself; actions never cross
    if not _GLOB.intersection(name):
        return fnmatchcase(name, pattern)
    prefix = pattern[:-1]
    return pattern.endswith("*") and not _GLOB.intersection(prefix) and name.startswith(prefix)


def missing(parent: TokenInfo, scopes: Iterable[str]) -> list[str]:
    """The scopes asked for that ``parent`` does not hold (empty: it may grant them all)."""
    return [s for s in scopes if not any(covers(held, s) for held in parent.scopes)]


def mint(
    store: KeyStore,
    parent: TokenInfo,
    scopes: list[str],
    label: str,
    *,
    ttl: int | None,
    explicit_max_ttl: int,
    renewable: bool,
    num_uses: int,
    orphan: bool,
) -> Minted:
    """A new token made by ``parent``, with Vault's warnings for a TTL that was cut. The caller
    checks ``missing`` first, to refuse in its API's words; checked again here, so that no
    path mints a scope its parent lacks (PermissionError: a 500, never a token). A keystore
    write: called off the event loop."""
    if missing(parent, scopes):
        raise PermissionError("a token may grant only scopes it holds")
    warnings = store.creation_warnings(
        ttl, explicit_max_ttl, renewable, parent=None if orphan else parent
    )
    token, secret = store.create_token(
        scopes,
        label,
        ttl=ttl,
        explicit_max_ttl=explicit_max_ttl,
        renewable=renewable,
        num_uses=num_uses,
        parent=parent.id,
        orphan=orphan,
    )
    return Minted(token, secret, warnings)
