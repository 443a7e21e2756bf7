"""Open sealflow envelopes without sealflow: cryptography's AEADs and Cobblestone only."""

from __future__ import annotations

from cryptography.cobblestone import Cobblestone128Decryptor, Cobblestone256Decryptor
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

ALGS = {1: "aes-128-gcm", 2: "aes-256-gcm", 3: "chacha20-poly1305"}


def split(envelope: bytes) -> tuple[bytes, bytes]:
    """(prefix, body)."""
    n = 11 + envelope[10]
    return envelope[:n], envelope[n:]


def _chacha_chunked_open(key: bytes, ctx: bytes, body: bytes) -> bytes:
    salt, commitment, chunks = body[:24], body[24:56], body[56:]
    info = b"c2sp.org/chunked-encryption@v1+AEAD_CHACHA20_POLY1305\x00" + salt + ctx
    okm = HKDFExpand(hashes.SHA512(), 32 + 12 + 32, info).derive(key)
    assert okm[44:] == commitment
    aead, base = ChaCha20Poly1305(okm[:32]), int.from_bytes(okm[32:44], "big")
    out, i = [], 0
    while True:
        piece = chunks[i * 16400 : (i + 1) * 16400]
        out.append(aead.decrypt((base ^ i).to_bytes(12, "big"), piece, b""))
        if len(piece) < 16400:
            assert (i + 1) * 16400 >= len(chunks)
            return b"".join(out)
        i += 1


def open_envelope(key: bytes, envelope: bytes, aad: bytes = b"") -> bytes:
    prefix, body = split(envelope)
    alg = ALGS[prefix[5]]
    context = prefix + aad
    if prefix[4] == 2:  # single-shot: nonce || ciphertext || tag, AAD = prefix || user AAD
        aead = ChaCha20Poly1305(key) if alg == "chacha20-poly1305" else AESGCM(key)
        return aead.decrypt(body[:12], body[12:], context)
    if alg == "chacha20-poly1305":
        return _chacha_chunked_open(key, context, body)
    dec = (Cobblestone128Decryptor if alg == "aes-128-gcm" else Cobblestone256Decryptor)(
        key, context
    )
    return dec.update(body) + dec.finalize()
