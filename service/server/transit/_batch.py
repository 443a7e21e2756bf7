"""A request's per-item outcomes, and Transit's answer for them (its batch semantics).

A batch answers in order, each result with its ``reference``; any item with an error makes the
answer 400 (``partial_failure_response_code`` instead when at least one item succeeded), still
the whole envelope, without ``errors``. Rewrap, as in Transit, answers 200 whatever its items
did. A single request is a batch of one answered without the wrapping: its error is the
request's. A batch is answered group by group (``part``); ``answer`` puts the parts together.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from . import _ciphertext, _wire
from ._items import Item
from ._wire import Body, Reply

Answer = tuple[int, Reply]  # HTTP status, body
# A group's entries of batch_results (JSON objects with commas between, no brackets), and how
# many of them carry an error.
Part = tuple[bytes, int]
_RESULTS = b'"batch_results":[]'


class Results:
    """Per-item outcomes of one request, in input order."""

    def __init__(self, n: int) -> None:
        self.errors: list[str | None] = [None] * n
        self.values: list[Any] = [None] * n

    def fail(self, i: int, message: str) -> None:
        self.errors[i] = message

    def pending(self) -> list[int]:
        return [i for i, e in enumerate(self.errors) if e is None]


def b64(data: bytes) -> str:
    return _ciphertext.b64encode(data)


def encrypted(value: tuple[int, str] | None, error: str | None, reference: str) -> dict[str, Any]:
    if error is not None:
        return {"error": error, "reference": reference}
    assert value is not None
    return {"ciphertext": value[1], "key_version": value[0], "reference": reference}


def decrypted(value: str | None, error: str | None, reference: str) -> dict[str, Any]:
    if error is not None:
        return {"plaintext": "", "error": error, "reference": reference}
    return {"plaintext": value, "reference": reference}


def single(results: Results, shape: Callable[[Any, str | None, str], dict[str, Any]]) -> bytes:
    """A single request's answer: its one item's result without the wrapping, or its error."""
    error = results.errors[0]
    if error is not None:
        raise _wire.user_error(error)
    one = shape(results.values[0], None, "")
    del one["reference"]
    return _wire.envelope(one)


def part(
    work: list[Item],
    results: Results,
    shape: Callable[[Any, str | None, str], dict[str, Any]],
) -> Part:
    """A group's entries of ``batch_results``, and how many carry an error."""
    rows = [
        shape(value, error, item.reference)
        for value, error, item in zip(results.values, results.errors, work, strict=True)
    ]
    failed = sum(error is not None for error in results.errors)
    return orjson.dumps(rows)[1:-1], failed  # without the list's brackets


def answer(fields: Body, parts: list[Part], count: int, partial: bool) -> Answer:
    """A batch's answer from its groups' parts, in pieces: the envelope's head, the parts with
    a comma between two, the envelope's tail (nothing copied into one buffer)."""
    status, warnings = 200, []
    failed = sum(n for _, n in parts)
    if failed and partial:
        status = 400
        override = fields.get("partial_failure_response_code")
        if override is not None and failed < count:
            code = _wire.as_int(fields, "partial_failure_response_code")
            if 1 <= code <= 599:
                status = code
            else:
                warnings.append(
                    "invalid HTTP response code override from partial_failure_response_code,"
                    " reverting to 400"
                )
    head, tail = cut_envelope(warnings)
    pieces = [head]
    for rows, _ in parts:
        if rows:
            if len(pieces) > 1:
                pieces.append(b",")
            pieces.append(rows)
    pieces.append(tail)
    return status, pieces


def cut_envelope(warnings: list[str] | None = None) -> tuple[bytes, bytes]:
    """A success envelope (a new request_id) with ``batch_results`` cut open: the bytes up to
    and including its ``[``, and from its ``]`` on."""
    whole = _wire.envelope({"batch_results": []}, warnings)
    cut = whole.index(_RESULTS) + len(_RESULTS) - 1
    return whole[:cut], whole[cut:]
