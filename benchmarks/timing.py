"""The one timing method of every speed table, and the small-MLP step the benchmark scripts share.

A comparison (`interleaved`) runs its contenders in one process: each is warmed up first (the same number of
untimed calls, taking turns), then ROUNDS rounds follow in which every contender runs CALLS timed calls in turn,
the order rotating from round to round so that none always goes first. A contender's figure is the median of its
rounds' medians, and its spread the lowest and highest round median: drift in the machine's speed (other work,
clock changes) hits every contender alike, and the spread shows how much there was.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, Mapping

import torch

from pu1_explorer import workloads

# Backward passes run on the calling thread, for sim as for the CPU. By default PyTorch runs a device's backward on
# autograd's device thread; sim's host kernels there start a second OpenMP team, and while a second team lives,
# libgomp's workers stop spinning between parallel regions, which slows every device in the process several times
# over (`benchmarks/openmp_teams.py`). A CPU-only process never has that second team; with this, neither has a run.
torch.autograd.set_multithreading_enabled(False)

ROUNDS = 7
CALLS = 30
WARM_UP_CALLS = 10


def describe_method(rounds: int = ROUNDS, calls: int = CALLS, warm_up_calls: int = WARM_UP_CALLS) -> str:
    """The method in one line, for a script's header (with the counts the script passes to `interleaved`)."""
    return (f"one process, backward on the calling thread, contenders interleaved after {warm_up_calls} warm-up "
            f"calls each; {rounds} rounds of {calls} timed calls each in rotating order; the median of the round "
            "medians, spread = lowest-highest round median")


METHOD = describe_method()


@dataclass(frozen=True)
class Timing:
    """A contender's typical call (median of the round medians) and the spread of its round medians, in seconds."""

    median: float
    low: float
    high: float

    def milliseconds(self) -> str:
        """`1.23 ms (1.20-1.31)`: the median and the spread, for a table cell."""
        return f"{self.median * 1e3:.3f} ms ({self.low * 1e3:.3f}-{self.high * 1e3:.3f})"

    def ratio_to(self, reference: "Timing") -> float:
        """This median over the reference's median (sim over CPU in the tables)."""
        return self.median / reference.median


def interleaved(contenders: Mapping[str, Callable[[], object]], rounds: int = ROUNDS, calls: int = CALLS,
                warm_up_calls: int = WARM_UP_CALLS) -> dict[str, Timing]:
    """Times each contender by the repository's one method (module docstring); names map to their Timing."""
    names = list(contenders)
    for _ in range(warm_up_calls):
        for name in names:
            contenders[name]()
    round_medians: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            work = contenders[name]
            timings = []
            for _ in range(calls):
                started = time.perf_counter()
                work()
                timings.append(time.perf_counter() - started)
            round_medians[name].append(statistics.median(timings))
    return {name: Timing(statistics.median(medians), min(medians), max(medians))
            for name, medians in round_medians.items()}


def sim_against_cpu(make: Callable[[str], Callable[[], object]], **options: int) -> tuple[Timing, Timing]:
    """The CPU's and sim's Timing of the same work, made for each device by `make(device)` and interleaved."""
    timings = interleaved({"cpu": make("cpu"), "sim": make("sim")}, **options)
    return timings["cpu"], timings["sim"]


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
    """The median wall time of `repeats` calls of one contender (after one untimed call when `warm_up`).

    For a figure that stands alone (a start-up, a build); a comparison between devices uses `interleaved`.
    """
    if warm_up:
        work()
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)


def step_seconds(work: Callable[[], object], steps: int = 200) -> tuple[float, float]:
    """Median and 90th percentile of single calls of one contender (the typical step, and the slow tail)."""
    for _ in range(WARM_UP_CALLS):
        work()
    timings = []
    for _ in range(steps):
        started = time.perf_counter()
        work()
        timings.append(time.perf_counter() - started)
    timings.sort()
    return statistics.median(timings), timings[int(0.9 * len(timings))]
