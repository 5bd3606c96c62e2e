"""What sim's per-operator cost owes to where the machine puts its two threads: a study, not how users run.

Each launch hands work from the launching thread to the driver's executor thread, so its cost depends on how fast
the two processors they run on share memory. On a virtual machine that is the host's choice, and it can change
while a process runs. This script times backend_speed.py's per-operator row (1,000 multiplies of 64x64, until the
device has finished) in one sim process, three placements taking turns by timing.py's `interleaved` rounds:

  scheduler       the launching thread and the executor free to run anywhere (how users run);
  one processor   both pinned to the first processor the process may use: every handover is within one cache;
  two processors  the launching thread pinned to the first, the executor to the second.

`--repeat N` measures N times, `--pause S` seconds apart, to show whether the machine's state moves. When the two
processors' figure is above the one processor's, handing work between processors costs more than switching between
threads on one. `--watch S` instead alternates short rounds on two processors and on one for S seconds and counts
the rounds in which two processors took longer than one: the episodes in which the machine hands work between its
processors slowly, which a measurement of a few seconds can miss. Run: `python benchmarks/processor_placement.py`.
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

import torch_sim  # noqa: F401  (registers the sim device)
from backend_speed import multiplies
from timing import describe_interleaved, interleaved, median_seconds

ROUNDS, CALLS, WARM_UP_CALLS = 5, 20, 5
EXECUTOR_NAME = "sim-executor"


def executor_threads() -> list[int]:
    """The thread ids of sim's executor (and of any OpenMP team it started, which take its name)."""
    found = []
    for entry in os.listdir("/proc/self/task"):
        try:
            if (Path("/proc/self/task") / entry / "comm").read_text().strip() == EXECUTOR_NAME:
                found.append(int(entry))
        except FileNotFoundError:  # the thread ended while we looked
            continue
    return found


def placed(work: Callable[[], object], launcher: set[int], executor: set[int]) -> Callable[[], object]:
    """`work` with the calling thread on `launcher` and the executor on `executor`, until the device finished."""
    wake = torch.ones(1, device="sim")

    def run() -> object:
        os.sched_setaffinity(0, launcher)
        wake.add_(0)  # the executor retires when idle: a launch makes sure one is running to be placed
        for thread in executor_threads():
            os.sched_setaffinity(thread, executor)
        result = work()
        torch.sim.synchronize()
        return result

    return run


def watch(seconds: float, one: Callable[[], object], two: Callable[[], object]) -> str:
    """Rounds of three calls on two processors, then on one, for `seconds`: how many rounds found two slower, and
    the median call of each placement in those rounds and in the others."""
    rounds: list[tuple[float, float]] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        rounds.append(tuple(median_seconds(placement, repeats=3) for placement in (two, one)))
    slow = [pair for pair in rounds if pair[0] > pair[1]]
    fast = [pair for pair in rounds if pair[0] <= pair[1]]

    def medians(pairs: list[tuple[float, float]]) -> str:
        if not pairs:
            return "none"
        return (f"two processors {statistics.median(p[0] for p in pairs) * 1e3:.3f} ms, "
                f"one {statistics.median(p[1] for p in pairs) * 1e3:.3f} ms")

    return (f"{len(slow)} of {len(rounds)} rounds found two processors slower than one ({medians(slow)}); "
            f"the other rounds: {medians(fast)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="how many times to measure")
    parser.add_argument("--pause", type=float, default=10.0, help="seconds between measurements")
    parser.add_argument("--watch", type=float, metavar="SECONDS", help="count slow rounds for SECONDS instead")
    options = parser.parse_args()
    if options.repeat < 1 or options.pause < 0:
        parser.error(f"--repeat must be at least 1 and --pause at least 0, got {options.repeat} and {options.pause}")
    if options.watch is not None and options.watch <= 0:
        parser.error(f"--watch takes a number of seconds above 0, got {options.watch}")
    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        parser.error(f"the study needs a process allowed two processors; this one may use {sorted(allowed)}")
    first, second = sorted(allowed)[:2]
    work = multiplies("sim", size=64, count=1000)
    contenders = {"scheduler": placed(work, allowed, allowed),
                  "one processor": placed(work, {first}, {first}),
                  "two processors": placed(work, {first}, {second})}
    if options.watch is not None:
        for contender in contenders.values():
            contender()  # warm
        print(f"# 1,000 multiplies of 64x64 on sim for {options.watch:g} s: "
              f"{watch(options.watch, contenders['one processor'], contenders['two processors'])}")
        return 0
    print(f"# 1,000 multiplies of 64x64 on sim, until the device finished; "
          f"{describe_interleaved(ROUNDS, CALLS, WARM_UP_CALLS)}")
    print("| time (UTC) | scheduler | one processor | two processors | two over one |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for index in range(options.repeat):
        if index:
            time.sleep(options.pause)
        timings = interleaved(contenders, rounds=ROUNDS, calls=CALLS, warm_up_calls=WARM_UP_CALLS)
        os.sched_setaffinity(0, allowed)
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S")
        one, two = timings["one processor"], timings["two processors"]
        print(f"| {now} | {timings['scheduler'].milliseconds()} | {one.milliseconds()} | {two.milliseconds()} | "
              f"{two.ratio_to(one):.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
