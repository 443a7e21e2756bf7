"""Engine benchmark: ``python -m benchmarks.engine``.

Every figure is a ratio against a peer measured in the same run (the machine is
noisy). Pin it to one core for steadier numbers: ``taskset -c 1 python -m
benchmarks.engine`` (the scaling table needs two cores: run it unpinned).
"""

from __future__ import annotations

import binascii
import contextlib
import itertools
import os
import ssl
import struct
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable

import cryptography
from cryptography.cobblestone import Cobblestone256Decryptor, Cobblestone256Encryptor
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

from benchmarks._harness import Report, machine, rate
from sealflow import engine
from sealflow.engine import AEAD, Algorithm, BufferPool, ChunkedDecryptor, ChunkedEncryptor

KIB, MIB = 1024, 1024 * 1024
ALG = Algorithm.AES_256_GCM
ROUNDS = int(os.environ.get("SEALFLOW_BENCH_ROUNDS", "5"))


def interleaved(fns: dict[str, Callable[[], object]], window: float = 0.15) -> dict[str, float]:
    """Best calls/second of each fn, timed in alternating windows (fn A, fn B, ..., A, B, ...)
    for ROUNDS rounds: on a machine whose load changes from second to second, a ratio of two
    figures timed side by side means more than one of figures timed a minute apart."""
    batch: dict[str, int] = {}
    for name, fn in fns.items():
        fn()
        n = 1
        while True:  # size a batch to about a tenth of the window
            start = time.perf_counter()
            for _ in range(n):
                fn()
            if time.perf_counter() - start > window / 10:
                break
            n *= 2
        batch[name] = n
    best = dict.fromkeys(fns, 0.0)
    for _ in range(ROUNDS):
        for name, fn in fns.items():
            n, calls, start = batch[name], 0, time.perf_counter()
            while (elapsed := time.perf_counter() - start) < window:
                for _ in range(n):
                    fn()
                calls += n
            best[name] = max(best[name], calls / elapsed)
    return best


