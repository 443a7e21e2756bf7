"""The envelope prefix codec (sans-IO)."""

from __future__ import annotations

import pytest

from sealflow.engine import Algorithm
from sealflow.service.envelope import (
    MAX_PREFIX_LEN,
    MalformedEnvelope,
    Mode,
    Prefix,
    bound_data,
    in_native_domain,
    parse,
    prefix_length,
)


@pytest.mark.parametrize("alg", list(Algorithm))
@pytest.mark.parametrize("mode", list(Mode))
def test_encode_parse_round_trip(alg: Algorithm, mode: Mode) -> None:
    prefix = Prefix(mode, alg, 70000, "orders.v2_eu-1")
    raw = prefix.encode()
    assert raw[:4] == b"SFL1"
    assert raw[4] == mode
    assert raw[6:10] == (70000).to_bytes(4, "big")
    assert raw[10] == len("orders.v2_eu-1")
    assert raw[11:] == b"orders.v2_eu-1"
    assert prefix_length(raw + b"body") == len(raw)
    assert parse(raw) == prefix


def test_layout_matches_the_spec_byte_for_byte() -> None:
    raw = Prefix(Mode.SINGLE, Algorithm.CHACHA20_POLY1305, 1, "default").encode()
    assert raw == b"SFL1\x02\x03\x00\x00\x00\x01\x07default"


def test_longest_name() -> None:
    raw = Prefix(Mode.STREAM, Algorithm.AES_128_GCM, 1, "a" * 64).encode()
    assert len(raw) == MAX_PREFIX_LEN
    assert parse(raw).name == "a" * 64


def test_prefix_length_needs_more_bytes_until_the_fixed_part_is_in() -> None:
    raw = Prefix(Mode.STREAM, Algorithm.AES_256_GCM, 3, "k").encode()
    for n in range(11):
        assert prefix_length(raw[:n]) is None
    assert prefix_length(raw[:11]) == 12


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"SFL2\x01\x02\x00\x00\x00\x01\x01k", "magic"),
        (b"XYZ", "magic"),
        (b"SFL1\x03\x02\x00\x00\x00\x01\x01k", "mode"),
        (b"SFL1\x00\x02\x00\x00\x00\x01\x01k", "mode"),
        (b"SFL1\x01\x04\x00\x00\x00\x01\x01k", "algorithm"),
        (b"SFL1\x01\x00\x00\x00\x00\x01\x01k", "algorithm"),
        (b"SFL1\x01\x02\x00\x00\x00\x00\x01k", "version"),
        (b"SFL1\x01\x02\x00\x00\x00\x01\x00", "length"),
        (b"SFL1\x01\x02\x00\x00\x00\x01\x41" + b"a" * 65, "length"),
        (b"SFL1\x01\x02\x00\x00\x00\x01\x01K", "name"),
        (b"SFL1\x01\x02\x00\x00\x00\x01\x02-a", "name"),
        (b"SFL1\x01\x02\x00\x00\x00\x01\x01\xff", "name"),
        (b"SFL1\x01\x02\x00\x00\x00\x01\x03ab", "truncated"),
    ],
)
def test_malformed_prefixes_are_refused(raw: bytes, why: str) -> None:
    with pytest.raises(MalformedEnvelope):
        parse(raw)


@pytest.mark.parametrize("alg", list(Algorithm))
@pytest.mark.parametrize("mode", list(Mode))
@pytest.mark.parametrize("user_aad", [b"", b"x", b"SFL1\x02"])
def test_every_native_aad_is_in_the_native_domain(
    alg: Algorithm, mode: Mode, user_aad: bytes
) -> None:
    """What Transit refuses as associated_data covers every AAD a native envelope is sealed
    under, in every kind of buffer."""
    aad = bound_data(Prefix(mode, alg, 1, "k").encode(), user_aad)
    for view in (aad, bytearray(aad), memoryview(aad)):
        assert in_native_domain(view)


@pytest.mark.parametrize(
    "aad", [b"", b"SFL", b"SFL1", b"SFL1\x00", b"SFL1\x03", b"sfl1\x02", b"xSFL1\x02", b"SFL2\x02"]
)
def test_other_aads_are_not(aad: bytes) -> None:
    assert not in_native_domain(aad)
