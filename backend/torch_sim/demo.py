"""The demo: train the three reference models on sim and print the fallback and memory report.

Run it with `make demo` (or `python -m torch_sim.demo` inside the project's virtualenv).
"""
from __future__ import annotations

import argparse
import time

import torch

from pu1_explorer import workloads


def _mebibytes(count: int) -> str:
    return f"{count / 2**20:8.2f} MiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=5, help="training steps per model (default 5)")
    parser.add_argument("--device", default="sim:0", help="the sim device to train on (default sim:0)")
    arguments = parser.parse_args(argv)
    if arguments.steps < 1:
        parser.error("--steps must be at least 1")

    torch.sim.set_fallback_policy("silent")
    torch.sim.reset_fallback_counts()
    print(f"sim: {torch.sim.device_count()} simulated devices, training on {arguments.device}\n")
    for name in workloads.WORKLOADS:
        started = time.perf_counter()
        losses, _ = workloads.train(name, arguments.device, steps=arguments.steps)
        elapsed = time.perf_counter() - started
        print(f"{name:12s} loss {losses[0]:.4f} -> {losses[-1]:.4f}   ({arguments.steps} steps, {elapsed:.2f} s)")

    counts = torch.sim.fallback_counts()
    print("\nOperators that reached the fallback (no sim kernel):")
    if not counts:
        print("  none: every operator ran on a sim kernel")
    for operator, count in sorted(counts.items(), key=lambda item: -item[1]):
        print(f"  {count:6d}  {operator}")

    print("\nMemory per device:")
    for index in range(torch.sim.device_count()):
        stats = torch.sim.memory_stats(index)
        print(f"  sim:{index}  allocated {_mebibytes(stats['allocated_bytes.all.current'])}"
              f"  peak {_mebibytes(stats['allocated_bytes.all.peak'])}"
              f"  reserved {_mebibytes(stats['reserved_bytes.all.current'])}"
              f"  capacity {_mebibytes(stats['capacity_bytes'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
