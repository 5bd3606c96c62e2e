"""torch.compile on sim against torch.compile on the CPU: one compiled training step of small models.

Each step is forward, cross-entropy, backward and an SGD update (the optimizer eager, as most
users run it), with the model compiled by the default backend, inductor. Everything compiles first;
the four runs (compiled and eager, on sim and on the CPU) are timed as users run them, by timing.py's
`alternating`: each alone in a fresh process with PyTorch's defaults, compiling in its warm-up, the
processes taking turns; the median of the round medians with their spread. The ratio is sim over CPU
(target <= 1.1x). Run: `make benchmark`.
"""
from __future__ import annotations

import torch

from timing import METHOD, Work, alternating


def main() -> int:
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {METHOD}\n")
    print("| model | compiled, sim (ms) | compiled, CPU (ms) | ratio (target <= 1.1x) | eager, sim (ms) | eager, CPU (ms) "
          "| eager ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, label in (("mlp", "small MLP"), ("cnn", "small CNN"), ("transformer", "transformer encoder layer")):
        timings = alternating({
            f"{device} {'compiled' if compiled else 'eager'}":
                (device, Work("backend_speed", "training_step", {"name": name, "compiled": compiled}))
            for device in ("sim", "cpu") for compiled in (True, False)})
        print(f"| {label} | {timings['sim compiled'].milliseconds()} | {timings['cpu compiled'].milliseconds()} "
              f"| {timings['sim compiled'].ratio_to(timings['cpu compiled']):.2f}x "
              f"| {timings['sim eager'].milliseconds()} | {timings['cpu eager'].milliseconds()} "
              f"| {timings['sim eager'].ratio_to(timings['cpu eager']):.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
