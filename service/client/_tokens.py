"""What the token calls return: a token's description, and its secret once, when made."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any


def _time(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


@dataclass(frozen=True)
class Token:
    """A token's description (docs/API.md, "Token management"). ``secret`` only from
    ``create_token``, the one time the service shows it, and never in the repr; ``warnings``
    from creating or renewing (a TTL cut to a maximum)."""

    accessor: str
    scopes: tuple[str, ...]
    label: str
    created_at: datetime
    expire_time: datetime | None  # None: never expires
    ttl: int  # seconds left
    creation_ttl: int
    explicit_max_ttl: int
    renewable: bool
    num_uses: int
    uses_left: int | None  # None: unlimited
    parent: str | None
    orphan: bool
    revoked: bool
    expired: bool
    warnings: tuple[str, ...] = ()
    secret: str | None = field(default=None, repr=False)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Token:
        created = _time(float(obj["created_at"]))
        assert created is not None
        return cls(
            accessor=obj["accessor"],
            scopes=tuple(obj["scopes"]),
            label=obj["label"],
            created_at=created,
            expire_time=_time(obj["expire_time"]),
            ttl=int(obj["ttl"]),
            creation_ttl=int(obj["creation_ttl"]),
            explicit_max_ttl=int(obj["explicit_max_ttl"]),
            renewable=bool(obj["renewable"]),
            num_uses=int(obj["num_uses"]),
            uses_left=None if obj["uses_left"] is None else int(obj["uses_left"]),
            parent=obj["parent"],
            orphan=bool(obj["orphan"]),
            revoked=bool(obj["revoked"]),
            expired=bool(obj["expired"]),
            warnings=tuple(obj.get("warnings", ())),
            secret=obj.get("token"),
        )


def tokens(answer: Any) -> list[Token]:
    return [Token.from_json(t) for t in answer["tokens"]]
