"""Transit's signatures and RSA-OAEP, sans-IO, over ``cryptography``: what OpenBao's
``keysutil.Policy`` does for ``SignWithOptions``, ``VerifySignatureWithOptions`` and its RSA
encryption, on a key version's material (the 32-byte raw private key for ed25519, a PKCS#8 DER
private key for ECDSA and RSA).

The input reaches ``sign`` and ``verify`` as OpenBao hands it to the policy: already hashed
for ECDSA and RSA (``digest``) unless the client sent it prehashed; ed25519 signs the message
itself. ECDSA signs a digest of any length the way Go and OpenSSL both do (truncated to the
curve's order); ``cryptography`` takes only a hash's own length, so other lengths are
re-encoded into one that OpenSSL reads as the same integer (``_ecdsa_digest``). Two things
``cryptography``'s public API cannot do are refused with a ``SignError`` naming them: an RSA
PKCS#1 v1.5 signature with ``hash_algorithm=none`` (no DigestInfo; verifying one works), and a
prehashed P-521 input whose integer exceeds 512 bits (docs/TRANSIT.md, Signing).

Loaded private keys are cached per material (an ed25519 key's load computes its public key,
57 us; an RSA key's checks it, milliseconds); ``forget`` empties the caches when a key is
deleted or trimmed here, so a removed version's key object does not outlive it in this process
(another process's cache keeps it until evicted: at most 1,024 and 256 keys).
"""

from __future__ import annotations

import functools
import hmac
from dataclasses import dataclass
from typing import Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa, utils
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

HASHES: dict[str, type[hashes.HashAlgorithm] | None] = {
    "none": None,
    "sha1": hashes.SHA1,
    "sha2-224": hashes.SHA224,
    "sha2-256": hashes.SHA256,
    "sha2-384": hashes.SHA384,
    "sha2-512": hashes.SHA512,
    "sha3-224": hashes.SHA3_224,
    "sha3-256": hashes.SHA3_256,
    "sha3-384": hashes.SHA3_384,
    "sha3-512": hashes.SHA3_512,
}
MARSHALINGS = ("asn1", "jws")
SALT_AUTO = 0  # Go's rsa.PSSSaltLengthAuto
SALT_HASH = -1  # Go's rsa.PSSSaltLengthEqualsHash
_CURVES: dict[str, tuple[ec.EllipticCurve, int]] = {  # the curve and its order's bits
    "ecdsa-p256": (ec.SECP256R1(), 256),
    "ecdsa-p384": (ec.SECP384R1(), 384),
    "ecdsa-p521": (ec.SECP521R1(), 521),
}
_BY_SIZE = {
    cls.digest_size: cls
    for cls in (hashes.SHA1, hashes.SHA224, hashes.SHA256, hashes.SHA384, hashes.SHA512)
}


class SignError(Exception):
    """A signature refused, in OpenBao's words; ``user``: OpenBao's UserError (a 400 where it
    answers one), else its internal error (a 500)."""

    def __init__(self, message: str, user: bool = True) -> None:
        super().__init__(message)
        self.message = message
        self.user = user


class Unsupported(SignError):
    """What OpenBao does and ``cryptography`` cannot: a 400 naming it (docs/TRANSIT.md)."""


@dataclass(frozen=True, slots=True)
class Options:
    """A request's signing options, checked by the route in OpenBao's order."""

    hash_name: str = "sha2-256"
    marshaling: Literal["asn1", "jws"] = "asn1"
    salt: int = SALT_AUTO
    algorithm: str = ""  # RSA: "pss" (the default, ""), "pkcs1v15"
    prehashed: bool = False


def is_ecdsa(kind: str) -> bool:
    return kind in _CURVES


def is_rsa(kind: str) -> bool:
    return kind.startswith("rsa-")


def hashes_input(kind: str) -> bool:
    """Whether OpenBao hashes the input before signing (``HashSignatureInput``)."""
    return is_ecdsa(kind) or is_rsa(kind)


def digest(hash_name: str, data: bytes) -> bytes:
    """The input as OpenBao hands it to the policy: hashed, or as it is for ``none``."""
    algorithm = HASHES[hash_name]
    if algorithm is None:
        return data
    h = hashes.Hash(algorithm())
    h.update(data)
    return h.finalize()


