"""The checks Transit makes of a request before any sealing or opening, in its order and with
its messages: the key, each item's base64, the version an encrypt asks for or a ciphertext
names, ``associated_data`` (base64, and outside the native envelope's AAD space). An item that
fails one is failed in the request's ``Results`` and left out of every later step."""

from __future__ import annotations

from sealflow.engine import Algorithm
from sealflow.service.envelope import in_native_domain
from sealflow.service.keystore import SOFT_DELETED, KeyInfo, KeyNotFound, KeyStore

from . import _ciphertext, _derive, _public, _wire
from ._batch import Results
from ._ciphertext import CiphertextError
from ._crypto import Derivation
from ._items import Item

KEY_NOT_FOUND = "encryption key not found"
RESERVED_AAD = (
    "may not begin with the sealflow envelope magic (SFL1 and a mode byte are reserved for"
    " native envelopes)"
)
_VERSION_NEGATIVE = "requested version for encryption is negative"
_VERSION_TOO_HIGH = "requested version for encryption is higher than the latest key version"
_VERSION_TOO_LOW = (
    "requested version for encryption is less than the minimum encryption key version"
)


def known(store: KeyStore, name: str) -> bool:
    """Whether the key is in the keystore's cache: if not, ``key_of`` reads the keystore, so
    the callers on the event loop call it from a thread."""
    try:
        store.get_key(name)
    except KeyNotFound:
        return False
    return True


def key_of(store: KeyStore, name: str, operation: str = "encrypt") -> KeyInfo:
    """The key; else 400 in Transit's words, for a public-key-only key (``_public.refuse``,
    a keystore read: never on the event loop, see ``known``), or a soft-deleted one (OpenBao's
    words)."""
    try:
        key = store.get_key(name)
    except KeyNotFound:
        _public.refuse(store, name, operation)
        raise _wire.user_error(KEY_NOT_FOUND) from None
    if key.soft_deleted:
        raise _wire.user_error(SOFT_DELETED)
    return key


def decode_all(work: list[Item], results: Results) -> dict[int, bytes]:
    decoded = {}
    for i, item in enumerate(work):
        try:
            decoded[i] = _ciphertext.b64decode(item.text)
        except CiphertextError as exc:
            results.fail(i, str(exc))
    return decoded


def version_error(key: KeyInfo, version: int) -> str | None:
    """Transit's refusal of a ``key_version`` to encrypt with (0: the latest), or None."""
    if version < 0:
        return _VERSION_NEGATIVE
    if version > key.latest:
        return _VERSION_TOO_HIGH
    if 0 < version < key.min_encryption_version:  # 0: the latest, never below it
        return _VERSION_TOO_LOW
    return None


def wanted_versions(key: KeyInfo, work: list[Item], results: Results) -> dict[int, int]:
    """The version each pending item asks to be sealed under, 0 for the latest (which one that
    is, the lease says: ``_leases``)."""
    pending = results.pending()
    if not any(item.version for item in work):  # the usual batch: every item the latest
        return dict.fromkeys(pending, 0)
    wanted = {}
    for i in pending:
        error = version_error(key, work[i].version)
        if error is None:
            wanted[i] = work[i].version
        else:
            results.fail(i, error)
    return wanted


def parse_all(
    key: KeyInfo, work: list[Item], results: Results
) -> tuple[dict[int, int], dict[int, bytes]]:
    """Each ciphertext's version and bytes; an item failed already (its context) is left as
    it is."""
    versions, payloads = {}, {}
    errors = results.errors
    for i, item in enumerate(work):
        if errors[i] is not None:
            continue
        if not item.text:
            results.fail(i, "missing ciphertext to decrypt")
            continue
        try:
            version, text = _ciphertext.split(item.text)
            if version > key.latest:
                raise CiphertextError(_ciphertext.TOO_NEW)
            if version < key.min_decryption_version:
                raise CiphertextError(_ciphertext.TOO_OLD)
            payloads[i] = _ciphertext.payload(text)
        except CiphertextError as exc:
            results.fail(i, str(exc))
            continue
        versions[i] = version
    return versions, payloads


