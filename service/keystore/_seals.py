"""The master-key providers, chosen by name from one table (``SEALFLOW_MASTER_KEY_PROVIDER``):
file, env, pkcs11, transit.

A provider (a "seal", as Vault calls what unseals it) wraps and unwraps the keystore's 32-byte
key-encryption key and its stable secret (``_kek``), and nothing else: start-up asks it once
per process, the request path never. Each row builds its provider from the settings and
raises ``KeyStoreUnavailable`` with one line saying what is wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from sealflow.service.config import Settings

from ._key_seal import KeySeal
from ._pkcs11_seal import Pkcs11Seal
from ._transit_seal import TransitSeal
from .errors import KeyStoreUnavailable


class Seal(Protocol):
    def wrap(self, kek: bytes, aad: bytes) -> bytes: ...

    def unwrap(self, blob: bytes, aad: bytes) -> bytes: ...

    def describe(self) -> dict[str, str]:
        """What names the key, nothing secret: recorded beside the wrapped KEK."""
        ...


PROVIDERS: dict[str, Callable[[Settings], Seal]] = {
    "file": KeySeal.from_settings,
    "env": KeySeal.env_from_settings,
    "pkcs11": Pkcs11Seal.from_settings,
    "transit": TransitSeal.from_settings,
}

# The providers whose key a keystore made before providers was wrapped under directly: such a
# keystore opens with one of them, its KEK being that key (``_kek.upgrade``).
HELD_KEYS = frozenset(("file", "env"))


def seal_for(settings: Settings, name: str | None = None) -> Seal:
    """The provider ``name`` (default: the settings' choice), built from the settings."""
    name = name or settings.master_key_provider
    try:
        make = PROVIDERS[name]
    except KeyError:
        raise KeyStoreUnavailable(
            f"unknown master-key provider {name!r} (known: {', '.join(PROVIDERS)})"
        ) from None
    return make(settings)
