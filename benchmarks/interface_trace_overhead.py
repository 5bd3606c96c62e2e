"""What sim's interface trace costs per operator: 1,000 multiplies of 64x64, on CPU and on sim with the trace
off and on, in the same run.

Every sim interface method starts with a trace line that, while the trace is off, is one relaxed atomic
load; "off" is the figure every user pays. The rounds alternate CPU, off and on, so a change in the
machine's load hits all three; the spread of the off ratio over the rounds is the noise it is read
against. Run: `make benchmark` (or `.venv/bin/python benchmarks/interface_trace_overhead.py`).
"""
from __future__ import annotations

import statistics
from typing import Callable

import torch

from timing import median_seconds

MULTIPLIES = 1000
ROUNDS = 7
REPEATS = 5


def multiplies(device: str) -> Callable[[], object]:
    left = torch.randn(64, 64, device=device)
    right = torch.randn(64, 64, device=device)

    def run() -> object:
        for _ in range(MULTIPLIES):
            product = left * right
        return product

    return run


def traced_seconds(work: Callable[[], object]) -> tuple[float, int]:
    """The median time of `work` with the interface trace on, and how many records one call of it made."""
    torch.sim.start_interface_trace()
    try:
        seconds = median_seconds(work, repeats=REPEATS, warm_up=True)
    finally:
        records = torch.sim.stop_interface_trace()
    return seconds, len(records) // (REPEATS + 1)


def main() -> int:
    torch.sim.set_fallback_policy("silent")
    cpu_work, sim_work = multiplies("cpu"), multiplies("sim")
    cpu, off, on, records = [], [], [], 0
    for _ in range(ROUNDS):
        cpu.append(median_seconds(cpu_work, repeats=REPEATS, warm_up=True))
        off.append(median_seconds(sim_work, repeats=REPEATS, warm_up=True))
        seconds, records = traced_seconds(sim_work)
        on.append(seconds)
    off_ratios = [o / c for o, c in zip(off, cpu)]
    on_ratios = [o / c for o, c in zip(on, cpu)]
    per_op = {name: statistics.median(times) / MULTIPLIES * 1e6 for name, times in
              (("CPU eager", cpu), ("sim, trace off", off), ("sim, trace on", on))}
    print(f"interface trace overhead: {MULTIPLIES:,} multiplies of 64x64 float32, median of {REPEATS} repeats, "
          f"{ROUNDS} interleaved rounds")
    print("| run | per op | ratio to CPU (median) | ratio over the rounds (min–max) |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| CPU eager | {per_op['CPU eager']:.2f} µs | 1.00× | |")
    for name, ratios in (("sim, trace off", off_ratios), ("sim, trace on", on_ratios)):
        print(f"| {name} | {per_op[name]:.2f} µs | {statistics.median(ratios):.2f}× | "
              f"{min(ratios):.2f}×–{max(ratios):.2f}× |")
    print(f"records per {MULTIPLIES:,} multiplies with the trace on: {records:,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
