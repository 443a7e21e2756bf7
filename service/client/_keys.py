"""What the admin calls return: key metadata and exported key material."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class KeyVersion:
    version: int
    created_at: datetime


@dataclass(frozen=True)
class Key:
    """A key's metadata (never its material)."""

    name: str
    algorithm: str
    exportable: bool
    latest: int
    min_decryption_version: int
    versions: tuple[KeyVersion, ...]
    # The rest of the policy that ``update_key`` sets (auto_rotate_period 0: never).
    min_encryption_version: int
    deletion_allowed: bool
    max_encryptions: int
    auto_rotate_period: float

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Key:
        versions = tuple(
            KeyVersion(int(v["version"]), datetime.fromisoformat(v["created_at"]))
            for v in obj["versions"]
        )
        return cls(
            name=obj["name"],
            algorithm=obj["algorithm"],
            exportable=bool(obj["exportable"]),
            latest=int(obj["latest"]),
            min_decryption_version=int(obj["min_decryption_version"]),
            versions=versions,
            min_encryption_version=int(obj["min_encryption_version"]),
            deletion_allowed=bool(obj["deletion_allowed"]),
            max_encryptions=int(obj["max_encryptions"]),
            auto_rotate_period=float(obj["auto_rotate_period"]),
        )


@dataclass(frozen=True)
class ExportedKey:
    """One version's material, from a key created exportable. The repr leaves it out."""

    name: str
    version: int
    algorithm: str
    material: bytes = field(repr=False)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ExportedKey:
        material = base64.b64decode(obj["key"], validate=True)
        return cls(obj["name"], int(obj["version"]), obj["algorithm"], material)
