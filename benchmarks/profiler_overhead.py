"""What profiling costs on sim: 100 forward passes of small models, profiled and not, in the same run.

Three runs on sim: not profiled, host operators profiled (`activities=[CPU]`), and host and
device profiled (`activities=[CPU, PrivateUse1]`, sim's kernels recorded); "device part alone"
is the last over the second. The CPU runs beside them show what the host profiler costs by itself.
The five runs of a model are timed by the one method of timing.py (`interleaved`: warmed up, which
also starts kineto for the first profile, then rounds taking turns; the median of the round medians).
Run: `make benchmark`.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile

from pu1_explorer import workloads
from timing import describe_interleaved, interleaved

ROUNDS = 5
PASSES = 100


def forward_passes(name: str, device: str) -> Callable[[], object]:
    workload = workloads.WORKLOADS[name]
    torch.manual_seed(0)
    model = workload.make_model().to(device).eval()
    inputs, _ = workload.make_batch(torch.Generator().manual_seed(0))
    inputs = inputs.to(device)

    def run() -> object:
        with torch.no_grad():
            for _ in range(PASSES):
                output = model(inputs)
        return output

    return run


def profiled(work: Callable[[], object], activities: list[ProfilerActivity]) -> Callable[[], object]:
    def run() -> object:
        with profile(activities=activities) as prof:
            work()
        return prof

    return run


def main() -> int:
    torch.sim.set_fallback_policy("silent")
    host, device = [ProfilerActivity.CPU], [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {PASSES} forward passes a call; "
          f"{describe_interleaved(ROUNDS, 1, 1)}\n")
    print("| model | sim | sim, host profiled | sim, host and device profiled | ratio (target <= 1.5x) "
          "| device part alone | CPU | CPU, host profiled | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, label in (("mlp", "small MLP"), ("cnn", "small CNN"), ("transformer", "transformer encoder layer")):
        sim_work, cpu_work = forward_passes(name, "sim"), forward_passes(name, "cpu")
        timings = interleaved({"sim": sim_work, "sim host": profiled(sim_work, host),
                               "sim device": profiled(sim_work, device), "cpu": cpu_work,
                               "cpu host": profiled(cpu_work, host)}, rounds=ROUNDS, calls=1, warm_up_calls=1)
        sim, sim_host, sim_device, cpu, cpu_host = (timings[run].median for run in
                                                    ("sim", "sim host", "sim device", "cpu", "cpu host"))
        print(f"| {label} | {sim * 1e3:.1f} ms | {sim_host * 1e3:.1f} ms | {sim_device * 1e3:.1f} ms | "
              f"{sim_device / sim:.2f}x | {sim_device / sim_host:.2f}x | {cpu * 1e3:.1f} ms | {cpu_host * 1e3:.1f} ms | "
              f"{cpu_host / cpu:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
