"""A key type's stored form (the key row's ``algorithm`` column) reads back as the same type,
and a form this release does not know, or a combination Transit refuses, reads as nothing (the
key is then refused, never misread)."""

from __future__ import annotations

from typing import Any

import pytest

from sealflow.service.keystore import KDF_COUNTER, InvalidRequest, KeyType, make_key_type
from sealflow.service.keystore._key_types import parse

TYPES = [
    make_key_type("aes256-gcm96"),
    make_key_type("aes128-gcm96", derived=True),
    make_key_type("chacha20-poly1305", derived=True, convergent=True),
    make_key_type("aes256-gcm96", derived=True, kdf=KDF_COUNTER),
    make_key_type("chacha20-poly1305", derived=True, kdf=KDF_COUNTER),
    make_key_type("hmac", 64),
]


@pytest.mark.parametrize("kind", TYPES, ids=lambda k: k.column)
def test_a_stored_type_reads_back_the_same(kind: KeyType) -> None:
    assert parse(kind.column) == kind


def test_the_counter_kdf_is_stored_after_the_flags() -> None:
    kind = make_key_type("aes256-gcm96", derived=True, kdf=KDF_COUNTER)
    assert kind.column == "aes256-gcm96;derived;kdf=hmac-sha256-counter"


@pytest.mark.parametrize(
    "column",
    [
        "aes256-gcm96;derived;kdf=other",
        "aes256-gcm96;kdf=hmac-sha256-counter",  # not derived
        "aes256-gcm96;derived;convergent;kdf=hmac-sha256-counter",
        "aes128-gcm96;derived;kdf=hmac-sha256-counter",
        "aes256-gcm96;derived;kdf=hmac-sha256-counter;kdf=hmac-sha256-counter",
        "aes256-gcm96;derived;kdf=hkdf_sha256",  # the default is never written
    ],
)
def test_a_form_this_release_does_not_make_reads_as_nothing(column: str) -> None:
    assert parse(column) is None


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"derived": True, "kdf": "legacy"}, "unknown kdf legacy"),
        ({"derived": True, "convergent": True, "kdf": KDF_COUNTER}, "only for derived"),
        ({"kdf": KDF_COUNTER}, "only for derived"),
    ],
)
def test_the_counter_kdf_only_where_it_makes_enough(fields: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidRequest, match=words):
        make_key_type("aes256-gcm96", **fields)
    with pytest.raises(InvalidRequest):
        make_key_type("aes128-gcm96", derived=True, kdf=KDF_COUNTER)
