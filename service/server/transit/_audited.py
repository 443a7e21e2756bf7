"""What a Transit request carries that its audit record names only by HMAC: each
``associated_data`` (the AAD) and each ``context`` value (docs/AUDIT.md), as sent (base64).

Collected only while an audit trail is on (the front door then gives the request's
``AccessRecord`` empty ``aads`` and ``contexts``): a request without one pays one attribute
test per group. A batch's values are gathered by a few C loops over its group (a set of the
values, then the distinct ones looked at), never a Python step per item.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import methodcaller
from typing import Any

from .._logging import AccessRecord
from ._wire import Body

_AAD = methodcaller("get", "associated_data")
_CONTEXT = methodcaller("get", "context")


def note(log: AccessRecord, body: Body) -> None:
    """The values of a single request's fields, or of a group's ``batch_input`` items, into
    ``log`` (nothing without an audit trail). Call it once the items are read and checked:
    every ``batch_input`` entry is then an object."""
    aads, contexts = log.aads, log.contexts
    if aads is None or contexts is None:
        return
    batch = body.get("batch_input")
    entries: Sequence[Any] = batch if type(batch) is list else (body,)
    aads |= _strings(entries, _AAD)
    contexts |= _strings(entries, _CONTEXT)


def _strings(entries: Sequence[Any], get: Callable[[Any], object]) -> set[str]:
    """The distinct non-empty strings ``get`` finds in the entries (a value of another type
    is not one a client could mean as AAD or context: its item fails, or it is ignored)."""
    try:
        found = set(map(get, entries))
    except TypeError:  # an unhashable value (an array, an object): its strings alone
        found = {value for value in map(get, entries) if type(value) is str}
    return {value for value in found if type(value) is str and value}
