"""Which provider runs what: the providers by name, and the choice per algorithm and size class.

Two providers implement one small interface (``_provider``): ``native`` (the system libcrypto
through cffi) and ``cryptography`` (pyca's bundled OpenSSL). Which is faster depends on the
algorithm and the message size: on Debian 12's OpenSSL 3.0, AES-GCM lacks VAES, so
``cryptography`` wins for large AES messages while the native call's lower per-call cost
wins for small ones, and under concurrency the provider that releases the GIL wins. A
calibration of about 50 ms picks one provider per algorithm and size class for the
concurrency the process runs; the choice can be overridden with ``set_provider`` (the
service's ``SEALFLOW_PROVIDER``).

The calibration times the codecs, which sit above this module and select through it, so
this module cannot import it: the package's ``__init__`` hands it in (``use_calibrator``),
and the first ``select`` without a choice runs it.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass

from ._native import NativeProvider
from ._provider import Provider
from ._pyca import CryptographyProvider
from ._types import Algorithm, AlgorithmSpec


class SizeClass(enum.IntEnum):
    SMALL = 0  # single-shot messages below SMALL_LIMIT bytes
    LARGE = 1  # single-shot messages of SMALL_LIMIT bytes or more
    CHUNKS = 2  # batches of C2SP chunks
    RECORDS_SMALL = 3  # seal_many/open_many, records below SMALL_LIMIT bytes on average
    RECORDS_LARGE = 4  # seal_many/open_many, larger records


# Around here the per-call cost stops dominating (and pyca starts releasing the GIL at 2 KiB).
SMALL_LIMIT = 4096

PROVIDERS: dict[str, Provider] = {
    "native": NativeProvider(),
    "cryptography": CryptographyProvider(),
}


@dataclass(frozen=True, slots=True)
class Measurement:
    """One provider's speed for one algorithm and size class, in bytes per second."""

    algorithm: Algorithm
    size_class: SizeClass
    provider: str
    single: float  # one thread
    # `threads` threads at once, all together (= single for one thread or an inline class;
    # None when not measured because it could not win, see ``_calibration.measure``)
    aggregate: float | None


@dataclass(frozen=True, slots=True)
class Calibration:
    """What a calibration measured and chose."""

    threads: int  # the concurrency calibrated for (the crypto pool's, on this process's cores)
    seconds: float  # how long it took
    measurements: tuple[Measurement, ...]

    @staticmethod
    def basis(size_class: SizeClass, threads: int) -> str:
        """Which figure decides: "single" for inline jobs or one thread, else "aggregate"."""
        return "single" if size_class is SizeClass.SMALL or threads == 1 else "aggregate"

    def _score(self, m: Measurement) -> float:
        if self.basis(m.size_class, self.threads) == "single":
            return m.single
        return m.aggregate if m.aggregate is not None else 0.0

    def choice(self) -> dict[tuple[Algorithm, SizeClass], str]:
        """The faster provider per (algorithm, size class), by the figure that decides."""
        best: dict[tuple[Algorithm, SizeClass], Measurement] = {}
        for m in self.measurements:
            key = (m.algorithm, m.size_class)
            if key not in best or self._score(m) > self._score(best[key]):
                best[key] = m
        return {key: m.provider for key, m in best.items()}


# Measures every provider for a concurrency (None: what a default CryptoPool runs).
Calibrator = Callable[[int | None], Calibration]

# table[algorithm index][size class], filled by calibration or an override.
_table: list[list[Provider]] | None = None
_lock = threading.Lock()
_calibrator: Calibrator | None = None

# The concurrency to calibrate for (None: what a default CryptoPool runs), and what the last
# calibration measured (None before the first and while set_provider forces a choice).
_threads: int | None = None
_calibration: Calibration | None = None


def use_calibrator(calibrator: Calibrator) -> None:
    """Calibrate with this function from now on (the package's ``__init__`` hands in
    ``_calibration.measure``)."""
    global _calibrator
    _calibrator = calibrator


def calibrate(threads: int | None = None) -> dict[Algorithm, dict[str, str]]:
    """Time both providers per algorithm and size class and keep the faster (20-70 ms).

    threads: how many crypto jobs the process runs at once (``CryptoPool.parallelism``);
    by default what a default ``CryptoPool`` runs on this process's cores. With more than
    one, every class but ``small`` (inline on the event loop) is chosen by the throughput
    of that many threads together (see ``_calibration``). The number is kept for later
    calibrations (``set_provider(None)``).
    """
    global _table, _threads, _calibration
    if threads is not None:
        if threads < 1:
            raise ValueError("threads must be at least 1")
        _threads = threads
    if _calibrator is None:
        raise RuntimeError("no calibration to run: sealflow.engine's __init__ hands it in")
    result = _calibrator(_threads)
    choice = result.choice()
    _table = [[PROVIDERS[choice[alg, cls]] for cls in SizeClass] for alg in Algorithm]
    _calibration = result
    return provider_choice()


def calibration() -> Calibration | None:
    """What the calibration in use measured (None while ``set_provider`` forces a provider)."""
    _ensure_table()
    return _calibration


def set_provider(name: str | None) -> None:
    """Use one provider for everything ("native" or "cryptography"), or None to calibrate."""
    global _table, _calibration
    if name is None or name == "auto":
        _table = _calibration = None
        return
    if name not in PROVIDERS:
        raise ValueError(f"unknown provider {name!r}; expected one of {sorted(PROVIDERS)} or auto")
    _table = [[PROVIDERS[name]] * len(SizeClass) for _ in Algorithm]
    _calibration = None


def _ensure_table() -> list[list[Provider]]:
    table = _table
    if table is None:
        with _lock:
            if _table is None:
                calibrate()
            table = _table
        assert table is not None
    return table


def select(spec: AlgorithmSpec, cls: SizeClass) -> Provider:
    table = _table
    if table is None:
        table = _ensure_table()
    return table[spec.index][cls]


def provider_choice() -> dict[Algorithm, dict[str, str]]:
    """The provider in use per algorithm and size class (calibrating first if needed)."""
    table = _ensure_table()
    return {
        alg: {cls.name.lower(): table[alg.spec.index][cls].name for cls in SizeClass}
        for alg in Algorithm
    }
