"""Records.from_base64 and seal_many_text: a column of base64 in, sealed records out as text.

The decoder is checked against Python's strict base64 (canonical texts decode the same; every
other text refuses the whole column), and every sealed record is opened with ``cryptography``
alone. The sealing runs over both providers and every context strategy (the ``impl``
fixture).
"""

from __future__ import annotations

import base64
import binascii
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sealflow import engine
from sealflow.engine import Algorithm, Records
from tests.conftest import PROVIDERS, STRATEGIES
from tests.engine.test_records import oracle, using

ALGS = list(Algorithm)


def canonical(text: bytes) -> bool:
    """Whether text is canonical standard padded base64 (what from_base64 takes)."""
    try:
        decoded = base64.b64decode(text, validate=True)
    except binascii.Error:
        return False
    return base64.b64encode(decoded) == text


@given(st.lists(st.binary(max_size=80), min_size=1, max_size=30))
def test_from_base64_decodes_what_b64encode_wrote(plaintexts: list[bytes]) -> None:
    column = b"\n".join(base64.b64encode(p) for p in plaintexts)
    records = Records.from_base64(column, len(plaintexts))
    assert list(records.lengths) == [len(p) for p in plaintexts]
    assert bytes(records.data) == b"".join(plaintexts)


TEXT = st.text(
    alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=\r\n -_", max_size=12
)


@given(st.lists(TEXT.map(str.encode), min_size=1, max_size=6))
def test_from_base64_takes_canonical_texts_only(texts: list[bytes]) -> None:
    column = b"\n".join(texts)
    if all(canonical(t) for t in texts):
        records = Records.from_base64(column, len(texts))
        assert bytes(records.data) == b"".join(base64.b64decode(t) for t in texts)
    else:
        with pytest.raises(ValueError, match="records"):
            Records.from_base64(column, len(texts))


@pytest.mark.parametrize(
    "text",
    [
        b"YQ",
        b"YQ=",
        b"Y===",
        b"YR==",
        b"YWJ=",
        b"YQ==YQ==",
        b"=YQ=",
        b"YQ==\r",
        b"YW J",
        b"\xc3\xa9A==",
    ],
)
def test_from_base64_refuses(text: bytes) -> None:
    with pytest.raises(ValueError, match="records"):
        Records.from_base64(b"YWJj\n" + text, 2)


def test_from_base64_counts_texts() -> None:
    assert len(Records.from_base64(b"", 1)) == 1  # one empty text
    assert len(Records.from_base64(b"\n", 2)) == 2
    assert len(Records.from_base64(b"", 0)) == 0
    for column, count in [(b"YQ==\nYQ==", 1), (b"YQ==", 2), (b"YQ==\n", 1), (b"x", 0)]:
        with pytest.raises(ValueError, match="records"):
            Records.from_base64(column, count)
    assert bytes(Records.from_base64(b"YQ==,YWI=", 2, sep=b",").data) == b"aab"
    for sep in (b"", b"A", b"=x", b"+"):
        with pytest.raises(ValueError, match="separator"):
            Records.from_base64(b"YQ==", 1, sep=sep)


def test_from_base64_between_fixed_bytes() -> None:
    """Texts between the fixed bytes of a serialization, as many as there are."""
    sep = b'"}, {"plaintext": "'
    records = Records.from_base64(sep.join([b"YQ==", b"", b"YWJj"]), sep=sep)
    assert list(records.lengths) == [1, 0, 3]
    assert bytes(records.data) == b"aabc"
    assert len(Records.from_base64(b"", sep=sep)) == 1
    assert len(Records.from_base64(b"YQ==", 1, sep=sep)) == 1
    for column in (
        b"YQ==" + sep[:-1] + b"YQ==",
        b"YQ==" + sep[:5],
        b'YQ=="}, {"x": "YQ==',
        b'YQ=="',
    ):
        with pytest.raises(ValueError, match="records"):
            Records.from_base64(column, sep=sep)
    with pytest.raises(ValueError, match="records"):
        Records.from_base64(sep.join([b"YQ=="] * 3), 2, sep=sep)


