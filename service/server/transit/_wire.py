"""Vault's JSON on the wire: request bodies read as leniently as Vault reads them, answers in
Vault's envelope, errors as ``{"errors": [...]}``.

Vault's field types (``framework.TypeInt``, ``TypeBool``, ``TypeString``) convert what real
clients send: ``"key_version": "1"``, ``"exportable": "true"``, a literal ``null`` body from
``vault write -f``. The helpers here do the same, and fail with Vault's wording.
"""

from __future__ import annotations

import os
from typing import Any

import orjson
from starlette.types import Scope, Send

from .._body import has_body
from .._budget import Hold
from .._logging import AccessRecord
from ..errors import ApiError

Body = dict[str, Any]
Reply = bytes | list[bytes]  # an answer's body, whole or in pieces (a large batch's)

_JSON = (b"content-type", b"application/json")
# An answer's header lines, as ``respond`` sends them (the fast answer writes them itself).
HEADER_LINES = (
    b"content-type: application/json\r\ncache-control: no-store\r\ncontent-length: %d\r\n"
)
_NO_STORE = (b"cache-control", b"no-store")
TRUE = frozenset(("1", "t", "T", "TRUE", "true", "True"))  # Go's ParseBool
FALSE = frozenset(("0", "f", "F", "FALSE", "false", "False"))


def user_error(message: str, status: int = 400) -> ApiError:
    return ApiError(status, "bad_request", message)


def not_found() -> ApiError:
    # Vault's answer for a key (or page) that is not there: 404 and no message at all.
    return ApiError(404, "not_found", "")


def permission_denied() -> ApiError:
    """A missing or unknown token, as Vault refuses it (and, on the Transit routes, a scope
    that does not cover the call: docs/TRANSIT.md)."""
    return ApiError(403, "forbidden", "permission denied")


def token_expired() -> ApiError:
    """An expired or used-up token, as Vault refuses it (403 ``permission denied``: Vault has
    forgotten it), its code ``token_expired`` for the access log and the audit trail."""
    return ApiError(403, "token_expired", "permission denied")


def policy_denied() -> ApiError:
    """A known token whose policy does not cover the call, in Vault's words for that (its
    framework's): the token routes answer so, as the differential test checks."""
    return ApiError(403, "forbidden", framework_error("permission denied"))


def framework_error(message: str) -> str:
    """How Vault's request framework words its own refusals (a go-multierror of one): an
    unsupported path or operation, a handler's 400, a policy's refusal."""
    return f"1 error occurred:\n\t* {message}\n\n"


def go_type(value: object) -> str:
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


# What parsing JSON may make besides its bytes, per ``,`` or ``:``: each separates two values,
# and the largest value three bytes can make is an empty object in an array (``{},``: a 64-byte
# dict and an 8-byte slot of the list). Strings take their own bytes besides.
_PER_VALUE = 80


def parse_cost(data: bytes | bytearray) -> int:
    """At most what ``orjson.loads(data)`` holds in memory: counted before parsing, by C loops
    over the bytes (a body of 10^6 items parses into 4.5 times its size, one of ``{},`` into 24
    times: docs/TRANSIT.md, Limits)."""
    return len(data) + _PER_VALUE * (data.count(b",") + data.count(b":") + 1)


def parse(body: bytes | bytearray, hold: Hold) -> Body:
    """A request's JSON object; an empty body or ``null`` is ``{}``. What parsing makes is taken
    from the memory budget (503 beyond) and stays taken until the request ends."""
    if not body.strip():
        return {}
    hold.take(parse_cost(body))
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise user_error(f"failed to parse JSON input: {exc.msg}") from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise user_error("failed to parse JSON input: the body must be a JSON object")
    return value


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_INT64_DIGITS = len(str(_INT64_MAX))


def _field_error(name: str, value: object, kind: str) -> ApiError:
    got = "nil" if value is None else type(value).__name__
    return user_error(
        f'Field validation failed: error converting input for field "{name}": '
        f"cannot parse {got} as {kind}"
    )


