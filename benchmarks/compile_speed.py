"""torch.compile on sim against torch.compile on the CPU: one compiled training step of small models.

Each step is forward, cross-entropy, backward and an SGD update (the optimizer eager, as most
users run it), with the model compiled by the default backend, inductor. Everything compiles and
warms up before timing. The four runs (compiled and eager, on sim and on the CPU) then take turns,
ROUNDS times STEPS steps each, so that drift in the machine's speed hits all four alike; a figure
is the median over the rounds of each round's median step. The ratio is sim over CPU (target
<= 1.2x). Run: `make benchmark`.
"""
from __future__ import annotations

import statistics

import torch

from backend_speed import training_step
from timing import step_seconds

ROUNDS = 5
STEPS = 60


def main() -> int:
    torch.sim.set_fallback_policy("silent")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {ROUNDS} rounds of {STEPS} training steps\n")
    print("| model | compiled, sim (ms) | compiled, CPU (ms) | ratio (target <= 1.2x) | eager, sim (ms) | eager, CPU (ms) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, label in (("mlp", "small MLP"), ("transformer", "transformer encoder layer")):
        runs = {(device, compiled): training_step(name, device, compiled)
                for device in ("sim", "cpu") for compiled in (True, False)}
        rounds: dict[tuple[str, bool], list[float]] = {run: [] for run in runs}
        for _ in range(ROUNDS):
            for run, step in runs.items():
                rounds[run].append(step_seconds(step, STEPS)[0])
        timings = {run: statistics.median(medians) * 1e3 for run, medians in rounds.items()}
        ratio = timings["sim", True] / timings["cpu", True]
        print(f"| {label} | {timings['sim', True]:.3f} | {timings['cpu', True]:.3f} | {ratio:.2f}x "
              f"| {timings['sim', False]:.3f} | {timings['cpu', False]:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
