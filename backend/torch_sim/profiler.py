"""Step 12, profiler: sim's kernels in torch.profiler, its tables and its Chrome traces.

torch.profiler times the host side of every operator by itself; for the device side it
needs the backend (backend/torch_sim/csrc/profiler.cpp). sim registers an activity profiler with
kineto: while `profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1])`
runs, every operator that computes on sim records one kernel ("sim::mm" for aten::mm)
with its device, stream and times, linked to the operator that launched it. That gives
key_averages() its "SIM" time columns and the Chrome trace a track for each sim device.
For the legacy profiler (`torch.autograd.profiler.profile(use_device="sim",
use_kineto=False)`) sim registers profiler stubs that time operators with device events.

kineto also prints two log lines to stderr at every profile ("USDT: ... profiler_start" and
"profiler_stop"), whatever the devices. sim keeps it quiet unless the user has set kineto's own
switch, KINETO_LOG_LEVEL (0 shows everything; 4, kineto's errors and those two lines).
"""
from __future__ import annotations

import os

from torch_sim.runtime import load_runtime

# kineto ranks its USDT markers above ERROR, so only a level above every severity hides them. kineto reads the
# variable once, when it initialises at a process's first profile: sim sets it when it loads, before that.
KINETO_SILENT = "6"


def install() -> None:
    os.environ.setdefault("KINETO_LOG_LEVEL", KINETO_SILENT)
    load_runtime().install_profiler()
