"""The client's exceptions, and the one table from the service's error codes to them.

Every failure of a call is a ``SealflowError``: the service's answers by their ``code``
(``{"error": {"code", "message"}}``), failures of the connection as ``TransportError``.
Exceptions raised by the caller's own input or output objects (a read that fails, a full
disk) pass through unchanged. No message or repr ever holds the token.
"""

from __future__ import annotations

import json

ERROR_BODY_MAX = 64 << 10  # of an error answer, what is read (the service's are small)


class SealflowError(Exception):
    """A call failed. ``status`` is the HTTP status (None if no answer came), ``code`` the
    service's error code (None if the answer was not the service's JSON error); ``index``
    the record's position for a record of ``encrypt_many``/``decrypt_many`` that failed
    alone (None for a failure of a whole call)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        index: int | None = None,
    ):
        super().__init__(message)
        self.message, self.status, self.code, self.index = message, status, code, index

    def __str__(self) -> str:
        if self.code is not None:
            status = "" if self.status is None else f"{self.status} "
            return f"{status}{self.code}: {self.message}"
        return self.message


class TransportError(SealflowError):
    """No complete answer: the connection failed, stalled, or the response was cut off.

    A stream decrypt whose later chunk fails to authenticate in full duplex is cut off too,
    but the service names the cause first: that is ``DecryptionFailed`` (``status`` None).
    Either way, treat output received so far as invalid.
    """


class InputChanged(SealflowError):
    """A file's size, declared as Content-Length, changed while it was being sent."""


class Unauthorized(SealflowError):
    """401: the token is missing, malformed, unknown or revoked."""


class Forbidden(SealflowError):
    """403: the token lacks the scope."""


class VersionRetired(SealflowError):
    """403: the envelope's key version is below the key's min_decryption_version."""


class KeyNotFound(SealflowError):
    """404: no such key, or no such version of it."""


class DecryptionFailed(SealflowError):
    """400: the envelope did not authenticate (tag, truncation, wrong AAD or key, ...). In
    full duplex, a chunk that fails after the answer began: ``status`` None, the output
    received so far invalid."""


class MalformedEnvelope(SealflowError):
    """400: not a sealflow envelope (bad magic, mode, algorithm or key name)."""


class TooLarge(SealflowError):
    """413: a single-shot body over the service's limit."""


class ServiceUnavailable(SealflowError):
    """503 (or 429, or 507): the service is overloaded, cannot reach its keystore, or has no
    spool space now; try again later."""


ERRORS: dict[str, type[SealflowError]] = {
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "version_retired": VersionRetired,
    "key_not_found": KeyNotFound,
    "decryption_failed": DecryptionFailed,
    "malformed_envelope": MalformedEnvelope,
    "too_large": TooLarge,
    "overloaded": ServiceUnavailable,
    "too_many_requests": ServiceUnavailable,
    "keystore_unavailable": ServiceUnavailable,
    "spool_full": ServiceUnavailable,
    "insufficient_storage": ServiceUnavailable,
}


def error_from_reply(status: int, body: bytes) -> SealflowError:
    """The exception for an error answer: by its code when it is the service's JSON error."""
    try:
        error = json.loads(body)["error"]
        code, message = error["code"], error["message"]
        if not isinstance(code, str) or not isinstance(message, str):
            raise TypeError(code)
    except (ValueError, KeyError, TypeError):
        return SealflowError(f"HTTP {status}", status=status)
    return ERRORS.get(code, SealflowError)(message, status=status, code=code)