def atoi(text: str) -> int | None:
    """Go's ``strconv.Atoi`` on a 64-bit machine, as Transit reads numbers in text: an optional
    sign, then ASCII digits only, the value within an int64 (leading zeros allowed, however
    many: Python's ``int()`` refuses a string of more than 4,300 digits with a ValueError)."""
    sign = text[:1] if text[:1] in ("+", "-") else ""
    digits = text[len(sign) :]
    if not digits or not digits.isascii() or not digits.isdigit():
        return None
    significant = digits.lstrip("0") or "0"
    if len(significant) > _INT64_DIGITS:
        return None
    number = -int(significant) if sign == "-" else int(significant)
    return number if _INT64_MIN <= number <= _INT64_MAX else None


def as_int(body: Body, name: str, default: int = 0) -> int:
    """An integer field as Vault's field parser takes it: a JSON number with no fraction, or
    its text; within an int64 (a larger one would reach the keystore as an overflow)."""
    value = body.get(name)
    if value is None:
        return default
    number: int | None = None
    if type(value) is int:
        number = value
    elif isinstance(value, str):
        number = atoi(value.strip())
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    if number is not None and _INT64_MIN <= number <= _INT64_MAX:
        return number
    raise _field_error(name, value, "int")


def as_bool(body: Body, name: str, default: bool = False) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if type(value) is bool:
        return value
    if isinstance(value, str):
        if value in TRUE:
            return True
        if value in FALSE:
            return False
    elif type(value) is int:
        return value != 0
    raise _field_error(name, value, "bool")


def as_str(body: Body, name: str, default: str = "") -> str:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, str):
        return value
    if type(value) in (int, float):
        return str(value)
    raise _field_error(name, value, "string")


def request_id() -> str:
    """A random (version 4) UUID as text, as Vault's ``request_id``: ``str(uuid.uuid4())``
    cost 3.5 us of a small request, this 1 us."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # RFC 4122 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


# Vault's envelope of a success, in its field order: this head, the ``data``, then the tail.
_ENVELOPE_HEAD = b'{"request_id":"%s","lease_id":"","renewable":false,"lease_duration":0,"data":'
_PLAIN_TAIL = b',"wrap_info":null,"warnings":null,"auth":null}'  # no warnings, no ``auth``


def envelope(data: Any, warnings: list[str] | None = None, auth: Any = None) -> bytes:
    """A success body in Vault's envelope (``auth``: a login's or a token route's block),
    encoded around ``data`` (no dict of eight fields a request)."""
    head = _ENVELOPE_HEAD % request_id().encode()
    if not warnings and auth is None:  # the usual answer
        tail = _PLAIN_TAIL
    else:
        extras = (orjson.dumps(warnings or None), orjson.dumps(auth))
        tail = b',"wrap_info":null,"warnings":%s,"auth":%s}' % extras
    return head + orjson.dumps(data) + tail


async def respond(send: Send, status: int, body: Reply, log: AccessRecord, head: bool) -> None:
    """The answer; a batch's in its pieces, one message each (never joined into a copy)."""
    log.status = status
    pieces = [body] if isinstance(body, bytes) else body
    length = log.bytes_out = sum(map(len, pieces))
    headers = [_JSON, _NO_STORE, (b"content-length", b"%d" % length)]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    if head:
        await send({"type": "http.response.body", "body": b""})
        return
    last = len(pieces) - 1
    for i, piece in enumerate(pieces):
        await send({"type": "http.response.body", "body": piece, "more_body": i < last})


async def refuse(error: ApiError, scope: Scope, send: Send, log: AccessRecord) -> None:
    """``_body.refuse`` in Vault's shape: answered from the head, the body left unread."""
    log.status, log.error = error.status, error.code
    body, headers = error.rendered(vault=True)
    if has_body(scope):
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
