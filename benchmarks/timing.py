"""The timing helpers and the small-MLP step the benchmark scripts share."""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

from pu1_explorer import workloads


def mlp_step(device: str) -> Callable[[], object]:
    """One forward and backward pass of the reference small MLP on a fixed batch, ready to call."""
    torch.manual_seed(0)
    model = workloads.small_mlp().to(device)
    inputs = torch.randn(32, 64, device=device)
    targets = torch.randint(0, 10, (32,), device=device)

    def run() -> object:
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        return loss

    return run


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


def step_seconds(work: Callable[[], object], steps: int = 200) -> tuple[float, float]:
    """Median and 90th percentile of single calls of `work` (the typical step, and the slow tail)."""
    for _ in range(10):
        work()
    timings = []
    for _ in range(steps):
        started = time.perf_counter()
        work()
        timings.append(time.perf_counter() - started)
    timings.sort()
    return statistics.median(timings), timings[int(0.9 * len(timings))]
