"""Transit's keyless utilities, as OpenBao answers them: ``hash[/:algorithm]``,
``random[/:source][/:bytes]``, the page of key names ``LIST keys`` gives with ``after`` and
``limit``, and ``config/keys``, whose one setting, ``disable_upsert``, is always true here:
sealflow never creates a key on encrypt (docs/TRANSIT.md, What differs from Transit).

The paths are read with OpenBao's own patterns (Python's ``re`` and Go's ``regexp`` both take
the leftmost, greedy match here), so what each URL segment means is what it means there: the
path's segments replace the body's fields of the same name, and ``random/-5`` has no source
(its ``-5`` is a byte count the handler then ignores, as OpenBao's does). Random bytes come
from ``os.urandom`` whatever the source: sealflow has no seal entropy to mix in (docs/TRANSIT.md).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from urllib.parse import parse_qs

from sealflow.service.keystore import KeyStore

from ..errors import ApiError
from . import _keys
from ._ciphertext import CiphertextError, b64decode
from ._wire import Body, as_bool, atoi, envelope, go_type, not_found, user_error

# OpenBao's patterns (its framework's ``GenericNameRegex`` and ``OptionalParamRegex``), ASCII
# ``\w`` as Go's, and ``.`` no newline, as Go's without its ``s`` flag.
HASH_PATH = re.compile(r"hash(/(?P<urlalgorithm>.+))?", re.ASCII)
RANDOM_PATH = re.compile(r"random(/(?P<source>\w(([\w.-]+)?\w)?))?(/(?P<urlbytes>.+))?", re.ASCII)

HASHES = {
    "sha2-224": "sha224",
    "sha2-256": "sha256",
    "sha2-384": "sha384",
    "sha2-512": "sha512",
    "sha3-224": "sha3_224",
    "sha3-256": "sha3_256",
    "sha3-384": "sha3_384",
    "sha3-512": "sha3_512",
}
FORMATS = ("hex", "base64")
SOURCES = ("platform", "seal", "all")
MAX_RANDOM = 128 * 1024  # OpenBao's APIMaxBytes
SEAL_WARNING = "no seal/entropy augmentation available, using platform entropy source"


# Each route's fields (OpenBao's schema) and those its path captures.
_FIELDS = {
    "hash": frozenset(("input", "algorithm", "urlalgorithm", "format")),
    "random": frozenset(("urlbytes", "bytes", "format", "source")),
}
_CAPTURES = {"hash": ("urlalgorithm",), "random": ("source", "urlbytes")}


def kind(path: str) -> str | None:
    """``hash`` or ``random`` if the path under the mount is one of theirs, else None; a path
    of theirs that ends in ``/`` is theirs too (``answer`` refuses a write to it, as Vault
    does)."""
    first = path.partition("/")[0]
    if first in _FIELDS and path.endswith("/"):
        return first
    if HASH_PATH.fullmatch(path):
        return "hash"
    if RANDOM_PATH.fullmatch(path):
        return "random"
    return None


def routed(path: str, method: str) -> bool:
    """Whether OpenBao's pattern takes the path as ``method`` reaches it (a LIST with a ``/``
    appended if it has none): if not, a method the route does not take is 404 ``unsupported
    path``, else 405."""
    listed = path + "/" if method == "LIST" and not path.endswith("/") else path
    return bool(HASH_PATH.fullmatch(listed) or RANDOM_PATH.fullmatch(listed))


def answer(route: str, path: str, fields: Body) -> bytes:
    """The answer of ``hash`` or ``random`` (``route``) at ``path`` (under the mount)."""
    if path.endswith("/"):
        raise user_error("cannot write to a path ending in '/'")  # Vault's, for any write
    data, warnings = (hash_sum if route == "hash" else random_bytes)(path, fields)
    return envelope(data, warnings + _framework_warnings(route, fields) or None)


def _framework_warnings(route: str, fields: Body) -> list[str]:
    """What OpenBao's framework adds to an answer: the fields it ignored, and those the path
    replaced (in its order, by name)."""
    warnings = []
    ignored = sorted(name for name in fields if name not in _FIELDS[route])
    if ignored:
        warnings.append(f"Endpoint ignored these unrecognized parameters: [{' '.join(ignored)}]")
    replaced = [name for name in _CAPTURES[route] if fields.get(name) is not None]
    if replaced:
        warnings.append(
            "Endpoint replaced the value of these parameters with the values captured from the"
            f" endpoint's path: [{' '.join(replaced)}]"
        )
    return warnings


def hash_sum(path: str, fields: Body) -> tuple[dict[str, str], list[str]]:
    """``hash[/:algorithm]``: the digest of ``input``, checked in OpenBao's order."""
    match = HASH_PATH.fullmatch(path)
    url_algorithm = match["urlalgorithm"] if match else None  # routed by ``kind``: a match
    given = {name: _string(fields, name) for name in ("input", "algorithm", "format")}
    if given["input"] is None:
        raise user_error("input missing")
    algorithm = url_algorithm or ("sha2-256" if given["algorithm"] is None else given["algorithm"])
    form = "hex" if given["format"] is None else given["format"]
    try:
        data = b64decode(given["input"])
    except CiphertextError as exc:
        raise user_error(f"unable to decode input as base64: {exc}") from None
    if form not in FORMATS:
        raise user_error(f'unsupported encoding format {form}; must be "hex" or "base64"')
    name = HASHES.get(algorithm)
    if name is None:
        raise user_error(f"unsupported algorithm {algorithm}")
    return {"sum": _encoded(hashlib.new(name, data).digest(), form)}, []


