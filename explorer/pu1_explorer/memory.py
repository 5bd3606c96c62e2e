"""Allocator statistics of an accelerator over time, read through torch.accelerator (any backend).

A backend whose allocator keeps no statistics (not a `c10::DeviceAllocator`) makes
`torch.accelerator.memory_stats` raise; sampling then returns nothing and
`statistics_unavailable()` says why, instead of failing the workload it watches.
"""
from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=8)
def _unavailable(accelerator: str) -> str | None:
    try:
        torch.accelerator.memory_stats(0)
    except Exception as error:  # "not a DeviceAllocator", or no memory_stats at all
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return f"{accelerator} keeps no allocator statistics that torch.accelerator can read ({reason})"
    return None


def statistics_unavailable() -> str | None:
    """Why this process's accelerator has no memory statistics to sample, or None when it has them."""
    if not torch.accelerator.is_available():
        return "no accelerator is available in this process"
    return _unavailable(str(torch.accelerator.current_accelerator()))


def sample_memory(step: int) -> list[dict]:
    """One sample per device: allocated, reserved and peak bytes, tagged with `step` (none without statistics)."""
    samples = []
    if statistics_unavailable():
        return samples
    for device in range(torch.accelerator.device_count()):
        stats = torch.accelerator.memory_stats(device)
        samples.append({
            "step": step, "device": device,
            "allocated": int(stats.get("allocated_bytes.all.current", 0)),
            "reserved": int(stats.get("reserved_bytes.all.current", 0)),
            "peak": int(stats.get("allocated_bytes.all.peak", 0)),
        })
    return samples


def capacities() -> dict[int, int]:
    """Total memory per device, where the backend reports it (torch.accelerator.get_memory_info)."""
    result = {}
    if not torch.accelerator.is_available():
        return result
    for device in range(torch.accelerator.device_count()):
        try:
            result[device] = int(torch.accelerator.get_memory_info(device)[1])
        except Exception:  # a backend without getMemoryInfo: no capacity line
            pass
    return result
