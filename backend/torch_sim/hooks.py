"""Step 2, hooks: load the C++ runtime core and register the PrivateUse1 hooks.

The hooks tell PyTorch that the device exists, how many there are, where the
default generators and the pinned-memory allocator live. The pinned-memory
allocator is registered as the device's host allocator too, which is what
`torch.accelerator.empty_host_cache()` calls; its statistics are
`torch.sim.host_memory_stats()`, named as torch.cuda names them.

Operators call the hooks too, not only `torch.accelerator` and lazy initialisation:
a random kernel given no generator fetches the device's default one through
`getDefaultGenerator()`, and two of PyTorch's own kernels need the pinned memory:
`aten::_pin_memory` (what `tensor.pin_memory()` dispatches) asks
`at::globalContext().getPinnedMemoryAllocator()`, which ends in the hooks'
`getPinnedMemoryAllocator()`, and `aten::is_pinned` asks `isPinnedPtr()` the same way
(ATen/Context.h). Both kernels are PyTorch's own, registered for
CompositeExplicitAutograd and run on the CPU tensor: the device owes no kernel for them,
only the two hook methods.
"""
from __future__ import annotations

from torch_sim import config
from torch_sim.device_module import export
from torch_sim.runtime import load_runtime


def host_memory_stats() -> dict[str, int]:
    """Counters of the pinned (host) memory allocator: blocks held (active + cached) and in use, in blocks and bytes."""
    return dict(load_runtime().host_memory_stats())


def reset_peak_host_memory_stats() -> None:
    """Make the peaks of host_memory_stats() the current values."""
    load_runtime().reset_peak_host_memory_stats()


def reset_accumulated_host_memory_stats() -> None:
    """Zero the historical totals ('allocated', 'freed', num_host_alloc/free) of host_memory_stats()."""
    load_runtime().reset_accumulated_host_memory_stats()


def install() -> None:
    runtime = load_runtime()
    runtime.install_runtime(config.device_count(), config.memory_capacity())
    runtime.install_hooks()
    export(host_memory_stats, reset_peak_host_memory_stats, reset_accumulated_host_memory_stats)