def random_bytes(path: str, fields: Body) -> tuple[dict[str, str], list[str]]:
    """``random[/:source][/:bytes]``: ``bytes`` random bytes, as OpenBao reads the three places
    a count may come from (the body, or the URL's one or two segments)."""
    match = RANDOM_PATH.fullmatch(path)  # routed by ``kind``: a match
    url_source = (match["source"] if match else None) or ""
    url_bytes = (match["urlbytes"] if match else None) or ""
    count = _integer(fields, "bytes", 32)
    form = _string(fields, "format")
    form = "base64" if form is None else form
    source = "platform"
    if url_source and not url_bytes and url_source in SOURCES:
        source = url_source
    elif url_source and not url_bytes:
        count = _url_count(url_source)
    elif url_source:
        source, count = url_source, _url_count(url_bytes)
    if count < 1:
        raise user_error("'bytes' cannot be less than 1")
    if count > MAX_RANDOM:
        raise user_error(f"'bytes' should be less than {MAX_RANDOM}")
    if form not in FORMATS:
        raise user_error(f'unsupported encoding format {go_quote(form)}; must be "hex" or "base64"')
    if source not in SOURCES:
        raise user_error(
            f'unsupported entropy source {go_quote(source)}; must be "platform" or "seal", or "all"'
        )
    warnings = [SEAL_WARNING] if source == "seal" else []
    return {"random_bytes": _encoded(os.urandom(count), form)}, warnings


def listing(query: bytes) -> bool:
    """Whether a GET's query asks for a listing (``list=true``), as Vault turns it into LIST."""
    return _query(query).get("list") in ("true", "1")


def key_page(store: KeyStore, query: bytes) -> bytes:
    """``LIST keys``: the sorted names after ``after`` (strictly), at most ``limit`` of them
    (all if it is 0 or less), as OpenBao's storage lists a page; 404 if none is."""
    params = _query(query)
    after = _string(params, "after") or ""
    limit = _integer(params, "limit", 0)
    chosen = [name for name in _keys.all_names(store) if not after or name > after]
    if limit > 0:
        del chosen[limit:]
    if not chosen:
        raise not_found()  # as Transit answers an empty list
    return envelope({"keys": chosen})


