"""Why sealflow has no XChaCha20-Poly1305 keys: one seal through libsodium against the engine.

    pip install pynacl==1.5.0 && taskset -c 1 python -m benchmarks.xchacha

PyNaCl is not a dependency of sealflow: it is installed for this measurement only (into the
venv or one beside it). Rows: libsodium's XChaCha20-Poly1305 and ChaCha20-Poly1305 (IETF), and
the engine's ChaCha20-Poly1305 (OpenSSL), microseconds per seal, best of five
(docs/BENCHMARKS.md, XChaCha20-Poly1305).
"""

from __future__ import annotations

import importlib
import os
import sys
import timeit

from sealflow import engine
from sealflow.engine import Algorithm


def main() -> int:
    try:
        sodium = importlib.import_module("nacl.bindings")
    except ImportError:
        print("needs PyNaCl: pip install pynacl==1.5.0", file=sys.stderr)
        return 2
    xseal = sodium.crypto_aead_xchacha20poly1305_ietf_encrypt
    seal = sodium.crypto_aead_chacha20poly1305_ietf_encrypt
    key = os.urandom(32)
    print("| plaintext | libsodium XChaCha | libsodium ChaCha (IETF) | engine ChaCha | ratio |")
    print("|---|---:|---:|---:|---:|")
    for size in (100, 1024, 16384, 1 << 20):
        data, long_nonce, nonce = os.urandom(size), os.urandom(24), os.urandom(12)
        rounds = max(10, 200_000 // max(1, size // 64))

        def best(call: object) -> float:
            return min(timeit.repeat(call, number=rounds, repeat=5)) / rounds  # type: ignore[arg-type]

        x = best(lambda: xseal(data, b"", long_nonce, key))
        c = best(lambda: seal(data, b"", nonce, key))
        e = best(lambda: engine.seal(Algorithm.CHACHA20_POLY1305, key, nonce, b"", data))
        print(
            f"| {size} B | {x * 1e6:.2f} us | {c * 1e6:.2f} us | {e * 1e6:.2f} us | {x / e:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
