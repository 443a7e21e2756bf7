"""Transit's ``verify/:name[/:algorithm]``: which half answers, as OpenBao decides it.

The request verifies HMACs (``hmac``: ``_hmac.verify``) or signatures (``signature``), never
both: a single request gives one of the two fields, a batch gives the same one in every item,
else the request is refused whole in OpenBao's words (its ``pathVerifyWrite``). The scope is
``verify`` on the key either way, from the path, checked before the body is read
(docs/TRANSIT.md, Key types).
"""

from __future__ import annotations

from sealflow.service.keystore import KeyStore

from . import _hmac
from ._checks import key_of
from ._wire import Body, user_error


def half(fields: Body) -> str:
    """``hmac`` or ``signature``: the half that answers, or 400 in OpenBao's words."""
    batch = fields.get("batch_input")
    if batch is None:
        items = [{k: fields[k] for k in ("signature", "hmac") if fields.get(k) is not None}]
    elif isinstance(batch, list) and all(isinstance(item, dict) for item in batch):
        items = batch
    else:
        raise user_error("failed to parse batch input: batch_input must be a list of objects")
    if not items:
        raise user_error("missing batch input to process")
    signed = hashed = missing = False
    for item in items:
        if "signature" in item:
            signed = True
        elif "hmac" in item:
            hashed = True
        else:
            missing = True
    if batch is None and signed and hashed:
        raise user_error("provide one of 'signature' or 'hmac'")
    if batch is None and not (signed or hashed):
        raise user_error("neither a 'signature' nor an 'hmac' were given to verify")
    if signed and hashed:
        raise user_error(
            "elements of batch_input must all provide 'signature' or all provide 'hmac'"
        )
    if missing and signed:
        raise user_error("some elements of batch_input are missing 'signature'")
    if missing and hashed:
        raise user_error("some elements of batch_input are missing 'hmac'")
    if missing:
        raise user_error("no batch_input elements have 'signature' or 'hmac'")
    return "hmac" if hashed else "signature"


def answer(store: KeyStore, name: str, fields: Body, url: str | None) -> bytes:
    if half(fields) == "hmac":
        return _hmac.verify(store, name, fields, url)
    key = key_of(store, name, "verify")
    if not key.key_type.signs:
        raise user_error(f"key type {key.key_type.name} does not support verification")
    raise user_error("signature verification is not supported by sealflow yet")