@given(
    st.lists(st.binary(max_size=40), min_size=1, max_size=20),
    st.sampled_from([b"\n", b",", b'"},{"p":"']),
)
def test_from_base64_counts_what_it_finds(plaintexts: list[bytes], sep: bytes) -> None:
    column = sep.join(base64.b64encode(p) for p in plaintexts)
    records = Records.from_base64(column, sep=sep)
    assert list(records.lengths) == [len(p) for p in plaintexts]
    assert bytes(records.data) == b"".join(plaintexts)


def opened(alg: Algorithm, key: bytes, aad: bytes, text: bytes) -> bytes:
    sealed = base64.b64decode(text, validate=True)
    assert len(sealed) >= 28
    return oracle(alg, key).decrypt(sealed[:12], sealed[12:], aad)


@pytest.mark.parametrize("alg", ALGS)
@pytest.mark.usefixtures("impl")
def test_seal_many_text_layout(alg: Algorithm) -> None:
    key = os.urandom(alg.spec.key_len)
    plaintexts = [os.urandom(n) for n in (0, 1, 2, 3, 100, 5000)]
    suffixes = [b"]" * i for i in range(len(plaintexts))]
    out = engine.seal_many_text(
        alg, key, b"ad", plaintexts, before=b"<", after=suffixes, sep=b";;", head=b"{", tail=b"}"
    )
    assert type(out) is bytes
    assert out.startswith(b"{<")
    assert out.endswith(b"}")
    parts = out[1:-1].split(b";;")
    assert len(parts) == len(plaintexts)
    for i, (part, plain) in enumerate(zip(parts, plaintexts, strict=True)):
        assert part.startswith(b"<")
        assert part.endswith(suffixes[i])
        assert opened(alg, key, b"ad", part[1 : len(part) - i]) == plain
    # One suffix for every record; no layout at all; an empty batch.
    same = engine.seal_many_text(alg, key, None, plaintexts, after=b"\n")
    lines = same.split(b"\n")
    assert lines[-1] == b""
    assert len(lines) == len(plaintexts) + 1
    assert [opened(alg, key, b"", line) for line in lines[:-1]] == plaintexts
    assert engine.seal_many_text(alg, key, b"", [], head=b"[", tail=b"]", sep=b",") == b"[]"


@pytest.mark.parametrize("provider", PROVIDERS)
@given(
    alg=st.sampled_from(ALGS),
    plaintexts=st.lists(st.binary(max_size=300), max_size=40),
    aad=st.binary(max_size=20),
)
@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_seal_many_text_from_base64(
    provider: str, alg: Algorithm, plaintexts: list[bytes], aad: bytes
) -> None:
    """The column way in and the text way out together, nonces all different."""
    key = os.urandom(alg.spec.key_len)
    column = b"\n".join(base64.b64encode(p) for p in plaintexts)
    with using(provider, STRATEGIES[0]):
        records = Records.from_base64(column, len(plaintexts))
        out = engine.seal_many_text(alg, key, aad, records, sep=b",")
    texts = out.split(b",") if plaintexts else []
    assert [opened(alg, key, aad, t) for t in texts] == plaintexts
    nonces = {base64.b64decode(t)[:12] for t in texts}
    assert len(nonces) == len(texts)


@pytest.mark.usefixtures("impl")
def test_seal_many_text_refuses_bad_arguments() -> None:
    key = os.urandom(32)
    with pytest.raises(ValueError, match="one suffix per record"):
        engine.seal_many_text("aes-256-gcm", key, b"", [b"a", b"b"], after=[b"x"])
    with pytest.raises(ValueError, match="32-byte key"):
        engine.seal_many_text("aes-256-gcm", key[:16], b"", [b"a"])  # wrong key length
    with pytest.raises(TypeError):
        engine.seal_many_text("aes-256-gcm", key, b"", [b"a"], head="[")  # type: ignore[arg-type]
