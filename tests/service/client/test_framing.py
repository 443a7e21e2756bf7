"""The response body reader, sans-IO: Content-Length, chunked coding, to the end of the
connection; split anywhere; broken framing refused."""

from __future__ import annotations

import os

import pytest

from sealflow.service.client._framing import BodyReader, FramingError

BODY = os.urandom(3000)
# A size with an extension, one in upper case with a space, then the last chunk and a trailer.
CHUNKED = (
    b"a;name=value\r\n" + BODY[:10] + b"\r\nBAE \r\n" + BODY[10:] + b"\r\n0\r\nTrailer: x\r\n\r\n"
)
assert len(BODY[10:]) == 0xBAE


def feed_in(reader: BodyReader, wire: bytes, split: list[int]) -> bytes:
    out = bytearray()
    for a, b in zip([0, *split], [*split, len(wire)], strict=True):
        for piece in reader.feed(wire[a:b]):
            out += piece
    return bytes(out)


@pytest.mark.parametrize("split", [[], [1], [5, 14, 15, 16], list(range(1, 60)), [3020, 3021]])
def test_chunked_split_anywhere(split: list[int]) -> None:
    reader = BodyReader(None, chunked=True)
    assert feed_in(reader, CHUNKED + b"next", split) == BODY
    assert reader.done
    assert reader.extra == b"next"


def test_chunked_byte_by_byte() -> None:
    reader = BodyReader(None, chunked=True)
    assert feed_in(reader, CHUNKED, list(range(1, len(CHUNKED)))) == BODY
    assert reader.done


@pytest.mark.parametrize("split", [[], [1], [1500], list(range(100, 3000, 100))])
def test_content_length(split: list[int]) -> None:
    reader = BodyReader(len(BODY), chunked=False)
    assert feed_in(reader, BODY + b"extra", split) == BODY
    assert reader.done
    assert reader.extra == b"extra"


def test_pieces_are_views_of_what_was_fed_not_copies() -> None:
    data = bytes(1000)
    (piece,) = BodyReader(1000, chunked=False).feed(data)
    assert piece.obj is data


def test_empty_bodies() -> None:
    assert BodyReader(0, chunked=False).done
    reader = BodyReader(None, chunked=True)
    assert reader.feed(b"0\r\n\r\n") == []
    assert reader.done


def test_to_the_end_of_the_connection() -> None:
    reader = BodyReader(None, chunked=False)
    assert bytes(reader.feed(b"abc")[0]) == b"abc"
    assert not reader.done
    reader.end()
    assert reader.done


@pytest.mark.parametrize(
    ("length", "chunked", "wire"),
    [(10, False, b"short"), (None, True, b"5\r\nabc"), (None, True, b"3\r\nabc\r\n")],
    ids=["content-length", "mid-chunk", "no-last-chunk"],
)
def test_an_early_end_is_an_error(length: int | None, chunked: bool, wire: bytes) -> None:
    reader = BodyReader(length, chunked)
    reader.feed(wire)
    with pytest.raises(FramingError, match="ended before"):
        reader.end()


@pytest.mark.parametrize(
    "wire",
    [b"x\r\n", b"-1\r\n", b"+1\r\n", b"0x1\r\n", b"1_0\r\n", b"\r\n", b"1" * 16 + b"\r\n",
     b"3\r\nabcX\r\n", b"1" * 5000],
    ids=["letter", "minus", "plus", "0x", "underscore", "empty", "too-big", "overrun", "long"],
)  # fmt: skip
def test_broken_chunked_coding_is_refused(wire: bytes) -> None:
    with pytest.raises(FramingError):
        BodyReader(None, chunked=True).feed(wire)
