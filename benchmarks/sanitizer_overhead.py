"""What the stream sanitizer costs: the small-MLP training step on sim with the sanitizer on and off.

"on" and "off" take turns in one process (timing.py's `interleaved`): each "on" call is a whole sanitized step,
its recording and the analysis when the block ends; "off" runs in the same process once sanitized runs ended,
when sim's device-trace registries hold no callback. Whether a sanitizer that was on leaves a cost behind is
measured apart, as users run sim (`alternating`): the step in a fresh process that never used the sanitizer
against the step in a fresh process that ran one sanitized step first. Run: `make benchmark` (targets: on <= 5x
off; off after a sanitized run at the speed of never on).
"""
from __future__ import annotations

from typing import Callable

import torch

from pu1_explorer import workloads
from pu1_explorer.sanitizer import stream_sanitizer
from timing import METHOD, Work, alternating, describe_interleaved, interleaved

ROUNDS = 7
CALLS = 20


def training_step(device: str) -> Callable[[], object]:
    """One SGD step of the reference small MLP on a fixed batch."""
    workload = workloads.WORKLOADS["mlp"]
    torch.manual_seed(0)
    model = workload.make_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs, targets = workload.make_batch(torch.Generator().manual_seed(0))
    inputs, targets = inputs.to(device), targets.to(device)

    def run() -> object:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(inputs), targets).backward()
        optimizer.step()
        return torch.accelerator.synchronize()

    return run


def sanitized(work: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        with stream_sanitizer() as report:
            work()
        assert report.clean, report.to_text()
        return report

    return run


def training_step_after_a_sanitized_one(device: str) -> Callable[[], object]:
    """The training step, in a process that has run it once under the sanitizer."""
    step = training_step(device)
    sanitized(step)()
    return step


def main() -> int:
    step = training_step("sim")
    timings = interleaved({"off": step, "on": sanitized(step)}, rounds=ROUNDS, calls=CALLS)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {describe_interleaved(ROUNDS, CALLS)}\n")
    print("| small MLP training step on sim | off | on | ratio (target <= 5x) |")
    print("|---|---:|---:|---:|")
    print(f"| one process | {timings['off'].milliseconds()} | {timings['on'].milliseconds()} "
          f"| {timings['on'].ratio_to(timings['off']):.2f}x |\n", flush=True)
    processes = alternating({"never": ("sim", Work("sanitizer_overhead", "training_step", {})),
                             "after": ("sim", Work("sanitizer_overhead", "training_step_after_a_sanitized_one", {}))})
    print(f"{METHOD}\n")
    print("| small MLP training step on sim, sanitizer off | never on in the process | after a sanitized step | "
          "ratio |")
    print("|---|---:|---:|---:|")
    print(f"| fresh processes | {processes['never'].milliseconds()} | {processes['after'].milliseconds()} "
          f"| {processes['after'].ratio_to(processes['never']):.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
