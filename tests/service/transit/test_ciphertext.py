"""The ``vault:v`` format and Go's base64, sans-IO (offsets as OpenBao 2.7 reports them)."""

from __future__ import annotations

import base64
import binascii

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sealflow.service.server.transit import _ciphertext
from sealflow.service.server.transit._ciphertext import CiphertextError


@pytest.mark.parametrize(
    ("text", "offset"),
    [("a!GVsbG8=", 1), ("aGVsbG8", 4), ("!!", 0), ("not base64!", 3), ("aGk=x", 4), ("a=", 1)],
)
def test_go_base64_error_offsets(text: str, offset: int) -> None:
    with pytest.raises(CiphertextError, match=f"^illegal base64 data at input byte {offset}$"):
        _ciphertext.b64decode(text)


@pytest.mark.parametrize(("text", "data"), [("", b""), ("aGk=", b"hi"), ("aG\nk=", b"hi")])
def test_go_base64_accepts(text: str, data: bytes) -> None:
    assert _ciphertext.b64decode(text) == data


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("vaul:v1:AAAA", _ciphertext.NO_PREFIX),
        ("vault:v1", _ciphertext.WRONG_FIELDS),
        ("vault:vx:AAAA", _ciphertext.BAD_VERSION),
        ("vault:v:AAAA", _ciphertext.BAD_VERSION),
        # Go's strconv.Atoi refuses what does not fit an int64; Python's int() would raise
        # ValueError past 4,300 digits (a 500 before issue 24).
        ("vault:v9223372036854775808:AAAA", _ciphertext.BAD_VERSION),
        ("vault:v-9223372036854775809:AAAA", _ciphertext.BAD_VERSION),
        ("vault:v" + "9" * 5000 + ":AAAA", _ciphertext.BAD_VERSION),
    ],
)
def test_split_refuses_with_transits_messages(text: str, message: str) -> None:
    with pytest.raises(CiphertextError, match=f"^{message}$"):
        _ciphertext.split(text)


def test_split_reads_v0_as_version_1_and_keeps_the_payload() -> None:
    assert _ciphertext.split("vault:v0:AAAA") == (1, "AAAA")
    assert _ciphertext.split("vault:v12:a:b") == (12, "a:b")
    # As Go reads them: leading zeros, however many, and a sign.
    assert _ciphertext.split("vault:v" + "0" * 5000 + "7:AAAA") == (7, "AAAA")
    assert _ciphertext.split("vault:v+2:AAAA") == (2, "AAAA")
    assert _ciphertext.split("vault:v-3:AAAA") == (-3, "AAAA")
    assert _ciphertext.split("vault:v9223372036854775807:A") == ((1 << 63) - 1, "A")


def test_payload_needs_a_nonce() -> None:
    with pytest.raises(CiphertextError, match=_ciphertext.BAD_LENGTH):
        _ciphertext.payload("AAAA")
    with pytest.raises(CiphertextError, match=_ciphertext.BAD_BASE64):
        _ciphertext.payload("AAA")
    assert _ciphertext.encode(3, b"\0" * 12) == "vault:v3:AAAAAAAAAAAAAAAA"


def test_request_ids_are_distinct_version_4_uuids() -> None:
    import uuid

    from sealflow.service.server.transit._wire import request_id

    ids = [request_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant, str(parsed)) == (4, uuid.RFC_4122, text)


@given(st.text(alphabet="AZaz09+/=\r\n!é", max_size=24))
def test_the_fast_decoder_agrees_with_gos_rules(text: str) -> None:
    """SIMD decoding (pybase64) first, Go's transcribed rules after: one answer, Go's."""
    raw = text.encode("ascii", "replace")
    go_valid = _ciphertext._go_error_offset(raw) == -1
    try:
        decoded = _ciphertext.b64decode(text)
    except CiphertextError:
        assert not go_valid
        return
    assert go_valid
    assert decoded == binascii.a2b_base64(raw.replace(b"\r", b"").replace(b"\n", b""))


def test_encode_is_standard_padded_base64() -> None:
    for n in range(40):
        data = bytes(range(n))
        assert _ciphertext.b64encode(data) == base64.b64encode(data).decode()
