"""A request's per-item outcomes, and Transit's answer for them (its batch semantics).

A batch answers in order, each result with its ``reference``; any item with an error makes the
answer 400 (``partial_failure_response_code`` instead when at least one item succeeded), still
the whole envelope, without ``errors``. Rewrap, as in Transit, answers 200 whatever its items
did. A single request is a batch of one answered without the wrapping: its error is the
request's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import _ciphertext, _wire
from ._items import Item
from ._wire import Body

Answer = tuple[int, bytes]  # HTTP status, body


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


def answer(
    body: Body,
    work: list[Item],
    results: Results,
    batch: bool,
    shape: Callable[[Any, str | None, str], dict[str, Any]],
    partial: bool,
) -> Answer:
    if not batch:
        error = results.errors[0]
        if error is not None:
            raise _wire.user_error(error)
        one = shape(results.values[0], None, "")
        del one["reference"]
        return 200, _wire.envelope(one)
    rows = [
        shape(value, error, item.reference)
        for value, error, item in zip(results.values, results.errors, work, strict=True)
    ]
    status, warnings = 200, []
    failed = sum(error is not None for error in results.errors)
    if failed and partial:
        status = 400
        override = body.get("partial_failure_response_code")
        if override is not None and failed < len(work):
            code = _wire.as_int(body, "partial_failure_response_code")
            if 1 <= code <= 599:
                status = code
            else:
                warnings.append(
                    "invalid HTTP response code override from partial_failure_response_code,"
                    " reverting to 400"
                )
    return status, _wire.envelope({"batch_results": rows}, warnings)
