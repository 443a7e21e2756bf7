"""The data routes' lane for small requests: a single-shot encrypt or decrypt that arrived
whole, answered in one synchronous call from the protocol's parser callback
(``_front.Front.lane`` does the front door's part, this module the route's).

It only ever answers success. Whatever is not the plain case (a scope that does not cover
the key, an unknown key, a retired version, a malformed, streamed or failing envelope, a body
larger than the whole-body limit, bad ``X-AAD``, a query other than the route's own, a
keystore error) is None *before any side effect*, and the request goes through the ASGI app
as if there were no lane: every refusal, with its status, metrics and log line, still comes
from the one place that makes it. The seal and the open are the same calls as
``_transfer``'s whole-body branch (``Encrypt.transfer``, ``Decrypt.transfer``).
"""

from __future__ import annotations

import os

from sealflow import engine
from sealflow.engine import NONCE_LEN, TAG_LEN, DecryptionError
from sealflow.service.envelope import MalformedEnvelope, Mode, bound_data, parse, prefix_length
from sealflow.service.keystore import KeyStoreError, TokenInfo

from .. import _auth
from .._logging import AccessRecord
from .._state import Services
from ..errors import ApiError
from ._routes import (
    DECRYPT_ANY_ROUTE,
    DECRYPT_ROUTE,
    ENCRYPT_ROUTE,
    _aad,
    lease_prefix,
    opening_material,
    sealing_lease,
)
from ._transfer import WHOLE_MAX

_KEYS = b"/v1/keys/"
_DECRYPT_ANY = b"/v1/decrypt"
URLS = (_KEYS, _DECRYPT_ANY)  # what the lane may answer (``answer`` decides)
_SINGLE = b"mode=single"
_ENVELOPE_MIN = NONCE_LEN + TAG_LEN
# The largest body the lane takes: a whole-body encrypt, or its envelope (prefix at most 75
# bytes). Longer ones go the usual way from their head.
MAX_BODY = WHOLE_MAX + 128

# (the reply's pieces, algorithm, operation) for the metrics
Answer = tuple[list[bytes], str, str]


def answer(
    svc: Services,
    token: TokenInfo,
    url: bytes,
    x_aad: bytes | None,
    body: bytes,
    log: AccessRecord,
) -> Answer | None:
    """The reply to a complete request whose token the front door has found, or None."""
    path, _, query = url.partition(b"?")
    whole = min(WHOLE_MAX, svc.crypto.inline_below - 1)
    try:
        aad = b"" if x_aad is None else _aad(x_aad)
        if path == _DECRYPT_ANY:
            return None if query else _open(svc, token, None, body, aad, whole, log)
        if b"%" in path or path.count(b"/") != 4 or not path.startswith(_KEYS):
            return None
        slash = path.rindex(b"/")
        name, action = path[len(_KEYS) : slash].decode("ascii"), path[slash + 1 :]
        if action == b"encrypt" and query == _SINGLE:
            return _seal(svc, token, name, body, aad, whole, log)
        if action == b"decrypt" and not query:
            return _open(svc, token, name, body, aad, whole, log)
    except (ApiError, KeyStoreError, MalformedEnvelope, DecryptionError, ValueError):
        pass
    return None


def _seal(
    svc: Services,
    token: TokenInfo,
    name: str,
    body: bytes,
    aad: bytes,
    whole: int,
    log: AccessRecord,
) -> Answer | None:
    if len(body) > min(whole, svc.settings.max_single_bytes):
        return None
    if not _auth.allows(token, "encrypt", name):
        return None
    lease = sealing_lease(svc, name)  # leased, as on the ASGI path
    prefix = lease_prefix(Mode.SINGLE, lease)
    alg, nonce = lease.key.algorithm, os.urandom(NONCE_LEN)
    sealed = engine.seal(alg, lease.material, nonce, bound_data(prefix, aad), body)
    svc.usage.add_bytes(lease, len(body))
    log.route, log.key, log.version, log.mode = ENCRYPT_ROUTE.path, name, lease.version, "single"
    return [prefix, nonce, sealed], alg.value, "encrypt"


def _open(
    svc: Services,
    token: TokenInfo,
    route_key: str | None,
    body: bytes,
    aad: bytes,
    whole: int,
    log: AccessRecord,
) -> Answer | None:
    n = prefix_length(body)
    if n is None or len(body) < n:
        return None
    prefix = parse(body[:n])
    if prefix.mode is not Mode.SINGLE:
        return None
    if len(body) - n > min(whole, svc.settings.max_single_bytes + _ENVELOPE_MIN):
        return None
    if len(body) - n < _ENVELOPE_MIN:
        return None
    if route_key is not None and not _auth.allows(token, "decrypt", route_key):
        return None  # the route's own scope, checked from its head on the ASGI path
    material = opening_material(svc.store, token, route_key, prefix)  # ApiError: None
    with memoryview(body) as view:
        plaintext = engine.open(
            prefix.algorithm,
            material,
            view[n : n + NONCE_LEN],
            bound_data(body[:n], aad),
            view[n + NONCE_LEN :],
        )
    route = DECRYPT_ANY_ROUTE if route_key is None else DECRYPT_ROUTE
    log.route, log.key, log.version = route.path, prefix.name, prefix.version
    log.mode = "single"
    return [plaintext], prefix.algorithm.value, "decrypt"
