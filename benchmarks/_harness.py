"""Small timing helpers shared by the benchmarks (no timing ever goes into the tests)."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable

DURATION = float(os.environ.get("SEALFLOW_BENCH_SECONDS", "0.3"))


def rate(fn: Callable[[], object], duration: float = DURATION, repeats: int = 3) -> float:
    """Best calls/second of fn over a few timed windows of about `duration` seconds."""
    fn()
    n = 1
    while True:  # size a batch to about a tenth of the window
        start = time.perf_counter()
        for _ in range(n):
            fn()
        took = time.perf_counter() - start
        if took > duration / 10:
            break
        n *= 2
    best = 0.0
    for _ in range(repeats):
        calls, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < duration:
            for _ in range(n):
                fn()
            calls += n
        best = max(best, calls / elapsed)
    return best


def machine() -> str:
    cpu = "unknown cpu"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


class Report:
    """Collects rows and target lines; prints them as Markdown tables."""

    def __init__(self) -> None:
        self.checks: list[tuple[str, float, float]] = []

    def check(self, label: str, ratio: float, target: float) -> None:
        self.checks.append((label, ratio, target))

    def print_checks(self) -> bool:
        print("\n| target | measured | needed | result |\n|---|---:|---:|---|")
        ok = True
        for label, ratio, target in self.checks:
            passed = ratio >= target
            ok &= passed
            verdict = "PASS" if passed else "FALL SHORT"
            print(f"| {label} | {ratio:.2f}x | {target:.2f}x | {verdict} |")
        return ok
