"""Each version's HMAC key (``hmac_key``), kept once derived.

An HKDF per request cost more than the HMAC of a small body (docs/BENCHMARKS.md, "HMAC of
records", and "Issue 28 in-process"), so the derived keys are kept by key identity and version
(``Slot``: a version's material never changes, and a key created again under a deleted key's
name is another identity). Looked up only after the keystore handed out the material, so a
deleted, trimmed or soft-deleted key is refused as ever; bounded, since keys come and go.
"""

from __future__ import annotations

from ._base import KeyInfo, Slot
from ._key_types import hmac_key

_DERIVED: dict[tuple[Slot, str], bytes] = {}
_DERIVED_MAX = 4096


def version_hmac_key(key: KeyInfo, version: int, material: bytes) -> bytes:
    """The HMAC key of ``key``'s ``version``, whose material the keystore just handed out."""
    kind = key.key_type
    if kind.name == "hmac":
        return hmac_key(kind, material)  # the material itself: nothing to keep
    slot = (key.slot(version), kind.name)
    found = _DERIVED.get(slot)
    if found is None:
        if len(_DERIVED) >= _DERIVED_MAX:
            _DERIVED.clear()
        found = _DERIVED[slot] = hmac_key(kind, material)
    return found
