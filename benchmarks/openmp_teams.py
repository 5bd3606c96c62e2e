"""What a second OpenMP team costs every device in the process, and whether sim leaves one behind.

PyTorch runs a device's backward pass on autograd's device thread, and sim's kernels run on its driver's executor
thread: either thread, running host kernels that parallelise, starts an OpenMP team of its own beside the main
thread's. While two teams live on a 2-core machine, libgomp manages more threads than there are cores and stops
letting its workers spin between parallel regions, so every parallel region of every device pays a wake-up.

The first table is a study of that setting with no sim at all: the CPU's LSTM step, first alone, then while a plain
thread owns a second team. A team, once started, stays while its thread lives, so the two states cannot take turns:
each of ROUNDS fresh processes times the first state, then the second (the median of CALLS calls each, after WARM_UP
calls); a figure is the median over the processes, with their spread.

The second table is the goal users care about: the CPU's LSTM step in a process where sim trained an LSTM first
(its device then idle for IDLE_SECONDS: sim's executor, which owns its team, ends once the device has been idle for
20 ms) against the same step in a process where sim never ran, timed by timing.py's `alternating` (each in a fresh
process of its own, taking turns). sim's own figures, measured as users run it, are backend_speed.py's.
Run: `make benchmark` (or `python benchmarks/openmp_teams.py` in the project's virtualenv).
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
import time
from typing import Callable

from timing import METHOD, Work, alternating, median_seconds

ROUNDS, CALLS, WARM_UP = 5, 30, 5
IDLE_SECONDS = 0.1


def lstm_training_step(device: str) -> Callable[[], object]:
    """One AdamW step of a 2-layer nn.LSTM (batch 8, 20 steps, width 32 -> 64)."""
    import torch

    torch.manual_seed(0)
    layers = torch.nn.LSTM(32, 64, num_layers=2).to(device)
    optimizer = torch.optim.AdamW(layers.parameters())
    inputs = torch.randn(20, 8, 32).to(device)

    def run() -> object:
        optimizer.zero_grad()
        outputs, _ = layers(inputs)
        outputs.sum().backward()
        optimizer.step()
        return outputs

    return run


def median_milliseconds(work: Callable[[], object]) -> float:
    for _ in range(WARM_UP):
        work()
    return median_seconds(work, repeats=CALLS) * 1e3


def start_a_second_team() -> None:
    """A thread that runs one parallel host kernel (which starts its OpenMP team) and then stays alive."""
    import torch

    started = threading.Event()

    def own_a_team() -> None:
        torch.randn(4_000_000).exp().sum()
        started.set()
        threading.Event().wait()

    threading.Thread(target=own_a_team, daemon=True).start()
    started.wait()


def train_on_sim() -> None:
    """Train sim's LSTM for as many steps as a measurement takes, wait for its device, and leave it idle a moment."""
    import torch

    step = lstm_training_step("sim")
    for _ in range(WARM_UP + CALLS):
        step()
    torch.accelerator.synchronize()
    time.sleep(IDLE_SECONDS)


def measure() -> tuple[float, float]:
    """The CPU's step alone, then while a second thread owns a team, in this process: milliseconds."""
    step = lstm_training_step("cpu")
    alone = median_milliseconds(step)
    start_a_second_team()
    return alone, median_milliseconds(step)


def cpu_step_after(device: str, sim_trained_first: bool) -> Callable[[], object]:
    """The CPU's LSTM step (`device` is the CPU), built in a process where sim trained first, or never ran."""
    if sim_trained_first:
        train_on_sim()
    return lstm_training_step(device)


def spread(values: list[float]) -> str:
    """`2.39 (2.22-2.40)`: the median over the processes and their lowest and highest."""
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> int:
    print("The cost of a second team, with no sim in the process (a study of one setting):")
    print(f"{ROUNDS} fresh processes; in each, the median of {CALLS} calls per state after {WARM_UP} "
          "warm-up calls; a figure is the median over the processes (lowest-highest)\n")
    print("| workload | first state | ms | second state | ms | second / first |")
    print("| --- | --- | ---: | --- | ---: | ---: |")
    pairs = []
    for _ in range(ROUNDS):
        done = subprocess.run([sys.executable, __file__, "--measure"], capture_output=True, text=True, check=True)
        pairs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    first, second = [p[0] for p in pairs], [p[1] for p in pairs]
    print(f"| the CPU's LSTM step | one OpenMP team | {spread(first)} | while a second thread owns a team | "
          f"{spread(second)} | {statistics.median(second) / statistics.median(first):.2f}x |", flush=True)

    timings = alternating({name: ("cpu", Work("openmp_teams", "cpu_step_after", {"sim_trained_first": trained}))
                           for name, trained in (("without sim", False), ("after sim", True))})
    print(f"\nThe CPU's step after sim trained in the process, against a process where sim never ran; {METHOD}\n")
    print("| workload | sim never ran (ms) | sim trained first (ms) | ratio | target |")
    print("| --- | ---: | ---: | ---: | --- |")
    print(f"| the CPU's 2-layer LSTM training step | {timings['without sim'].milliseconds()} | "
          f"{timings['after sim'].milliseconds()} | {timings['after sim'].ratio_to(timings['without sim']):.2f}x | "
          "<= 1.05x |")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--measure"]:
        print(json.dumps(measure()))
        raise SystemExit(0)
    raise SystemExit(main())
