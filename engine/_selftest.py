"""Power-on self-test: known-answer tests for every algorithm and every provider.

The service runs it before it reports ready. Sources of the vectors:
single-shot AES from Wycheproof ``aes_gcm_test.json`` (tcId 2 and 100),
ChaCha20-Poly1305 from RFC 8439 section 2.8.2; chunked AES from Wycheproof's
C2SP vectors (tcId 9, compared by SHA-512 as the vectors give it); chunked
ChaCha20-Poly1305 computed with an independent construction (``cryptography``'s
HKDFExpand and ChaCha20Poly1305) since C2SP publishes no vectors for it; the native HMAC
(``hmac_many``) from RFC 4231 for SHA-2 and against ``hashlib`` for SHA-3.
"""

from __future__ import annotations

import hashlib
import hmac

from ._cobble import CobbleOpener, CobbleSealer, covers
from ._errors import DecryptionError, SelfTestError
from ._framing import derive
from ._hmac import Digest, hmac_many
from ._provider import Provider
from ._selection import PROVIDERS
from ._types import HEADER_LEN, SALT_LEN, TAG_LEN, Algorithm

_H = bytes.fromhex

# algorithm: (key, nonce, aad, plaintext, ciphertext || tag)
_SINGLE = {
    Algorithm.AES_128_GCM: (
        _H("5b9604fe14eadba931b0ccf34843dab9"),
        _H("921d2507fa8007b7bd067d34"),
        _H("00112233445566778899aabbccddeeff"),
        _H("001d0c231287c1182784554ca3a21908"),
        _H("49d8b9783e911913d87094d1f63cc7651e348ba07cca2cf04c618cb4d43a5b92"),
    ),
    Algorithm.AES_256_GCM: (
        _H("b279f57e19c8f53f2f963f5f2519fdb7c1779be2ca2b3ae8e1128b7d6c627fc4"),
        _H("98bc2c7438d5cd7665d76f6e"),
        _H("c0"),
        _H("fcc515b294408c8645c9183e3f4ecee5127846d1"),
        _H("eb5500e3825952866d911253f8de860c00831c81ecb660e1fb0541ec41e8d68a64141b3a"),
    ),
    Algorithm.CHACHA20_POLY1305: (
        _H("808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"),
        _H("070000004041424344454647"),
        _H("50515253c0c1c2c3c4c5c6c7"),
        b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for "
        b"the future, sunscreen would be it.",
        _H(
            "d31a8d34648e60db7b86afbc53ef7ec2a4aded51296e08fea9e2b5a736ee62d63dbea45e8ca96712"
            "82fafb69da92728b1a71de0a9e060b2905d6a5b67ecd3b3692ddbd7f2d778b8c9803aee328091b58"
            "fab324e4fad675945585808b4831d7bc3ff4def08e4b7a9de576d26586cec64b6116"
            "1ae10b594f09e26a7e902ecbd0600691"
        ),
    ),
}

_SUBMARINE_SHA512 = _H(
    "e85f32a85f1d4f7c9b2d36d20eca8435d81253e7075e9dea069eb1b6da48daf9"
    "2ef1797367b520d8a46c4f72cecb85b1daff8887fcb41721d39943d1952fc180"
)
# algorithm: (input key, context, chunked ciphertext, SHA-512 of the plaintext)
_CHUNKED = {
    Algorithm.AES_128_GCM: (
        b"YELLOW SUBMARINE",
        b"test context",
        _H(
            "de2ff42cb103e3c5583e1f39bfe368e9b2a83996fd288049"
            "27145e3dde6a611edf2fbb2ab7afc10f4f6e0426d2e4a9aebc7349ea5cda426488c91fd589e9d8d6"
            "da8759c7be16d0abf726266ee340e6"
        ),
        _SUBMARINE_SHA512,
    ),
    Algorithm.AES_256_GCM: (
        b"YELLOW SUBMARINE YELLOW SUBMARIN",
        b"test context",
        _H(
            "dbedaefc1c35dc6c0f22b743b03e488747166a51f33479e7"
            "ceb8b7e11cc0d2710f624a127501bc4aea7d0af6f83cfe359b9e69415aa537f36adf86eb35b07047"
            "5baa039bb7791432adbca49578bbd3"
        ),
        _SUBMARINE_SHA512,
    ),
    Algorithm.CHACHA20_POLY1305: (
        bytes(range(32)),
        b"sealflow self-test",
        _H(
            "6465666768696a6b6c6d6e6f707172737475767778797a7b1b7b01804b708cf7da88415dddccc4ee"
            "31677592ffcd4f6961d8ac1ea780da4a7d4756ea9ffc87a98a7a70169a59a2bdb999cec9d147826f"
            "a2622085aadf2ada55c0ef3386279b46abb629bd707b95a190ad"
        ),
        hashlib.sha512(b"sealflow known-answer test message").digest(),
    ),
}