def sign(kind: str, material: bytes, message: bytes, options: Options) -> bytes:
    """The raw signature of ``message`` (a digest for ECDSA and RSA: ``digest``)."""
    if kind == "ed25519":
        return _ed25519(material).sign(message)
    if is_ecdsa(kind):
        key = _private(material)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        der = key.sign(*_ecdsa_digest(kind, message))
        if options.marshaling == "asn1":
            return der
        r, s = utils.decode_dss_signature(der)
        size = (_CURVES[kind][1] + 7) // 8
        return r.to_bytes(size, "big") + s.to_bytes(size, "big")
    key = _private(material)
    assert isinstance(key, rsa.RSAPrivateKey)
    algorithm = _rsa_hash(options.hash_name)
    pss = options.algorithm in ("", "pss")
    if pss:
        _salt_check(key.key_size, algorithm, options.salt)
    elif options.algorithm != "pkcs1v15":
        raise SignError(f"unsupported rsa signature algorithm {options.algorithm}", user=False)
    if algorithm is None:  # pkcs1v15 alone gets here (the route's check)
        raise Unsupported(
            "hash_algorithm=none (PKCS#1 v1.5 without a DigestInfo) is not supported by"
            " sealflow for signing"
        )
    scheme = _pss(options.salt, algorithm, signing=True) if pss else padding.PKCS1v15()
    if len(message) != algorithm.digest_size:
        raise SignError("crypto/rsa: input must be hashed with given hash", user=False)
    return key.sign(message, scheme, utils.Prehashed(algorithm))


def verify(kind: str, material: bytes, message: bytes, signature: bytes, options: Options) -> bool:
    """Whether ``signature`` (raw, its marshaling undone by the caller's base64 only) is
    valid for ``message``; SignError as OpenBao refuses a malformed ECDSA signature or an
    RSA option."""
    if kind == "ed25519":
        try:
            _ed25519(material).public_key().verify(signature, message)
        except InvalidSignature:
            return False
        return True
    if is_ecdsa(kind):
        r, s = _ecdsa_pair(signature, options.marshaling)
        if r <= 0 or s <= 0:
            return False
        key = _private(material)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        try:
            key.public_key().verify(utils.encode_dss_signature(r, s), *_ecdsa_digest(kind, message))
        except (InvalidSignature, SignError):
            return False
        return True
    key = _private(material)
    assert isinstance(key, rsa.RSAPrivateKey)
    public = key.public_key()
    algorithm = _rsa_hash(options.hash_name)
    if options.algorithm in ("", "pss"):
        _salt_check(key.key_size, algorithm, options.salt)
        if algorithm is None:  # refused before a key is read (``hash_algorithm=none``)
            return False
        scheme: padding.AsymmetricPadding = _pss(options.salt, algorithm, signing=False)
    elif options.algorithm == "pkcs1v15":
        scheme = padding.PKCS1v15()
    else:
        raise SignError(f"unsupported rsa signature algorithm {options.algorithm}", user=False)
    try:
        if algorithm is None:
            recovered = public.recover_data_from_signature(signature, scheme, None)
            return hmac.compare_digest(recovered, message)
        if len(message) != algorithm.digest_size:
            return False
        public.verify(signature, message, scheme, utils.Prehashed(algorithm))
    except (InvalidSignature, ValueError):
        return False
    return True


def derived_ed25519(material: bytes, context: bytes) -> bytes:
    """A derived ed25519 key's private key for ``context``, as OpenBao derives it: the seed is
    the first 32 bytes of HKDF-SHA256 (no salt, info = the context) of Go's 64-byte private
    key (the version's seed and its public key)."""
    public = _ed25519(material).public_key().public_bytes_raw()
    return HKDF(hashes.SHA256(), 32, None, context).derive(material + public)


def ed25519_public(material: bytes) -> bytes:
    return _ed25519(material).public_key().public_bytes_raw()


def oaep_encrypt(material: bytes, plaintext: bytes) -> bytes:
    """RSA-OAEP with SHA-256 (and MGF1-SHA-256, no label), as OpenBao's RSA keys encrypt."""
    key = _private(material)
    assert isinstance(key, rsa.RSAPrivateKey)
    return key.public_key().encrypt(plaintext, _OAEP)


def oaep_decrypt(material: bytes, ciphertext: bytes) -> bytes | None:
    """The plaintext, or None if the ciphertext does not decrypt."""
    key = _private(material)
    assert isinstance(key, rsa.RSAPrivateKey)
    try:
        return key.decrypt(ciphertext, _OAEP)
    except ValueError:
        return None


_OAEP = padding.OAEP(padding.MGF1(hashes.SHA256()), hashes.SHA256(), None)


