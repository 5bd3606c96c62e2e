"""The timing methods of the speed tables, and the small-MLP step the benchmark scripts share.

Devices are compared as users run them (`alternating`): each contender alone in a fresh Python process of its own
(benchmarks/device_worker.py) with PyTorch's default settings, so sim's backward runs on autograd's device thread
as it does for users. All contenders' processes start first and build their work; each is warmed up (the same
number of untimed calls, taking turns); then ROUNDS rounds follow in which every contender runs CALLS timed calls in
turn while the others wait, the order rotating from round to round so that none always goes first. A call is timed
until the device finished the work it queued. A contender's figure is the median of its rounds' medians, and its
spread the lowest and highest round median: drift in the machine's speed (other work, clock changes) hits every
contender alike, and the spread shows how much there was.

Runs on one device that differ in something else (traced or not, profiled or not) take turns in one process
instead (`interleaved`), by the same rounds.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from pu1_explorer import workloads

ROUNDS = 7
CALLS = 30
WARM_UP_CALLS = 10
WORKER = Path(__file__).with_name("device_worker.py")
WORKER_START_SECONDS = 600  # a worker imports torch and builds its work (a compiled model compiles in its warm-up)


def describe_method(rounds: int = ROUNDS, calls: int = CALLS, warm_up_calls: int = WARM_UP_CALLS) -> str:
    """The device method in one line, for a script's header (with the counts the script passes to `alternating`)."""
    return (f"each device alone in a fresh process with PyTorch's defaults, the processes taking turns after "
            f"{warm_up_calls} warm-up calls each; {rounds} rounds of {calls} timed calls each (a call ends when the "
            "device has finished) in rotating order; the median of the round medians, spread = lowest-highest "
            "round median")


METHOD = describe_method()


def describe_interleaved(rounds: int = ROUNDS, calls: int = CALLS, warm_up_calls: int = WARM_UP_CALLS) -> str:
    """The one-process method (`interleaved`) in one line, for a script's header."""
    return (f"one process, contenders interleaved after {warm_up_calls} warm-up calls each; {rounds} rounds of "
            f"{calls} timed calls each in rotating order; the median of the round medians, spread = lowest-highest "
            "round median")


INTERLEAVED_METHOD = describe_interleaved()


@dataclass(frozen=True)
class Timing:
    """A contender's typical call (median of the round medians) and the spread of its round medians, in seconds;
    `launching`, for `alternating`: the same median of the processor time the calling thread spent before it waited
    for the device (what the host pays to launch the work)."""

    median: float
    low: float
    high: float
    launching: float | None = None

    def milliseconds(self) -> str:
        """`1.23 ms (1.20-1.31)`: the median and the spread, for a table cell."""
        return f"{self.median * 1e3:.3f} ms ({self.low * 1e3:.3f}-{self.high * 1e3:.3f})"

    def ratio_to(self, reference: "Timing") -> float:
        """This median over the reference's median (sim over CPU in the tables)."""
        return self.median / reference.median


@dataclass(frozen=True)
class Work:
    """Work a device worker builds for itself: `module.function(device=..., **keywords)`, a callable (the module
    importable from this folder)."""

    module: str
    function: str
    keywords: dict[str, Any] = field(default_factory=dict)


class _Worker:
    """One contender's process: builds its work, then times calls on request."""

    def __init__(self, device: str, work: Work) -> None:
        environment = dict(os.environ, SIM_FALLBACK="silent")  # a warning per fallen-back operator, muted
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER), device, work.module, work.function, json.dumps(work.keywords)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=WORKER.parent, env=environment)
        self.label = f"{work.module}.{work.function}({json.dumps(work.keywords)}) on {device}"

    def reply(self) -> dict[str, Any]:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker timing {self.label} exited ({self.process.wait()}); its error is above")
        return json.loads(line)

    def time_calls(self, calls: int) -> dict[str, list[float]]:
        """N calls' times and their launching threads' processor times (device_worker.py)."""
        self.process.stdin.write(json.dumps({"calls": calls}) + "\n")
        self.process.stdin.flush()
        return self.reply()

    def close(self) -> None:
        if self.process.stdin and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def alternating(contenders: Mapping[str, tuple[str, Work]], rounds: int = ROUNDS, calls: int = CALLS,
                warm_up_calls: int = WARM_UP_CALLS) -> dict[str, Timing]:
    """Times each contender (name -> (device, work)) alone in its own process, by the method of the module
    docstring; names map to their Timing."""
    workers: dict[str, _Worker] = {}
    try:
        for name, (device, work) in contenders.items():
            workers[name] = _Worker(device, work)
        for worker in workers.values():
            worker.reply()  # ready
        names = list(workers)
        for _ in range(warm_up_calls):
            for name in names:
                workers[name].time_calls(1)
        round_medians: dict[str, list[float]] = {name: [] for name in names}
        launching_medians: dict[str, list[float]] = {name: [] for name in names}
        for round_index in range(rounds):
            shift = round_index % len(names)
            for name in names[shift:] + names[:shift]:
                reply = workers[name].time_calls(calls)
                round_medians[name].append(statistics.median(reply["timings"]))
                launching_medians[name].append(statistics.median(reply["launching"]))
    finally:
        for worker in workers.values():
            worker.close()
    return {name: Timing(statistics.median(medians), min(medians), max(medians),
                         statistics.median(launching_medians[name]))
            for name, medians in round_medians.items()}


def sim_against_cpu(work: Work, **options: int) -> tuple[Timing, Timing]:
    """The CPU's and sim's Timing of the same work, each device alone in its process, taking turns."""
    timings = alternating({"cpu": ("cpu", work), "sim": ("sim", work)}, **options)
    return timings["cpu"], timings["sim"]


def interleaved(contenders: Mapping[str, Callable[[], object]], rounds: int = ROUNDS, calls: int = CALLS,
                warm_up_calls: int = WARM_UP_CALLS) -> dict[str, Timing]:
    """Times contenders of one process (runs on one device that differ in something else) by the same rounds."""
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
