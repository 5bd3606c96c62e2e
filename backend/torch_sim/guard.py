"""Step 3, device guard: `sim:1` is really device 1.

The C++ DeviceGuardImplInterface keeps the current device per thread, so that
`torch.sim.set_device`, `with torch.sim.device(1)` and kernels agree on it.
"""
from __future__ import annotations

from torch_sim.runtime import load_runtime


def install() -> None:
    load_runtime().install_guard()
