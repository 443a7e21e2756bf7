"""A stream decrypt in request-then-response: two AEAD passes, and no plaintext in the spool.

First pass, as the body arrives (``Authenticate``, the pipeline's codec): every batch is
opened to authenticate it and its plaintext is dropped; what goes on to the spool is the
envelope's chunks as they were received. Once the final chunk has authenticated the answer
starts, with a ``Content-Length`` counted by this pass.

Second pass, as the answer is sent (``Reopen``): the spooled chunks are opened again under
the same key and context. The C2SP header (salt and commitment) never goes to the spool:
this pass takes it from the first one, in memory. The salt selects the chunk key and the
nonces, so the only bytes that open under it are the chunks the first pass authenticated, in
their order, and a spool file changed on disk (or replaced by another envelope under the same
key) can only make this pass fail, never change what it releases. A failure here comes after
the answer began: ``_spool.damaged`` ends the request and the reply is cut off.
docs/SERVICE.md ("Decryption") gives the reasoning and the measurements behind the choice.
"""

from __future__ import annotations

from sealflow import engine

from ._spool import Piece, damaged

# C2SP's header: the salt and the commitment, before the first chunk.
HEADER_LEN = engine.sealed_size(0) - engine.TAG_LEN


class Authenticate:
    """The first pass: a batch codec (``_transfer.BatchCodec``) whose output is its input
    less the header, once authenticated."""

    def __init__(self, opener: engine.ChunkedDecryptor) -> None:
        self._opener = opener
        self._scratch = bytearray()  # where the plaintext goes to be dropped
        self.header = b""
        self.opened = 0  # plaintext bytes authenticated: the answer's length

    def inline(self, size: int) -> bool:
        return True  # opening waits for nothing

    def run(self, pieces: list[bytes], final: bool) -> bytes:
        data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        opener = self._opener
        self._room(opener.update_size(len(data)))
        self.opened += opener.update_into(data, self._scratch)
        if final:
            self._room(opener.finalize_size())
            self.opened += opener.finalize_into(self._scratch)
        if len(self.header) < HEADER_LEN:
            take = HEADER_LEN - len(self.header)
            self.header += data[:take]
            data = data[take:]
        return data

    def close(self) -> None:
        """Wipe the last plaintext it dropped."""
        self._scratch[:] = bytes(len(self._scratch))

    def reopen(self, opener: engine.ChunkedDecryptor) -> Reopen:
        """The second pass, with a new opener under the same key and context."""
        return Reopen(opener, self.header, self.opened)

    def _room(self, n: int) -> None:
        if len(self._scratch) < n:
            self._scratch = bytearray(n)


class Reopen:
    """The second pass: ``update`` is the spool's ``through``; ``finalize`` the last bytes."""

    def __init__(self, opener: engine.ChunkedDecryptor, header: bytes, length: int) -> None:
        self._opener = opener
        opener.update(header)  # no plaintext: a header is not a chunk
        self._left = length

    def update(self, piece: Piece) -> Piece:
        try:
            out = self._opener.update(piece)
        except engine.DecryptionError:
            raise damaged("a spooled envelope failed its second open") from None
        self._count(len(out))
        return out

    def finalize(self) -> bytes:
        try:
            out = self._opener.finalize()
        except engine.DecryptionError:
            raise damaged("a spooled envelope failed its second open") from None
        self._count(len(out))
        if self._left:
            raise damaged("a spooled envelope opened shorter the second time")
        return out

    def _count(self, n: int) -> None:
        # Never more than the Content-Length the first pass announced (the header pins the
        # chunks, so this cannot happen short of a bug; the check costs nothing).
        self._left -= n
        if self._left < 0:
            raise damaged("a spooled envelope opened longer the second time")
