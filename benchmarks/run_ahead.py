"""How far the host runs ahead of sim's device: the time a call takes to return, against the time until the device
has finished the work it queued.

On an asynchronous device a launch returns before its kernel ran, so a call that queues much device work returns
early and the host can prepare the next one while the device computes. Each row builds its work as
backend_speed.py does, in this one process with PyTorch's defaults, then times CALLS calls in ROUNDS rounds: when the
call returned (`issued`) and when `torch.accelerator.synchronize()` returned after it (`finished`). The medians of
the round medians; `ahead` is the share of the call's time during which the host was free while the device worked.
A second table profiles one training step of each model and lists the kernels the host waited for: those that ended
before the operator that launched them returned (the operator's own kernel, in the profiler's link of the two).
Run: `make benchmark` (or `python benchmarks/run_ahead.py` in the project's virtualenv).
"""
from __future__ import annotations

import statistics
import time
from collections import Counter
from typing import Callable

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

import backend_speed
from timing import CALLS, ROUNDS, WARM_UP_CALLS


def issued_and_finished(work: Callable[[], object], calls: int) -> tuple[float, float]:
    """Median seconds from a call's start until it returned, and until the device had finished it."""
    issued, finished = [], []
    for _ in range(calls):
        started = time.perf_counter()
        work()
        issued.append(time.perf_counter() - started)
        torch.accelerator.synchronize()
        finished.append(time.perf_counter() - started)
    return statistics.median(issued), statistics.median(finished)


def kernels_waited_for(step: Callable[[], object]) -> tuple[Counter[str], int]:
    """The kernels of one profiled call of `step` that ended before their operator returned, by name, and how many
    kernels the call launched."""
    step()
    torch.accelerator.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        step()
        torch.accelerator.synchronize()
    kernels = sorted((event for event in prof.events() if event.device_type == DeviceType.PrivateUse1),
                     key=lambda event: event.time_range.start)
    operators = sorted((event for event in prof.events() if event.device_type == DeviceType.CPU and event.kernels),
                       key=lambda event: event.time_range.start)
    waited: Counter[str] = Counter()
    taken: set[int] = set()
    for operator in operators:  # its kernel: the first of that name not yet taken that started after it began
        for linked in operator.kernels:
            kernel = next(event for event in kernels if event.name == linked.name and id(event) not in taken
                          and event.time_range.start >= operator.time_range.start)
            taken.add(id(kernel))
            if kernel.time_range.end <= operator.time_range.end:
                waited[kernel.name] += 1
    return waited, len(kernels)


# The training steps whose kernels the second table lists, each made on sim as backend_speed.py makes it.
PROFILED_STEPS: dict[str, Callable[[], Callable[[], object]]] = {
    "small MLP (SGD)": lambda: backend_speed.training_step("mlp", "sim"),
    "small CNN (SGD)": lambda: backend_speed.training_step("cnn", "sim"),
    "transformer encoder layer (SGD)": lambda: backend_speed.training_step("transformer", "sim"),
    "small-config GPT-2 (AdamW)": lambda: backend_speed.gpt2_training_step("sim"),
    "small-config BERT (AdamW)": lambda: backend_speed.bert_training_step("sim"),
    "small-config ViT (AdamW)": lambda: backend_speed.vit_training_step("sim"),
}


def main() -> int:
    rows = [("1,000 multiplies, 64x64 float32", backend_speed.multiplies("sim", 64, 1000), 5),
            ("100 multiplies, 1024x1024 float32", backend_speed.multiplies("sim", 1024, 100), 5),
            ("100 device-to-device copies, 1024x1024 float32", backend_speed.device_copies("sim"), 5),
            ("100 matrix products, 256x256 float32", backend_speed.matrix_products("sim", 256, 100), 5),
            ("one training step, small MLP (SGD)", backend_speed.training_step("mlp", "sim"), CALLS),
            ("one training step, small CNN (SGD)", backend_speed.training_step("cnn", "sim"), CALLS)]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, sim memory {torch.sim.memory_mode()}; "
          f"one process, {WARM_UP_CALLS} warm-up calls, then {ROUNDS} rounds (5 calls a round for the rows of 100 or "
          f"1,000 operations, {CALLS} for the steps); the median of the round medians\n")
    print("| workload | call returned | device finished | host free while the device worked |")
    print("| --- | ---: | ---: | ---: |")
    for label, work, calls in rows:
        issued_and_finished(work, WARM_UP_CALLS)
        rounds = [issued_and_finished(work, calls) for _ in range(ROUNDS)]
        issued = statistics.median(round_[0] for round_ in rounds)
        finished = statistics.median(round_[1] for round_ in rounds)
        print(f"| {label} | {issued * 1e3:.3f} ms | {finished * 1e3:.3f} ms | {1 - issued / finished:.0%} |")
    print("\n| one training step | kernels | the host waited for | those kernels |")
    print("| --- | ---: | ---: | --- |")
    for label, make_step in PROFILED_STEPS.items():
        waited, launched = kernels_waited_for(make_step())
        names = ", ".join(f"{name.removeprefix('sim::')} ×{count}" for name, count in sorted(waited.items()))
        print(f"| {label} | {launched} | {sum(waited.values())} | {names or 'none'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