# RFC 4231 test case 1 (key 0x0b * 20, "Hi There") for the SHA-2 HMACs; SHA-3 against
# hashlib's (an implementation of its own) on the same input.
_HMAC_KEY, _HMAC_MESSAGE = b"\x0b" * 20, b"Hi There"
_HMAC_SHA2 = {
    Digest.SHA2_224: _H("896fb1128abbdf196832107cd49df33f47b4b1169912ba4f53684b22"),
    Digest.SHA2_256: _H("b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
    Digest.SHA2_384: _H(
        "afd03944d84895626b0825f4ab46907f15f9dadbe4101ec682aa034c7cebc59c"
        "faea9ea9076ede7f4af152e8b2fa9cb6"
    ),
    Digest.SHA2_512: _H(
        "87aa7cdea5ef619d4ff0b4241a1d6cb02379f4e2ce4ec2787ad0b30545e17cde"
        "daa833b7d6b8a702038b274eaea3f4e4be9d914eeb61f1702e696c203a126854"
    ),
}


def _hmac(digest: Digest) -> None:
    """Two records in one batch (the second from the copied pad states) give the known tag."""
    expected = _HMAC_SHA2.get(digest) or hmac.digest(
        _HMAC_KEY, _HMAC_MESSAGE, digest.value.replace("-", "_")
    )
    if hmac_many(digest, _HMAC_KEY, [_HMAC_MESSAGE] * 2) != expected * 2:
        raise SelfTestError(f"self-test failed: native HMAC {digest.value}")


def _fail(provider: Provider, alg: Algorithm, what: str) -> SelfTestError:
    return SelfTestError(f"self-test failed: {provider.name} {alg.value} {what}")


def _single(provider: Provider, alg: Algorithm) -> None:
    spec = alg.spec
    key, nonce, aad, plaintext, expected = _SINGLE[alg]
    sealed = bytearray(len(plaintext) + TAG_LEN)
    provider.seal_into(spec, key, nonce, aad, plaintext, sealed)
    if not hmac.compare_digest(sealed, expected):
        raise _fail(provider, alg, "seal known answer")
    opened = bytearray(len(plaintext))
    provider.open_into(spec, key, nonce, aad, expected, opened)
    if opened != plaintext:
        raise _fail(provider, alg, "open known answer")
    sealed[-1] ^= 1
    try:
        provider.open_into(spec, key, nonce, aad, sealed, opened)
    except DecryptionError:
        return
    raise _fail(provider, alg, "accepted a modified tag")


def _chunked(provider: Provider, alg: Algorithm) -> None:
    spec = alg.spec
    key, context, sealed, digest = _CHUNKED[alg]
    msg_key, base_nonce, commitment = derive(spec, key, sealed[:SALT_LEN], context)
    if not hmac.compare_digest(commitment, sealed[SALT_LEN:HEADER_LEN]):
        raise _fail(provider, alg, "chunked commitment")
    body = sealed[HEADER_LEN:]
    opened = bytearray(len(body) - TAG_LEN)
    provider.chunks_open_into(spec, msg_key, base_nonce, 0, body, True, opened)
    if hashlib.sha512(opened).digest() != digest:
        raise _fail(provider, alg, "chunked open known answer")
    resealed = bytearray(len(body))
    provider.chunks_seal_into(spec, msg_key, base_nonce, 0, opened, True, resealed)
    if resealed != body:
        raise _fail(provider, alg, "chunked seal known answer")


def _cobblestone(alg: Algorithm) -> None:
    """The same known answer through cryptography.cobblestone, which seals AES streams
    when the cryptography provider does chunks; and a round trip (its salt is random)."""
    key, context, sealed, digest = _CHUNKED[alg]
    pyca, spec = PROVIDERS["cryptography"], alg.spec
    opener = CobbleOpener(pyca, spec, key, context)
    opened = bytearray(opener.update_size(len(sealed)))
    n = opener.update_into(sealed, opened)
    final = bytearray(opener.finalize_size())
    opened[n:] = final[: opener.finalize_into(final)]
    if hashlib.sha512(opened).digest() != digest:
        raise SelfTestError(f"self-test failed: cobblestone {alg.value}: chunked open known answer")
    sealer = CobbleSealer(pyca, spec, key, context)
    out = bytearray(sealer.update_size(len(opened)))
    n = sealer.update_into(opened, out)
    tail = bytearray(sealer.finalize_size())
    resealed = bytes(out[:n]) + bytes(tail[: sealer.finalize_into(tail)])
    check = CobbleOpener(pyca, spec, key, context)
    back = bytearray(len(opened))
    m = check.update_into(resealed, back)
    m += check.finalize_into(memoryview(back)[m:])
    if bytes(back[:m]) != bytes(opened) or resealed[:SALT_LEN] == sealed[:SALT_LEN]:
        raise SelfTestError(f"self-test failed: cobblestone {alg.value}: chunked round trip")


def self_test() -> None:
    """Run every known-answer test on every provider; raise ``SelfTestError`` on any mismatch."""
    for provider in PROVIDERS.values():
        for alg in Algorithm:
            _single(provider, alg)
            _chunked(provider, alg)
    for alg in Algorithm:
        if covers(alg):
            _cobblestone(alg)
    for digest in Digest:
        _hmac(digest)
