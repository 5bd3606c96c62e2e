"""Step 4, allocator: device memory with per-device statistics and a simulated capacity.

The C++ allocator is a `c10::DeviceAllocator`, so `torch.accelerator.memory_allocated()`
and friends answer for sim too. Its blocks come from sim's driver (`simMalloc`), and are
cached (reserved) after a free until `empty_cache()` or until a new allocation needs the
room. Going past the capacity raises `torch.OutOfMemoryError` naming the device and what is free.
"""
from __future__ import annotations

from typing import Any

from torch_sim import config
from torch_sim.device_module import _device_index, export
from torch_sim.runtime import load_runtime


def memory_stats(device: Any = None) -> dict[str, int]:
    """The allocator's counters for one device, named as torch.cuda.memory_stats names them."""
    return dict(load_runtime().memory_stats(_device_index(device)))


def memory_allocated(device: Any = None) -> int:
    """Bytes held by live tensors on the device."""
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device: Any = None) -> int:
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device: Any = None) -> int:
    """Bytes the allocator holds: live tensors plus its cache of freed blocks."""
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device: Any = None) -> int:
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device: Any = None) -> None:
    load_runtime().reset_peak_memory_stats(_device_index(device))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    load_runtime().reset_accumulated_memory_stats(_device_index(device))


def empty_cache() -> None:
    """Give the cached free blocks of every device back to the host."""
    load_runtime().empty_cache()


def get_memory_capacity(device: Any = None) -> int:
    return memory_stats(device)["capacity_bytes"]


def set_memory_capacity(capacity: int | str, device: Any = None) -> None:
    """Set the simulated memory size of one device (bytes, or a string such as '512M')."""
    size = config.parse_bytes(capacity, "capacity") if isinstance(capacity, str) else int(capacity)
    if size <= 0:
        raise ValueError(f"capacity must be a positive number of bytes, got {capacity!r}")
    load_runtime().set_memory_capacity(_device_index(device), size)


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of the device, as torch.cuda.mem_get_info returns them."""
    stats = memory_stats(device)
    return stats["capacity_bytes"] - stats["reserved_bytes.all.current"], stats["capacity_bytes"]


def memory_mode() -> str:
    """'unified' (the default): host code can read and write sim's device memory, as on an integrated accelerator;
    'discrete' (SIM_MEMORY=discrete): only the driver's copies and sim's kernels reach it, as on a card."""
    return load_runtime().memory_mode()


def install() -> None:
    load_runtime().install_allocator()
    export(memory_stats, memory_allocated, max_memory_allocated, memory_reserved, max_memory_reserved,
           reset_peak_memory_stats, reset_accumulated_memory_stats, empty_cache, get_memory_capacity,
           set_memory_capacity, mem_get_info, memory_mode)
