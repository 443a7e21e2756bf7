"""A request's items: ``batch_input``, or the one item its top-level fields make.

Transit treats a single request as a batch of one and answers it without the batch wrapping;
``batch_input`` items are read like OpenBao's ``decodeBatchRequestItems`` (a field of the
wrong type is an error naming it, ``null`` counts as absent). Malformed ``batch_input`` is a
400 here, where OpenBao answers 500 (docs/TRANSIT.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ApiError
from . import _wire
from ._wire import Body

MISSING_BATCH = "missing batch input to process"
_STRING = (str, type(None))


@dataclass(slots=True)
class Item:
    text: str  # base64 plaintext (encrypt) or a vault:v ciphertext (decrypt, rewrap)
    version: int  # key_version; 0 is the latest
    aad: str  # base64 associated_data
    reference: str


def items(body: Body, field: str, missing: str) -> tuple[list[Item], bool]:
    """The request's items and whether they came from ``batch_input``.

    ``field`` is ``plaintext`` or ``ciphertext``; ``missing`` is Transit's message when the
    single request lacks it.
    """
    batch = body.get("batch_input")
    if batch is not None:
        parsed = _batch(batch, field)
        if not parsed:
            raise _wire.user_error(MISSING_BATCH)
        return parsed, True
    text = _wire.as_str(body, field)
    if field not in body or body[field] is None or (field == "ciphertext" and not text):
        raise _wire.user_error(missing)
    version = _wire.as_int(body, "key_version")
    return [Item(text, version, _wire.as_str(body, "associated_data"), "")], False


def _batch(raw: object, field: str) -> list[Item]:
    if not isinstance(raw, list):
        raise _parse_error([f"source data must be an array or slice, got {_go_type(raw)}"])
    found: list[Item] = []
    problems: list[str] = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise _parse_error([f"[{i}] expected a map, got '{_go_type(entry)}'"])
        # Inline type checks: this loop runs once per item of batches of thousands.
        text = entry.get(field)
        aad = entry.get("associated_data")
        reference = entry.get("reference")
        if type(text) is not str or type(aad) not in _STRING or type(reference) not in _STRING:
            text, aad, reference = (
                _string(entry, name, i, problems)
                for name in (field, "associated_data", "reference")
            )
            if field not in entry and field == "plaintext":
                problems.append(f"'[{i}].plaintext' missing plaintext to encrypt")
        version = entry.get("key_version")
        if version is not None and type(version) is not int:
            try:
                version = _wire.as_int(entry, "key_version")
            except ApiError:
                problems.append(
                    f"'[{i}].key_version' expected type 'int', got unconvertible type "
                    f"'{_go_type(version)}'"
                )
                version = 0
        found.append(Item(text or "", version or 0, aad or "", reference or ""))
    if problems:
        raise _parse_error(problems)
    return found


def _string(entry: dict[str, Any], name: str, i: int, problems: list[str]) -> str | None:
    value = entry.get(name)
    if value is None or isinstance(value, str):
        return value
    problems.append(
        f"'[{i}].{name}' expected type 'string', got unconvertible type '{_go_type(value)}'"
    )
    return None


def _parse_error(problems: list[str]) -> ApiError:
    return _wire.user_error("failed to parse batch input: " + "; ".join(problems))


def _go_type(value: object) -> str:
    """How Go names the type a JSON value decodes to, for messages like OpenBao's."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "json.Number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "[]interface {}"
    return "map[string]interface {}"
