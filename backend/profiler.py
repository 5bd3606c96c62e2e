"""Step 12, profiler: sim's kernels in torch.profiler, its tables and its Chrome traces.

torch.profiler times the host side of every operator by itself; for the device side it
needs the backend (backend/csrc/profiler.cpp). sim registers an activity profiler with
kineto: while `profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1])`
runs, every operator that computes on sim records one kernel ("sim::mm" for aten::mm)
with its device, stream and times, linked to the operator that launched it. That gives
key_averages() its "SIM" time columns and the Chrome trace a track for each sim device.
For the legacy profiler (`torch.autograd.profiler.profile(use_device="sim",
use_kineto=False)`) sim registers profiler stubs that time operators with device events.
"""
from __future__ import annotations

from torch_sim.runtime import load_runtime


def install() -> None:
    load_runtime().install_profiler()
