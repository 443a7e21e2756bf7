"""Transit's key lifecycle routes over the keystore (``_lifecycle`` there): ``keys/:name/trim``,
``keys/:name/soft-delete`` (DELETE) and ``keys/:name/soft-delete-restore``, in OpenBao's
order and words, each answered with the key as ``GET keys/:name`` shows it. OpenBao answers a
soft deletion or restore of no key with 204 and nothing: so does sealflow. Keystore writes run
on a thread, off the event loop."""

from __future__ import annotations

import asyncio

from sealflow.service.keystore import KeyNotFound, KeyStore

from . import _keys, _wire
from ._wire import Body


async def trim(store: KeyStore, name: str, body: Body) -> bytes:
    try:
        store.get_key(name)
    except KeyNotFound:
        raise _wire.user_error("invalid key name") from None
    if body.get("min_available_version") is None:
        raise _wire.user_error("missing min_available_version")
    wanted = _wire.as_int(body, "min_available_version")
    key = await asyncio.to_thread(store.trim_key, name, wanted)
    return _wire.envelope(await _keys.shown(store, key))


async def soft_delete(store: KeyStore, name: str) -> tuple[int, bytes]:
    try:
        key, already = await asyncio.to_thread(store.soft_delete_key, name)
    except KeyNotFound:
        return 204, b""
    warnings = ["key was already marked as soft deleted"] if already else None
    return 200, _wire.envelope(await _keys.shown(store, key), warnings)


async def restore(store: KeyStore, name: str) -> tuple[int, bytes]:
    try:
        key, already = await asyncio.to_thread(store.undo_soft_delete, name)
    except KeyNotFound:
        return 204, b""
    warnings = ["key was already restored"] if already else None
    return 200, _wire.envelope(await _keys.shown(store, key), warnings)
