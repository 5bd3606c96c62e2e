"""Speed of the explorer engine: classification, entering the tracer, tracing overhead, exporting, and the coverage
and ranking commands as users run them (each a fresh process, the commands taking turns).

Run: `make benchmark` (or `python benchmarks/explorer_speed.py` in the project's virtualenv).
Figures are medians of several repeats, measured in this run.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time

import torch

from timing import median_seconds, mlp_step
from pu1_explorer import coverage
from pu1_explorer.tracer import Tracer, trace

REPEATS = 5


def main() -> int:
    torch.sim.set_fallback_policy("silent")
    started = time.perf_counter()
    coverage("sim")
    cold = time.perf_counter() - started
    warm = median_seconds(lambda: coverage("sim"))
    print(f"classifying all ATen overloads for sim: {cold:.3f} s cold, {warm:.3f} s warm (target <= 0.5 s)")

    def enter_and_leave() -> None:
        tracer = Tracer("sim")
        tracer.install()
        tracer.uninstall()

    print(f"entering (and leaving) the tracer: {median_seconds(enter_and_leave):.3f} s (target <= 0.5 s)")

    step = mlp_step("sim")
    for _ in range(3):
        step()
    plain = median_seconds(lambda: [step() for _ in range(10)]) / 10
    with trace("sim") as recorded:
        step()
        traced = median_seconds(lambda: [step() for _ in range(10)]) / 10
    hops_per_step = len(recorded.hops) / (1 + 10 * REPEATS)
    print(f"small MLP forward+backward on sim: {plain * 1e3:.2f} ms untraced, {traced * 1e3:.2f} ms traced, "
          f"{traced / plain:.1f}x ({hops_per_step:.0f} hops per step; target <= 10x)")

    with trace("sim") as big:
        while len(big.hops) < 10_000:
            step()
    hops = big.hops[:10_000]
    big.hops = hops
    exports = {
        "JSON": lambda: big.to_json(),
        "Chrome trace": lambda: json.dumps(big.to_chrome_trace()),
        "text tree": lambda: big.to_text(),
    }
    for name, export in exports.items():
        print(f"exporting a 10,000-hop trace as {name}: {median_seconds(export):.3f} s (target <= 1 s)")
    commands()
    return 0


COMMANDS = {
    "coverage --device sim": ["coverage", "--device", "sim", "--format", "json"],
    "coverage --device sim --against cuda": ["coverage", "--device", "sim", "--against", "cuda", "--format", "json"],
    "next-kernels --device sim (the shipped demand)": ["next-kernels", "--device", "sim", "--format", "json"],
}


def commands(rounds: int = 3) -> None:
    """Each command in a fresh process, the commands taking turns round by round; medians of the wall times."""
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(rounds):
            for name, arguments in COMMANDS.items():
                started = time.perf_counter()
                subprocess.run([sys.executable, "-m", "pu1_explorer", *arguments, "-o", f"{folder}/out"], check=True,
                               capture_output=True)
                times[name].append(time.perf_counter() - started)
    medians = {name: statistics.median(values) for name, values in times.items()}
    plain = medians["coverage --device sim"]
    for name, value in medians.items():
        print(f"pu1-explorer {name}: {value:.2f} s in a fresh process ({value / plain:.2f}x coverage; targets: "
              "--against within 2x coverage, next-kernels <= 10 s)")


if __name__ == "__main__":
    raise SystemExit(main())
