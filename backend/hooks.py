"""Step 2, hooks: load the C++ runtime core and register the PrivateUse1 hooks.

The hooks tell PyTorch that the device exists, how many there are, where the
default generators and the pinned-memory allocator live.
"""
from __future__ import annotations

from torch_sim import config
from torch_sim.runtime import load_runtime


def install() -> None:
    runtime = load_runtime()
    runtime.install_runtime(config.device_count(), config.memory_capacity())
    runtime.install_hooks()