def aads(work: list[Item], results: Results, offset: int = 0) -> dict[int, bytes]:
    """Each pending item's ``associated_data``, decoded; an item whose AAD is not base64, or
    begins as a native envelope's AAD does (``reserved_aad``), is failed. ``offset``: the
    request's index of ``work[0]`` (a group's first item), for the messages."""
    pending = results.pending()
    if not any(item.aad for item in work):
        return dict.fromkeys(pending, b"")
    decoded = {}
    known = {"": b""}  # each value decoded once: a batch usually repeats a few
    for i in pending:
        text = work[i].aad
        aad = known.get(text)
        if aad is None:
            try:
                aad = known[text] = _ciphertext.b64decode(text)
            except CiphertextError as exc:
                results.fail(i, f"'[{offset + i}].associated_data' {exc}")
                continue
        if reserved_aad(aad):
            results.fail(i, f"'[{offset + i}].associated_data' {RESERVED_AAD}")
        else:
            decoded[i] = aad
    return decoded


def reserved_aad(aad: bytes) -> bool:
    """Whether Transit must refuse to seal or open under this AAD: one that begins as every
    native envelope's AAD does (``SFL1`` and a mode byte). Transit's ciphertext is the native
    single-shot body under the same material, so only the AAD keeps a native envelope from
    opening here re-encoded, and a ciphertext made here from opening natively behind a prefix
    (docs/API.md, Domain separation)."""
    return in_native_domain(aad)


def materials(
    store: KeyStore, key: KeyInfo, versions: dict[int, int], results: Results
) -> dict[int, bytes]:
    """The material of each version the pending items' ciphertexts name, to open them (fetched
    once per version; sealing takes its material from its lease instead)."""
    wanted = {versions[i] for i in results.pending() if i in versions}
    return {version: store.key_material(key.name, version) for version in wanted}


def asks_version(raw: bytes) -> bool:
    """Whether a request may ask for a key version by number (leased one sealing at a time
    from the keystore, never from a block: ``UsageMeter``): then its leases are taken off the
    event loop. Never wrong that way: JSON can spell the name ``key_version`` other than as
    these bytes only with a ``\\u`` escape, and a body with any escape is taken to ask."""
    return b'"key_version"' in raw or b"\\u" in raw


def contexts(work: list[Item], results: Results, texts: bool = False) -> dict[int, bytes]:
    """Each pending item's ``context``, decoded (Transit checks it on every key, derived or
    not); an item whose context is not base64 is failed in Go's words, as Transit does.
    ``texts``: only the items that have a text (a ciphertext's absence is said first)."""
    if not any(item.context for item in work):
        return {}
    decoded = {}
    for i in results.pending():
        item = work[i]
        if not item.context or (texts and not item.text):
            continue
        try:
            decoded[i] = _ciphertext.b64decode(item.context)
        except CiphertextError as exc:
            results.fail(i, str(exc))
    return decoded


def cipher(key: KeyInfo) -> Algorithm:
    """The AEAD Transit seals and opens a key's items with: a derived key's too, whose items
    are then sealed under their context's key (``derivation``, ``_crypto``); for any other key
    ``KeyInfo.algorithm``, which refuses the types that do not encrypt."""
    aead = key.key_type.aead
    if aead is not None and key.key_type.derived:
        return aead
    return key.algorithm


def derivation(key: KeyInfo, decoded: dict[int, bytes], results: Results) -> Derivation | None:
    """How a derived key's pending items are sealed or opened (``_derive``): each under its
    context, each pending item without one failed in Transit's words; None for a key that is
    not derived (its items' contexts are ignored, as Transit ignores them)."""
    kind = key.key_type
    if not kind.derived:
        return None
    for i in results.pending():
        if not decoded.get(i):  # absent, or empty once decoded (``"\\n"``): Transit's refusal
            results.fail(i, _derive.MISSING_CONTEXT)
    return Derivation(decoded, kind.convergent, kind.kdf)
