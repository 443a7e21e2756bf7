"""The Python client library: ``Client`` and ``AsyncClient`` over the service's HTTP API.

It imports nothing of the server or the keystore: it is what an application (or the CLI)
runs on the other end of the wire. docs/API.md ("Python client library") shows it in use.
"""

from ._async import AsyncClient
from ._errors import (
    DecryptionFailed,
    Forbidden,
    InputChanged,
    KeyNotFound,
    MalformedEnvelope,
    SealflowError,
    ServiceUnavailable,
    TooLarge,
    TransportError,
    Unauthorized,
    VersionRetired,
)
from ._keys import ExportedKey, Key, KeyVersion
from ._sync import Client
from ._tokens import Token

__all__ = [
    "AsyncClient",
    "Client",
    "DecryptionFailed",
    "ExportedKey",
    "Forbidden",
    "InputChanged",
    "Key",
    "KeyNotFound",
    "KeyVersion",
    "MalformedEnvelope",
    "SealflowError",
    "ServiceUnavailable",
    "Token",
    "TooLarge",
    "TransportError",
    "Unauthorized",
    "VersionRetired",
]
