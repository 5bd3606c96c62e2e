"""The one timing helper the benchmark scripts share."""
from __future__ import annotations

import statistics
import time
from typing import Callable


def median_seconds(work: Callable[[], object], repeats: int = 5, warm_up: bool = False) -> float:
    """The median wall time of `repeats` calls of `work` (after one untimed call when `warm_up`)."""
    if warm_up:
        work()
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)
