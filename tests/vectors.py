"""Loaders for the test vectors: Wycheproof and C2SP files in tests/data (see its README), NIST
GCM and RFC 8439 (ChaCha20-Poly1305) files in the cryptography_vectors package."""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cryptography_vectors

WYCHEPROOF = Path(__file__).resolve().parent / "data" / "wycheproof"


def wycheproof(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((WYCHEPROOF / name).read_text())
    return data


@dataclass(frozen=True)
class AeadCase:
    source: str
    key: bytes
    iv: bytes
    aad: bytes
    msg: bytes
    ct: bytes
    tag: bytes
    valid: bool


def wycheproof_aead(name: str) -> Iterator[AeadCase]:
    for group in wycheproof(name)["testGroups"]:
        for t in group["tests"]:
            yield AeadCase(
                f"{name}#{t['tcId']}",
                bytes.fromhex(t["key"]),
                bytes.fromhex(t["iv"]),
                bytes.fromhex(t["aad"]),
                bytes.fromhex(t["msg"]),
                bytes.fromhex(t["ct"]),
                bytes.fromhex(t["tag"]),
                t["result"] == "valid",
            )


@dataclass(frozen=True)
class ChunkedCase:
    tc_id: int
    comment: str
    key: bytes
    ctx: bytes
    ct: bytes
    msg_length: int
    msg_sha512: bytes
    valid: bool
    flags: tuple[str, ...]


def c2sp_chunked(name: str) -> list[ChunkedCase]:
    return [
        ChunkedCase(
            t["tcId"],
            t["comment"],
            bytes.fromhex(t["key"]),
            bytes.fromhex(t["ctx"]),
            zlib.decompress(bytes.fromhex(t["ct"])),
            # Cases rejected at the header carry no prefix: nothing may be produced.
            t.get("msgLength", 0),
            bytes.fromhex(t.get("msgSha512", hashlib.sha512(b"").hexdigest())),
            t["result"] == "valid",
            tuple(t["flags"]),
        )
        for group in wycheproof(name)["testGroups"]
        for t in group["tests"]
    ]


def _records(path: str) -> Iterator[dict[str, str]]:
    """Blank-line separated `NAME = value` records, with [section] headers merged in."""
    text = Path(cryptography_vectors.__file__).parent.joinpath(path).read_text()
    section: dict[str, str] = {}
    record: dict[str, str] = {}
    for raw in [*text.splitlines(), ""]:
        line = raw.strip()
        if line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            name, _, value = line[1:-1].partition("=")
            section[name.strip().lower()] = value.strip()
            continue
        if not line:
            if record:
                yield {**section, **record}
                record = {}
            continue
        if line == "FAIL":
            record["fail"] = "1"
            continue
        name, _, value = line.partition("=")
        record[name.strip().lower()] = value.strip()


def _hex_or_text(value: str) -> bytes:
    if value.startswith('"') and value.endswith('"'):
        return value[1:-1].encode()
    return bytes.fromhex(value)


def nist_gcm(path: str) -> Iterator[AeadCase]:
    """96-bit IV, 128-bit tag cases of one NIST GCM .rsp file."""
    for r in _records(f"ciphers/AES/GCM/{path}"):
        if "count" not in r or r.get("ivlen") != "96" or r.get("taglen") != "128":
            continue
        yield AeadCase(
            f"{path}#{r['keylen']}/{r['ptlen']}/{r['aadlen']}/{r['count']}",
            bytes.fromhex(r["key"]),
            bytes.fromhex(r["iv"]),
            bytes.fromhex(r["aad"]),
            bytes.fromhex(r.get("pt", "")),
            bytes.fromhex(r["ct"]),
            bytes.fromhex(r["tag"]),
            "fail" not in r,
        )


def rfc8439() -> Iterator[AeadCase]:
    """ChaCha20-Poly1305 vectors (RFC 7539/8439 and others) with 12-byte nonces, 16-byte tags."""
    for r in _records("ciphers/ChaCha20Poly1305/boringssl.txt"):
        nonce, tag = _hex_or_text(r["nonce"]), _hex_or_text(r["tag"])
        if len(nonce) == 12 and len(tag) == 16:
            yield AeadCase(
                f"boringssl.txt#{r['count']}",
                _hex_or_text(r["key"]),
                nonce,
                _hex_or_text(r["ad"]),
                _hex_or_text(r["in"]),
                _hex_or_text(r["ct"]),
                tag,
                True,
            )
    for r in _records("ciphers/ChaCha20Poly1305/openssl.txt"):
        yield AeadCase(
            f"openssl.txt#{r['count']}",
            bytes.fromhex(r["key"]),
            bytes.fromhex(r["iv"]),
            bytes.fromhex(r["aad"]),
            bytes.fromhex(r["plaintext"]),
            bytes.fromhex(r["ciphertext"]),
            bytes.fromhex(r["tag"]),
            "result" not in r,
        )


@dataclass(frozen=True)
class HmacCase:
    id: str
    digest: str  # engine.Digest's name
    key: bytes
    message: bytes
    tag: bytes


def rfc4231() -> Iterator[HmacCase]:
    """RFC 4231's HMAC-SHA-224/256/384/512 test cases (the truncated one left out by the file)."""
    for bits in (224, 256, 384, 512):
        for i, r in enumerate(_records(f"HMAC/rfc-4231-sha{bits}.txt")):
            yield HmacCase(
                f"sha2-{bits}#{i}",
                f"sha2-{bits}",
                bytes.fromhex(r["key"]),
                bytes.fromhex(r["msg"]),
                bytes.fromhex(r["md"]),
            )