def _integer(fields: Body, name: str, default: int) -> int:
    """An integer field as OpenBao's framework decodes it (mapstructure's weak decoding): the
    default if absent; 0 for null or ""; a bool as 1 or 0; text by Go's ``ParseInt`` in base 0
    (``0x``, ``0o``, ``0b``, a leading ``0`` for octal, ``_`` between digits); a JSON number
    only if it has no fraction or exponent (orjson's float: never); its words otherwise."""
    if name not in fields:
        return default
    value = fields[name]
    if value is None or value == "":
        return 0
    if type(value) is bool:
        return int(value)
    if type(value) is int:
        return value
    why = "invalid syntax"
    if isinstance(value, str):
        number = _parse_int(value)
        if number is not None and -(1 << 63) <= number < 1 << 63:
            return number
        why = "invalid syntax" if number is None else "value out of range"
    elif not isinstance(value, float):
        raise _unconvertible(name, "int", value)
    raise user_error(
        f'Field validation failed: error converting input for field "{name}": '
        f"'' cannot parse value as 'int': strconv.ParseInt: {why}"
    )


def _parse_int(text: str) -> int | None:
    sign = text[:1] if text[:1] in ("+", "-") else ""
    digits = text[len(sign) :]
    if not digits.isascii() or digits.strip() != digits or "__" in digits:
        return None
    octal = len(digits) > 1 and digits[0] == "0" and digits[1] not in "xXoObB"
    try:
        number = int(digits[1:] if octal else digits, 8 if octal else 0)
    except ValueError:
        return None
    return -number if sign == "-" else number


def _string(fields: Body, name: str) -> str | None:
    """A string field as OpenBao's ``Get`` reads it (mapstructure's weak decoding): None if
    absent (its default applies), ``""`` for null, a number's text, a bool as ``1`` or ``0``;
    an array or object refused in its words."""
    if name not in fields:
        return None
    value = fields[name]
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if type(value) is bool:
        return "1" if value else "0"
    if isinstance(value, int | float):
        return str(value)
    raise _unconvertible(name, "string", value)


def _unconvertible(name: str, kind: str, value: object) -> ApiError:
    return user_error(
        f'Field validation failed: error converting input for field "{name}": '
        f"'' expected type '{kind}', got unconvertible type '{go_type(value)}'"
    )


def _query(query: bytes) -> Body:
    """A query's parameters, one value as text and a repeated one as a list (Vault's way)."""
    parsed = parse_qs(query.decode("latin-1"), keep_blank_values=True)
    return {name: values[0] if len(values) == 1 else values for name, values in parsed.items()}


def _url_count(text: str) -> int:
    count = atoi(text)
    if count is None:
        digits = text[1:] if text[:1] in ("+", "-") else text
        why = "value out of range" if digits.isascii() and digits.isdigit() else "invalid syntax"
        raise user_error(
            f"error parsing url-set byte count: strconv.Atoi: parsing {go_quote(text)}: {why}"
        )
    return count


def _encoded(data: bytes, form: str) -> str:
    return data.hex() if form == "hex" else base64.b64encode(data).decode("ascii")


_ESCAPES = {"\a": r"\a", "\b": r"\b", "\f": r"\f", "\n": r"\n", "\r": r"\r", "\t": r"\t"}
_ESCAPES |= {"\v": r"\v", "\\": "\\\\", '"': '\\"'}


def go_quote(text: str) -> str:
    """Go's ``strconv.Quote`` (``%q``): printable characters as they are, the rest escaped."""
    out = []
    for char in text:
        code = ord(char)
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


UPSERT_REFUSED = (
    "sealflow never creates a key on encrypt (upsert): disable_upsert is always true;"
    " create keys with keys/:name"
)


def config_keys(fields: Body | None) -> bytes:
    """``config/keys``: read (``fields`` None) or written, OpenBao's shape; writing
    ``disable_upsert`` false is refused (400), as what it asks for is not done."""
    if fields is not None and "disable_upsert" in fields and not as_bool(fields, "disable_upsert"):
        raise user_error(UPSERT_REFUSED)
    return envelope({"disable_upsert": True})