def cipher_reuse(report: Report) -> None:
    """After ACCP's CipherReuse: AES-256-GCM, 1000-byte message, 100-byte AAD, seal + open."""
    msg, aad, nonce = os.urandom(1000), os.urandom(100), os.urandom(12)
    keys = [os.urandom(32) for _ in range(256)]
    key0 = keys[0]
    next_key = itertools.cycle(keys).__next__

    def ours_new_same() -> None:
        a = AEAD(ALG, key0)
        a.open(nonce, aad, a.seal(nonce, aad, msg))

    reused = AEAD(ALG, key0)

    def ours_reused_same() -> None:
        reused.open(nonce, aad, reused.seal(nonce, aad, msg))

    def ours_new_newkey() -> None:
        a = AEAD(ALG, next_key())
        a.open(nonce, aad, a.seal(nonce, aad, msg))

    def ours_reused_newkey() -> None:  # no object: the key goes with each call
        k = next_key()
        engine.open(ALG, k, nonce, aad, engine.seal(ALG, k, nonce, aad, msg))

    g = AESGCM(key0)

    def pyca_reused_same() -> None:
        g.decrypt(nonce, g.encrypt(nonce, msg, aad), aad)

    def pyca_new_same() -> None:
        a = AESGCM(key0)
        a.decrypt(nonce, a.encrypt(nonce, msg, aad), aad)

    def pyca_new_newkey() -> None:
        a = AESGCM(next_key())
        a.decrypt(nonce, a.encrypt(nonce, msg, aad), aad)

    ours = {
        ("new", "same key"): ours_new_same,
        ("reused", "same key"): ours_reused_same,
        ("new", "new key"): ours_new_newkey,
        ("reused", "new key"): ours_reused_newkey,
    }
    peers = {
        ("new", "same key"): pyca_new_same,
        ("reused", "same key"): pyca_reused_same,
        ("new", "new key"): pyca_new_newkey,
        ("reused", "new key"): pyca_new_newkey,  # a keyed AESGCM cannot take a new key
    }
    results: dict[tuple[str, str, str], float] = {}
    print("\n## 1. CipherReuse (AES-256-GCM, 1000-byte message, 100-byte AAD, seal + open)\n")
    print("| object | key | EAGER | HYBRID | LAZY | auto provider, LAZY | cryptography AESGCM |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for (obj, key), fn in ours.items():
        row = []
        engine.set_provider("native")
        for strategy in engine.ContextStrategy.__members__:
            engine.set_context_strategy(strategy)
            results[(obj, key, strategy)] = rate(fn)
        engine.set_provider(None)
        engine.set_context_strategy("LAZY")
        results[(obj, key, "auto")] = rate(fn)
        results[(obj, key, "peer")] = rate(peers[(obj, key)])
        for col in ("EAGER", "HYBRID", "LAZY", "auto", "peer"):
            row.append(f"{results[(obj, key, col)]:,.0f}")
        print(f"| {obj} | {key} | " + " | ".join(row) + " |")
    r = results
    report.check(
        "CipherReuse LAZY/EAGER, reused object, same key",
        r[("reused", "same key", "LAZY")] / r[("reused", "same key", "EAGER")],
        1.3,
    )
    report.check(
        "CipherReuse LAZY/HYBRID, new key each operation (reused)",
        r[("reused", "new key", "LAZY")] / r[("reused", "new key", "HYBRID")],
        1.1,
    )
    for obj in ("reused", "new"):
        for key in ("same key", "new key"):
            best = max(r[(obj, key, s)] for s in ("EAGER", "HYBRID", "LAZY", "auto"))
            report.check(
                f"CipherReuse best / cryptography AESGCM, {obj} object, {key}",
                best / r[(obj, key, "peer")],
                1.0,
            )


def _chunked_ours(alg: Algorithm, data: bytes, key: bytes) -> tuple[Callable[[], object], ...]:
    """Seal and open one chunked message: into preallocated buffers, and through the bytes
    API (update() + finalize(), a new bytes object per call, as the README shows)."""
    sealed_buf = bytearray(engine.sealed_size(len(data)))

    def seal() -> None:
        enc = ChunkedEncryptor(alg, key, b"ctx")
        n = enc.update_into(data, sealed_buf)
        enc.finalize_into(memoryview(sealed_buf)[n:])

    seal()
    sealed = bytes(sealed_buf)
    plain_buf = bytearray(len(data) + 16 * KIB)

    def open_() -> None:
        dec = ChunkedDecryptor(alg, key, b"ctx")
        n = dec.update_into(sealed, plain_buf)
        dec.finalize_into(memoryview(plain_buf)[n:])

    def seal_bytes() -> None:
        enc = ChunkedEncryptor(alg, key, b"ctx")
        enc.update(data)
        enc.finalize()

    def open_bytes() -> None:
        dec = ChunkedDecryptor(alg, key, b"ctx")
        dec.update(sealed)
        dec.finalize()

    return seal, open_, seal_bytes, open_bytes


def throughput(report: Report) -> None:
    print("\n## 2. Throughput, single-shot bytes API (MB/s)\n")
    print("| algorithm | size | sealflow seal | peer seal | sealflow open | peer open | peer |")
    print("|---|---:|---:|---:|---:|---:|---|")
    chunked_rows: list[str] = []
    for alg in Algorithm:
        key = os.urandom(alg.spec.key_len)
        peer_cls = ChaCha20Poly1305 if alg is Algorithm.CHACHA20_POLY1305 else AESGCM
        peer = peer_cls(key)
        ours = AEAD(alg, key)
        nonce = os.urandom(12)
        for size in (KIB, 16 * KIB, MIB):
            data = os.urandom(size)
            sealed = ours.seal(nonce, b"", data)
            rows = [
                rate(lambda: ours.seal(nonce, b"", data)),
                rate(lambda: peer.encrypt(nonce, data, b"")),
                rate(lambda: ours.open(nonce, b"", sealed)),
                rate(lambda: peer.decrypt(nonce, sealed, b"")),
            ]
            mbs = [x * size / 1e6 for x in rows]
            print(
                f"| {alg.value} | {size // KIB} KiB | "
                + " | ".join(f"{m:,.0f}" for m in mbs)
                + f" | {peer_cls.__name__} |"
            )
            if size == KIB:
                report.check(
                    f"{alg.value} single-shot 1 KiB seal / cryptography", rows[0] / rows[1], 1.0
                )
                report.check(
                    f"{alg.value} single-shot 1 KiB open / cryptography", rows[2] / rows[3], 1.0
                )
        for size in (MIB, 64 * MIB):
            chunked_rows.append(_chunked_row(report, alg, key, size))
    print(
        "\n## 2b. Throughput, chunked (MB/s): into preallocated buffers (`update_into`) and "
        "through the bytes API (`update()` + `finalize()`), one message per call\n"
    )
    print(
        "| algorithm | size | seal into | seal bytes | peer seal | open into | open bytes "
        "| peer open | peer |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    print("\n".join(chunked_rows))


def _chunked_row(report: Report, alg: Algorithm, key: bytes, size: int) -> str:
    data = os.urandom(size)
    nonce = os.urandom(12)
    seal_i, open_i, seal_b, open_b = _chunked_ours(alg, data, key)
    fns: dict[str, Callable[[], object]] = {
        "seal": seal_i,
        "seal_b": seal_b,
        "open": open_i,
        "open_b": open_b,
    }
    if alg is Algorithm.CHACHA20_POLY1305:
        peer = ChaCha20Poly1305(key)
        buf = bytearray(size + 16)
        peer.encrypt_into(nonce, data, None, buf)
        out = bytearray(size)
        fns["peer_seal"] = lambda: peer.encrypt_into(nonce, data, None, buf)
        fns["peer_open"] = lambda: peer.decrypt_into(nonce, buf, None, out)
        name, ours_s, ours_o, target = (
            "ChaCha20Poly1305.encrypt_into (one call)",
            "seal",
            "open",
            0.9,
        )
    elif alg is Algorithm.AES_256_GCM:

        def cob_seal() -> None:
            e = Cobblestone256Encryptor(key, b"ctx")
            e.update(data)
            e.finalize()

        e = Cobblestone256Encryptor(key, b"ctx")
        ct = e.update(data) + e.finalize()

        def cob_open() -> None:
            d = Cobblestone256Decryptor(key, b"ctx")
            d.update(ct)
            d.finalize()

        fns["peer_seal"], fns["peer_open"] = cob_seal, cob_open
        # Like for like: the bytes API against Cobblestone's bytes API.
        name, ours_s, ours_o, target = "cobblestone update()+finalize()", "seal_b", "open_b", 1.0
    else:  # Cobblestone256 is the named peer; AES-128 has no peer row
        name, ours_s, ours_o, target = "-", "seal", "open", 0.0
    r = interleaved(fns, window=0.3 if size > MIB else 0.15)
    label = f"{alg.value} chunked {size // MIB} MiB"
    if target:
        report.check(f"{label} seal / {name}", r[ours_s] / r["peer_seal"], target)
        report.check(f"{label} open / {name}", r[ours_o] / r["peer_open"], target)
    report.check(f"{label} seal bytes API / update_into", r["seal_b"] / r["seal"], 0.9)
    report.check(f"{label} open bytes API / update_into", r["open_b"] / r["open"], 0.9)
    cols = ("seal", "seal_b", "peer_seal", "open", "open_b", "peer_open")
    mbs = ["-" if c not in r else f"{r[c] * size / 1e6:,.0f}" for c in cols]
    return f"| {alg.value} | {size // MIB} MiB | " + " | ".join(mbs) + f" | {name} |"


def _streams(alg: Algorithm, key: bytes, data: bytes, threads: int, seconds: float = 1.0) -> float:
    """MB/s of 1 MiB chunked seals on `threads` threads at once, for `seconds`."""
    counts = [0] * threads
    stop = time.perf_counter() + seconds

    def work(i: int) -> None:
        seal = _chunked_ours(alg, data, key)[0]  # update_into
        while time.perf_counter() < stop:
            seal()
            counts[i] += 1

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return sum(counts) * len(data) / seconds / 1e6


def scaling(report: Report) -> None:
    """1 MiB chunked streams on one and two threads, per provider (forced, alternating), and
    which one a calibration for two jobs at once picks: issue 16 asks the calibrated pair to
    beat every single thread."""
    print("\n## 3. Scaling: 1 MiB chunked streams (seal, update_into), 1 vs 2 threads (MB/s)\n")
    print(
        "| algorithm | provider | 1 thread | 2 threads | 2 threads / 1 thread "
        "| 2 threads / best 1 thread of any provider |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for alg in Algorithm:
        key, data = os.urandom(alg.spec.key_len), os.urandom(MIB)

        def run(threads: int) -> float:
            return _streams(alg, key, data, threads, seconds=0.3)

        engine.set_provider(None)
        engine.calibrate(threads=2)
        chosen = engine.provider_choice()[alg]["chunks"]
        rows = {"native": (0.0, 0.0), "cryptography": (0.0, 0.0)}
        for _ in range(ROUNDS):  # the providers alternate, best round of each
            for provider, (one, two) in rows.items():
                engine.set_provider(provider)
                rows[provider] = (max(one, run(1)), max(two, run(2)))
        engine.set_provider(None)
        best_one = max(one for one, _ in rows.values())
        for provider, (one, two) in rows.items():
            label = f"{provider} (the calibration's choice)" if provider == chosen else provider
            print(
                f"| {alg.value} | {label} | {one:,.0f} | {two:,.0f} | {two / one:.2f}x "
                f"| {two / best_one:.2f}x |"
            )
        engine.calibrate(threads=1)
        target = 1.15 if alg is Algorithm.AES_256_GCM else 1.0
        report.check(
            f"{alg.value} chunked 1 MiB, 2 threads as calibrated for 2 ({chosen}) / best 1 "
            "thread of any provider",
            rows[chosen][1] / best_one,
            target,
        )


def by_provider(report: Report) -> None:
    """AES-256-GCM streams on each provider, 1 and 2 threads. Run inside the Docker image
    (deploy/ci/run.sh), whose OpenSSL (>= 3.2) has VAES AES-GCM: the native provider then
    releases the GIL for a whole run of chunks at VAES speed, which Debian 12's OpenSSL 3.0
    cannot give it."""
    flags = ""
    with contextlib.suppress(OSError, StopIteration), open("/proc/cpuinfo") as f:
        flags = next(line for line in f if line.startswith("flags"))
    vaes = "yes" if {"vaes", "vpclmulqdq"} <= set(flags.split()) else "no"
    print(
        "\n## 7. AES-256-GCM by provider: 1 MiB chunked streams (seal), 1 vs 2 threads (MB/s)\n"
        f"\n{ssl.OPENSSL_VERSION} (the system's libcrypto, the native provider's); "
        f"cryptography {cryptography.__version__}; CPU VAES + VPCLMULQDQ: {vaes}\n"
    )
    print("| provider | 1 thread | 2 threads | 2 / 1 |\n|---|---:|---:|---:|")
    key, data = os.urandom(32), os.urandom(MIB)
    rows = {}
    try:
        for provider in ("native", "cryptography"):
            engine.set_provider(provider)
            one = max(_streams(ALG, key, data, 1) for _ in range(2))
            two = max(_streams(ALG, key, data, 2) for _ in range(2))
            rows[provider] = (one, two)
            print(f"| {provider} | {one:,.0f} | {two:,.0f} | {two / one:.2f}x |")
    finally:
        engine.set_provider(None)
    (n1, n2), (c1, c2) = rows["native"], rows["cryptography"]
    print(f"| native / cryptography | {n1 / c1:.2f}x | {n2 / c2:.2f}x | |")
    report.check("aes-256-gcm chunked 1 MiB, native / cryptography, 1 thread", n1 / c1, 1.0)
    report.check("aes-256-gcm chunked 1 MiB, native / cryptography, 2 threads", n2 / c2, 1.0)
    report.check(
        "aes-256-gcm chunked 1 MiB, native 2 threads / best 1 thread", n2 / max(n1, c1), 1.8
    )


def allocation(report: Report) -> None:
    print("\n## 4. Allocation: 1 MiB single-shot open fed in 1 KiB pieces (AES-256-GCM)\n")
    key, nonce = os.urandom(32), os.urandom(12)
    msg = os.urandom(MIB)
    sealed = AEAD(ALG, key).seal(nonce, b"", msg)
    pieces = [sealed[i : i + KIB] for i in range(0, len(sealed), KIB)]
    pool = BufferPool()

    def fed(parts: list[bytes]) -> None:
        buf = pool.acquire(len(sealed))  # the size hint a Content-Length gives
        for p in parts:
            buf.feed(p)
        view = buf.open(ALG, key, nonce, b"")
        view.release()
        buf.release()

    fed(pieces)
    tracemalloc.start()
    for _ in range(10):
        fed(pieces)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    small, whole = rate(lambda: fed(pieces)), rate(lambda: fed([sealed]))
    print("| fed as | ops/s | peak traced bytes per op |\n|---|---:|---:|")
    print(f"| 1 KiB pieces | {small:,.0f} | {peak:,} |\n| one piece | {whole:,.0f} | |")
    report.check(
        "1 MiB open in 1 KiB pieces: allocation within 1.1 MiB + 64 KiB",
        (1.1 * MIB + 64 * KIB) / max(peak, 1),
        1.0,
    )
    report.check("1 MiB open in 1 KiB pieces / one piece (ops/s)", small / whole, 0.8)


RECORDS_PER_BATCH = 8192
PREFIX = b"SFL1\x02\x02\x00\x00\x00\x01\x07default"  # a single-shot envelope prefix


def records(report: Report) -> None:
    """seal_many/open_many against a Python loop over a cached AESGCM, records per second."""
    n, aad = RECORDS_PER_BATCH, b"user aad"
    print(f"\n## 5. Batches of records (AES-256-GCM, {n:,} records per batch, records/s)\n")
    print(
        "`seal_many` takes the records as a list and returns one buffer; `+ list()` also makes "
        "a `bytes` per record; `framed` takes and gives `u32 length || record` buffers (the "
        "`mode=records` body and response). Every record is sealed as a single-shot envelope "
        "(prefix, nonce, AAD = prefix || aad). The peer is `[g.encrypt(os.urandom(12), r, aad) "
        "for r in records]` over one cached `AESGCM` (no prefix).\n"
    )
    print(
        "| record | provider | seal_many | seal_many + list() | framed | open_many "
        "| peer encrypt | peer decrypt | seal_many / peer | framed / peer |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    key = os.urandom(32)
    g = AESGCM(key)
    urandom = os.urandom
    for size in (100, KIB):
        plains = [urandom(size) for _ in range(n)]
        body = b"".join(struct.pack(">I", size) + p for p in plains)
        nonce = urandom(12)
        theirs = [g.encrypt(nonce, p, aad) for p in plains]
        for provider in ("auto", "native", "cryptography"):
            engine.set_provider(None if provider == "auto" else provider)
            label = provider
            if provider == "auto":  # calibrated again after set_provider(None): say what it chose
                label = f"auto ({engine.provider_choice()[ALG]['records_small']})"
            sealed = list(engine.seal_many(ALG, key, aad, plains, prefix=PREFIX))
            # The peer is timed in every row, alternating with ours (see interleaved).
            r = interleaved(
                {
                    "list": lambda: engine.seal_many(ALG, key, aad, plains, prefix=PREFIX),
                    "list+": lambda: list(engine.seal_many(ALG, key, aad, plains, prefix=PREFIX)),
                    "framed": lambda: engine.seal_many(
                        ALG, key, aad, engine.Records.from_framed(body), prefix=PREFIX, framed=True
                    ),
                    "open": lambda: engine.open_many(ALG, key, aad, sealed, prefix=PREFIX),
                    "peer_seal": lambda: [g.encrypt(urandom(12), p, aad) for p in plains],
                    "peer_open": lambda: [g.decrypt(nonce, c, aad) for c in theirs],
                }
            )
            row = [r[k] * n for k in ("list", "list+", "framed", "open", "peer_seal", "peer_open")]
            peer_seal, peer_open = row[4], row[5]
            print(
                f"| {size} B | {label} | "
                + " | ".join(f"{x:,.0f}" for x in row)
                + f" | {row[0] / peer_seal:.2f}x | {row[2] / peer_seal:.2f}x |"
            )
            if provider == "auto":
                target = 2.0 if size == 100 else 1.2
                report.check(
                    f"seal_many {size} B records / AESGCM loop", row[0] / peer_seal, target
                )
                report.check(
                    f"seal_many framed {size} B records / AESGCM loop", row[2] / peer_seal, target
                )
                report.check(f"open_many {size} B records / AESGCM loop", row[3] / peer_open, 1.0)
        engine.set_provider(None)


def records_reuse(report: Report) -> None:
    """CipherReuse for seal_many: small batches, so the context's cost per batch shows."""
    count, size = 16, 100
    plains = [os.urandom(size) for _ in range(count)]
    keys = [os.urandom(32) for _ in range(256)]
    next_key = itertools.cycle(keys).__next__
    print(
        f"\n## 6. CipherReuse for seal_many (AES-256-GCM, native provider, {count} records of "
        f"{size} B per batch, batches/s)\n"
    )
    print("| key | EAGER | HYBRID | LAZY | LAZY / EAGER |\n|---|---:|---:|---:|---:|")
    engine.set_provider("native")
    results: dict[tuple[str, str], float] = {}
    key_choices: tuple[tuple[str, Callable[[], bytes]], ...] = (
        ("same key", lambda: keys[0]),
        ("new key per batch", next_key),
    )
    for label, key_of in key_choices:
        for strategy in engine.ContextStrategy.__members__:
            engine.set_context_strategy(strategy)
            results[(label, strategy)] = rate(
                lambda: engine.seal_many(ALG, key_of(), b"", plains, prefix=PREFIX)
            )
        r = [results[(label, s)] for s in ("EAGER", "HYBRID", "LAZY")]
        print(f"| {label} | " + " | ".join(f"{x:,.0f}" for x in r) + f" | {r[2] / r[0]:.2f}x |")
    engine.set_context_strategy("LAZY")
    engine.set_provider(None)
    report.check(
        "seal_many CipherReuse LAZY/EAGER, same key",
        results[("same key", "LAZY")] / results[("same key", "EAGER")],
        1.0,
    )


TEXT_RECORDS = 1000


def text(report: Report) -> None:
    """Records.from_base64 + seal_many_text against the same work per record in Python."""
    n, size = TEXT_RECORDS, 100
    print(
        f"\n## 7. Batches as text (AES-256-GCM, {n:,} records of {size} B per batch, records/s)\n"
    )
    print(
        "The input is the records' base64 joined by newlines (what Transit's `batch_input` "
        "becomes); the output one text: each record as `before || base64(nonce || ciphertext "
        "|| tag) || after`, comma-separated, between a head and a tail. `decode` is "
        "`Records.from_base64` alone, `seal` `seal_many_text` alone, `both` the two. The peer "
        "does the same per record in Python: `binascii.a2b_base64`, `AESGCM.encrypt` with "
        "`os.urandom(12)`, `binascii.b2a_base64`, the pieces joined.\n"
    )
    print(
        "| provider | decode | seal | both | peer | both / peer |\n|---|---:|---:|---:|---:|---:|"
    )
    key = os.urandom(32)
    g = AESGCM(key)
    texts = [binascii.b2a_base64(os.urandom(size), newline=False) for _ in range(n)]
    column = b"\n".join(texts)
    before, after = b'{"ciphertext":"vault:v1:', b'","key_version":1,"reference":""}'
    urandom, a2b, b2a = os.urandom, binascii.a2b_base64, binascii.b2a_base64

    def peer() -> bytes:
        pieces = []
        for t in texts:
            nonce = urandom(12)
            sealed = b2a(nonce + g.encrypt(nonce, a2b(t), None), newline=False)
            pieces.append(before + sealed + after)
        return b"[" + b",".join(pieces) + b"]"

    def seal(records: engine.Records) -> bytes:
        return engine.seal_many_text(
            ALG, key, b"", records, before=before, after=after, sep=b",", head=b"[", tail=b"]"
        )

    for provider in ("native", "cryptography"):
        engine.set_provider(provider)
        records = engine.Records.from_base64(column, n)
        r = interleaved(
            {
                "decode": lambda: engine.Records.from_base64(column, n),
                "seal": lambda: seal(records),
                "both": lambda: seal(engine.Records.from_base64(column, n)),
                "peer": peer,
            }
        )
        row = [r[k] * n for k in ("decode", "seal", "both", "peer")]
        print(
            f"| {provider} | "
            + " | ".join(f"{x:,.0f}" for x in row)
            + f" | {row[2] / row[3]:.2f}x |"
        )
        if provider == "native":
            report.check(
                f"from_base64 + seal_many_text {size} B / Python loop", row[2] / row[3], 3.0
            )
    engine.set_provider(None)


SECTIONS = {
    "reuse": cipher_reuse,
    "throughput": throughput,
    "scaling": scaling,
    "allocation": allocation,
    "records": records,
    "records_reuse": records_reuse,
    "by_provider": by_provider,
    "text": text,
}


def main() -> None:
    """Every section, or those named on the command line (e.g. ``records records_reuse``)."""
    names = sys.argv[1:] or list(SECTIONS)
    unknown = set(names) - set(SECTIONS)
    if unknown:
        sys.exit(f"unknown sections {sorted(unknown)}; choose from {list(SECTIONS)}")
    # Every section but the scaling one runs one job at a time: calibrate for that (the
    # scaling section calibrates for two, then back).
    engine.calibrate(threads=1)
    print(
        f"# sealflow engine benchmark\n\n{machine()}; provider choice (calibrated for one "
        "job at a time): "
        + "; ".join(f"{a.value}: {c}" for a, c in engine.provider_choice().items())
    )
    report = Report()
    for name in names:
        SECTIONS[name](report)
    report.print_checks()


if __name__ == "__main__":
    main()
