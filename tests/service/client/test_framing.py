"""The response reader, sans-IO: heads (the status, how the body is framed, keep-alive) and
bodies by Content-Length, chunked coding, to the end of the connection; split anywhere; broken
framing refused."""

from __future__ import annotations

import os

import pytest

from sealflow.service.client._framing import (
    MAX_HEAD,
    BodyReader,
    FramingError,
    Head,
    Response,
    StreamError,
    parse_head,
)

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


# Response heads: what the service sends, what a proxy may send, and what no server should.
OK = b"HTTP/1.1 200 OK\r\ndate: x\r\ncontent-type: text/plain\r\ncontent-length: 5\r\n\r\n"


def test_a_head_and_its_body_split_anywhere() -> None:
    wire = b"HTTP/1.1 100 Continue\r\n\r\n" + OK + b"hello" + b"next"
    for cut in range(len(wire) - 3):  # "next" comes with the last piece
        response = Response()
        got = b"".join(bytes(p) for p in response.feed(wire[:cut]) + response.feed(wire[cut:]))
        assert got == b"hello"
        assert response.head == Head(200, 5, chunked=False, keep_alive=True)
        assert response.continued  # the 100 Continue was seen and skipped
        assert response.done
        assert response.extra == b"next"


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (OK, Head(200, 5, False, True)),
        (b"HTTP/1.1 200\r\nContent-Length: 5\r\n\r\n", Head(200, 5, False, True)),
        (b"HTTP/1.1 200 OK\nContent-Length:5  \n\n", Head(200, 5, False, True)),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n", Head(200, None, True, True)),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: Keep-Alive, close\r\n\r\n",
         Head(200, 5, False, False)),
        (b"HTTP/1.1 200 OK\r\n\r\n", Head(200, None, False, False)),  # to the end
        (b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n", Head(200, 5, False, False)),
        (b"HTTP/1.1 204 No Content\r\n\r\n", Head(204, 0, False, True)),
        (b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n", Head(304, 0, False, True)),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\ncontent-length: 5\r\n\r\n",
         Head(200, 5, False, True)),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
         Head(200, None, True, False)),  # the length does not count, and no reuse after
        (b"HTTP/1.1 502 Bad Gateway\r\nX-Empty:\r\nContent-Length: 0\r\n\r\n",
         Head(502, 0, False, True)),
    ],
    ids=["service", "no-reason", "bare-lf", "chunked", "close", "to-the-end", "http-1.0",
         "204", "304", "equal-lengths", "both", "empty-value"],
)  # fmt: skip
def test_heads(head: bytes, expected: Head) -> None:
    assert parse_head(head + b"body") == (expected, len(head))
    assert parse_head(head[:-1]) is None  # incomplete


@pytest.mark.parametrize(
    "head",
    [b"HTTP/2 200\r\n\r\n", b"HTTP/1.1 20 OK\r\n\r\n", b"ICY 200 OK\r\n\r\n",
     b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n", b"HTTP/1.1 200 OK\r\nA: b\r\n folded\r\n\r\n",
     b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n", b"HTTP/1.1 200 OK\r\nA: \x00\r\n\r\n",
     b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
     b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n",
     b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
     b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
     b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
     b"HTTP/1.1 200 OK\r\n" + b"X-Long: " + b"x" * MAX_HEAD + b"\r\n"],
    ids=["http-2", "status", "not-http", "no-colon", "obs-fold", "space-in-name", "control",
         "negative", "two-lengths", "two-lines", "gzip", "101", "too-long"],
)  # fmt: skip
def test_broken_heads_are_refused(head: bytes) -> None:
    with pytest.raises(FramingError):
        parse_head(head)


def test_a_connection_that_closes_before_the_head() -> None:
    response = Response()
    assert response.feed(b"HTTP/1.1 200 OK\r\n") == []
    with pytest.raises(FramingError, match="closed"):
        response.end()


@pytest.mark.parametrize(
    "line",
    [b"1;sealflow-error=decryption_failed\r\n", b"1 ; a=b; sealflow-error=decryption_failed\n"],
)
def test_the_services_signal_names_why_the_body_is_cut_off(line: bytes) -> None:
    """The chunk-size line the service ends a failed full-duplex body with (docs/API.md): the
    chunks before it are body; the line itself is the cause, before any close."""
    reader = BodyReader(None, chunked=True)
    assert b"".join(reader.feed(b"5\r\nhello\r\n")) == b"hello"
    with pytest.raises(StreamError) as caught:
        reader.feed(line)
    assert caught.value.code == "decryption_failed"
    assert not reader.done


@pytest.mark.parametrize(
    "line", [b"1;xsealflow-error=decryption_failed\r\n", b"1;sealflow-error=\r\n"]
)
def test_other_chunk_extensions_are_not_the_signal(line: bytes) -> None:
    reader = BodyReader(None, chunked=True)
    assert reader.feed(line) == []
    with pytest.raises(FramingError) as caught:
        reader.end()
    assert not isinstance(caught.value, StreamError)