def salt_length(text: str) -> int:
    """``salt_length`` as OpenBao reads it: ``auto``, ``hash`` or an integer of Go's
    ``strconv.Atoi`` no lower than -1 (Go's ``PSSSaltLengthEqualsHash``)."""
    lowered = text.lower()
    if lowered == "auto":
        return SALT_AUTO
    if lowered == "hash":
        return SALT_HASH
    number = _atoi(lowered)
    if number is None:
        raise SignError(f"salt length neither 'auto', 'hash', nor an int: {text}")
    if number < SALT_HASH:
        raise SignError(f"salt length is invalid: {number}")
    return number


def _atoi(text: str) -> int | None:
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits.isascii() or not digits.isdigit():
        return None
    number = int(text)
    return number if -(1 << 63) <= number < 1 << 63 else None


def _rsa_hash(name: str) -> hashes.HashAlgorithm | None:
    algorithm = HASHES[name]
    return None if algorithm is None else algorithm()


def _salt_check(bits: int, algorithm: hashes.HashAlgorithm | None, salt: int) -> None:
    size = 0 if algorithm is None else algorithm.digest_size
    if not SALT_HASH <= salt <= (bits - 1 + 7) // 8 - 2 - size:
        raise SignError(f"requested salt length {salt} is invalid")


def _pss(salt: int, algorithm: hashes.HashAlgorithm, signing: bool) -> padding.PSS:
    length: int | padding._MaxLength | padding._Auto | padding._DigestLength
    if salt == SALT_AUTO:
        length = padding.PSS.MAX_LENGTH if signing else padding.PSS.AUTO
    elif salt == SALT_HASH:
        length = padding.PSS.DIGEST_LENGTH
    else:
        length = salt
    return padding.PSS(padding.MGF1(algorithm), length)


def _ecdsa_digest(kind: str, message: bytes) -> tuple[bytes, ec.ECDSA]:
    """``message`` as a digest ``cryptography`` takes, that OpenSSL reads as the integer Go's
    ``ecdsa.Sign`` takes of ``message`` (truncated to the order's bytes, then its excess bits
    shifted off)."""
    size = len(message)
    if size in _BY_SIZE:
        return message, ec.ECDSA(utils.Prehashed(_BY_SIZE[size]()))
    bits = _CURVES[kind][1]
    order_bytes = (bits + 7) // 8
    head = message[:order_bytes]
    value = int.from_bytes(head, "big") >> max(len(head) * 8 - bits, 0)
    if value >= 1 << 512:
        raise Unsupported(
            "a prehashed input of this length is not supported by sealflow on this curve"
        )
    # 64 bytes (SHA-512's size): OpenSSL takes the order's bytes of them, from the left.
    if bits >= 512:
        encoded = value.to_bytes(64, "big")
    else:
        encoded = value.to_bytes(order_bytes, "big") + bytes(64 - order_bytes)
    return encoded, ec.ECDSA(utils.Prehashed(hashes.SHA512()))


def _ecdsa_pair(signature: bytes, marshaling: str) -> tuple[int, int]:
    if marshaling == "jws":
        half = len(signature) // 2
        return int.from_bytes(signature[:half], "big"), int.from_bytes(signature[half:], "big")
    end = _der_end(signature)
    if end is None:
        raise SignError("supplied signature is invalid")
    try:
        pair = utils.decode_dss_signature(signature[:end])
    except ValueError:
        raise SignError("supplied signature is invalid") from None
    if end != len(signature):
        raise SignError("supplied signature contains extra data")
    return pair


def _der_end(data: bytes) -> int | None:
    """Where the DER SEQUENCE that ``data`` begins with ends, or None."""
    if len(data) < 2 or data[0] != 0x30:
        return None
    first = data[1]
    if first < 0x80:
        end = 2 + first
    else:
        count = first & 0x7F
        if not 1 <= count <= 4 or len(data) < 2 + count:
            return None
        end = 2 + count + int.from_bytes(data[2 : 2 + count], "big")
    return end if end <= len(data) else None


def forget() -> None:
    """Drop every cached private key (a key was deleted or trimmed)."""
    _ed25519.cache_clear()
    _private.cache_clear()


@functools.lru_cache(maxsize=1024)
def _ed25519(material: bytes) -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.from_private_bytes(material)


@functools.lru_cache(maxsize=256)
def _private(material: bytes) -> ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey:
    key = serialization.load_der_private_key(material, None)
    assert isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey)
    return key
