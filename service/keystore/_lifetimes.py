"""Token lifetimes decided as Vault decides them: a token's TTL at creation, and a renewal's.

Pure functions of the request, the store's ``Lifetimes`` and the clock; ``_writes`` stores what
they decide. The words of the warnings and errors are Vault's (OpenBao's), so a Vault client
shows what it would show against Vault.
"""

from __future__ import annotations

from typing import NamedTuple

from sealflow.service.durations import format_duration

from ._base import Lifetimes, TokenInfo
from .errors import InvalidRequest, NotRenewable, TokenExpired, TokenNotFound

NOT_RENEWABLE = "lease is not renewable"


class Creation(NamedTuple):
    ttl: int  # 0: never expires
    explicit_max_ttl: int
    renewable: bool
    warnings: tuple[str, ...]


def capped(asked: int, cap: int) -> str:
    """Vault's warning for a TTL cut down to the effective maximum."""
    return (
        f'TTL of "{format_duration(asked)}" exceeded the effective max_ttl of'
        f' "{format_duration(cap)}"; TTL value is capped accordingly'
    )


def seconds(value: object, what: str) -> int:
    """A whole, non-negative number of seconds, or InvalidRequest naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidRequest(f"{what} must be a whole number of seconds, 0 or more, not {value!r}")
    return value


def creation(
    rules: Lifetimes,
    ttl: int | None,
    explicit_max_ttl: int,
    renewable: bool,
    expires: bool = True,
) -> Creation:
    """A new token's lifetime: ``ttl`` (None or 0: the default), cut to ``explicit_max_ttl``
    and the store's ``max_ttl``, with Vault's warning when a TTL asked for is cut. A token
    that must expire (a maximum is set) and has no TTL gets the maximum. ``expires`` False:
    never (the first-start root token), not renewable."""
    asked = 0 if ttl is None else seconds(ttl, "ttl")
    explicit = seconds(explicit_max_ttl, "explicit_max_ttl")
    if not isinstance(renewable, bool):
        raise InvalidRequest(f"renewable must be true or false, not {renewable!r}")
    if not expires:
        return Creation(0, 0, False, ())
    chosen = asked or rules.default_ttl
    warnings: list[str] = []
    for cap in (explicit, rules.max_ttl):
        if not cap:
            continue
        if not chosen:
            chosen = cap
        elif chosen > cap:
            if asked:
                warnings.append(capped(chosen, cap))
            chosen = cap
    return Creation(chosen, explicit, renewable and chosen > 0, tuple(warnings))


def within(explicit_max_ttl: int, parent: TokenInfo, now: float) -> int:
    """A child's ``explicit_max_ttl`` such that it never outlives its ``parent`` (one that
    expires): the smaller of what was asked (0: none) and the parent's whole seconds left."""
    end = parent.expire_time
    if end is None:
        return explicit_max_ttl
    left = max(int(end - now), 1)
    return min(explicit_max_ttl, left) if explicit_max_ttl else left


def renewal(
    token: TokenInfo, rules: Lifetimes, increment: int | None, now: float
) -> tuple[float, int, tuple[str, ...]]:
    """A renewal's new expiry, the TTL it grants and its warnings: ``increment`` (None or 0:
    the token's ``ttl``) from now, cut to the token's creation plus the smaller of its
    ``explicit_max_ttl`` and the store's ``max_ttl``. The token's refusals: TokenNotFound
    (revoked), TokenExpired, NotRenewable."""
    asked = 0 if increment is None else seconds(increment, "increment")
    if token.revoked:
        raise TokenNotFound(f"token {token.id!r} is revoked")
    if token.expired(now):
        raise TokenExpired(f"token {token.id!r} has expired")
    if not token.renewable or token.expire_time is None:
        raise NotRenewable(NOT_RENEWABLE)
    ttl = asked or token.ttl
    limits = [cap for cap in (token.explicit_max_ttl, rules.max_ttl) if cap]
    warnings: tuple[str, ...] = ()
    if limits:
        left = int(token.created_at + min(limits) - now)
        if ttl > left:
            warnings = (capped(ttl, left),)
            ttl = max(left, 0)
    return now + ttl, ttl, warnings
