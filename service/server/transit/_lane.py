"""Transit's part of the small-request lane (``_front.Front.lane_answer``, docs/SERVICE.md): a
single-item ``encrypt/:name`` that arrived whole, answered in one synchronous call.

As for the data routes, the lane only answers success: a batch, a query, a scope that does not
cover the key, anything Transit refuses (bad JSON, bad base64, an unknown key or version), an
error of any kind, is None before any side effect, and the request goes through the ASGI app,
which answers it in Vault's shape. The answer is ``_encrypt.encrypt_now``'s: the same checks,
lease, seal and envelope as ``_encrypt.encrypt``.
"""

from __future__ import annotations

from sealflow.service.keystore import KeyStoreError, TokenInfo

from .. import _auth
from .._logging import AccessRecord
from .._state import Services
from ..errors import ApiError
from . import _encrypt, _wire

HEADERS = b"content-type: application/json\r\ncache-control: no-store\r\ncontent-length: %d\r\n\r\n"


def answer(
    svc: Services, token: TokenInfo, under: bytes, url: bytes, body: bytes, log: AccessRecord
) -> bytes | None:
    """The JSON answer to ``POST <under><name>`` (``under``: the mount's ``/encrypt/``), or
    None; ``log`` gets the key."""
    name_bytes = url[len(under) :]
    if b"/" in name_bytes or b"?" in name_bytes or b"%" in name_bytes or not name_bytes:
        return None
    name = name_bytes.decode("ascii", "replace")
    if not _auth.allows(token, "encrypt", name):
        return None
    try:
        parsed = _wire.parse(body)
        if parsed.get("batch_input") is not None:
            return None  # batches go the usual way (they seal on the crypto pool when large)
        status, answered = _encrypt.encrypt_now(svc, name, parsed)
    except (ApiError, KeyStoreError, ValueError):
        return None
    if status != 200:
        return None
    log.key = name
    return answered
