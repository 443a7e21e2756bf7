"""The provider calibration: what it measures, the rule it chooses by, and what it exposes.
No timing is asserted: only the shape of the figures and the rule applied to them."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest

from sealflow import engine
from sealflow.engine import Algorithm, Calibration, Measurement, SizeClass


@pytest.fixture(autouse=True)
def _recalibrate_after() -> Iterator[None]:
    yield
    engine.set_provider(None)
    engine.calibrate(threads=engine.parallelism())


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_calibration_measures_every_provider_per_algorithm_and_class(threads: int) -> None:
    choice = engine.calibrate(threads=threads)
    calibration = engine.calibration()
    assert calibration is not None
    assert calibration.threads == threads
    assert calibration.seconds > 0
    cells = {(m.algorithm, m.size_class, m.provider) for m in calibration.measurements}
    assert cells == {(a, c, p) for a in Algorithm for c in SizeClass for p in engine.PROVIDERS}
    assert all(m.single > 0 for m in calibration.measurements)
    for alg in Algorithm:
        for cls in SizeClass:
            cell = [
                m for m in calibration.measurements if (m.algorithm, m.size_class) == (alg, cls)
            ]
            if threads == 1 or cls is SizeClass.SMALL:
                # Not measured apart: one thread, or inline jobs.
                assert all(m.aggregate == m.single for m in cell)
            else:
                # The aggregate of the provider with the best figure alone is always measured;
                # another's is skipped only when `threads` times its figure alone cannot win.
                top = max(cell, key=lambda m: m.single)
                assert top.aggregate is not None
                assert top.aggregate > 0
                for m in cell:
                    if m.aggregate is None:
                        assert threads * m.single < max(x.aggregate or 0 for x in cell)
    # The choice in use is the calibration's.
    assert choice == {
        alg: {cls.name.lower(): calibration.choice()[alg, cls] for cls in SizeClass}
        for alg in Algorithm
    }
    assert engine.provider_choice() == choice


def _m(cls: SizeClass, provider: str, single: float, aggregate: float | None) -> Measurement:
    return Measurement(Algorithm.AES_256_GCM, cls, provider, single, aggregate)


def test_the_rule_small_by_one_thread_the_rest_by_all_threads_together() -> None:
    # cryptography is faster alone, native faster with the pool's threads together.
    rows = tuple(
        m
        for cls in (SizeClass.SMALL, SizeClass.CHUNKS)
        for m in (_m(cls, "native", 4.0, 8.0), _m(cls, "cryptography", 7.0, 6.0))
    )
    pooled = Calibration(2, 0.05, rows).choice()
    assert pooled[Algorithm.AES_256_GCM, SizeClass.SMALL] == "cryptography"  # inline: alone
    assert pooled[Algorithm.AES_256_GCM, SizeClass.CHUNKS] == "native"  # pool: together
    alone = Calibration(1, 0.05, rows).choice()
    assert alone[Algorithm.AES_256_GCM, SizeClass.CHUNKS] == "cryptography"
    assert Calibration.basis(SizeClass.SMALL, 2) == "single"
    assert Calibration.basis(SizeClass.RECORDS_SMALL, 2) == "aggregate"
    assert Calibration.basis(SizeClass.LARGE, 1) == "single"
    # A provider whose aggregate was not measured (it could not win) is never chosen by it.
    skipped = (_m(SizeClass.LARGE, "native", 9.0, None), _m(SizeClass.LARGE, "cryptography", 1, 2))
    assert Calibration(2, 0.05, skipped).choice()[Algorithm.AES_256_GCM, SizeClass.LARGE] == (
        "cryptography"
    )


def test_forcing_a_provider_has_no_figures_and_auto_keeps_the_thread_count() -> None:
    engine.calibrate(threads=3)
    engine.set_provider("native")
    assert engine.calibration() is None
    assert set(engine.provider_choice()[Algorithm.CHACHA20_POLY1305].values()) == {"native"}
    engine.set_provider(None)  # calibrates again on first use, for the same concurrency
    calibration = engine.calibration()
    assert calibration is not None
    assert calibration.threads == 3


def test_threads_below_one_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        engine.calibrate(threads=0)


def test_parallelism_is_the_pools_threads_on_the_cores_this_process_may_use() -> None:
    cores = len(os.sched_getaffinity(0))
    assert engine.parallelism(1) == 1
    assert engine.parallelism(64) == cores
    assert engine.parallelism() == min(cores, 8)
    pool = engine.CryptoPool(threads=1)
    try:
        assert pool.parallelism == 1
    finally:
        pool.close()


def test_calibration_threads_leave_no_thread_behind() -> None:
    before = {t.name for t in threading.enumerate()}
    engine.calibrate(threads=2)
    after = {t.name for t in threading.enumerate()}
    assert not {n for n in after - before if n.startswith("sealflow-calibrate")}
