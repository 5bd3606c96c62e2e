"""Allocator statistics of an accelerator over time, read through torch.accelerator (any backend)."""
from __future__ import annotations

import torch


def sample_memory(step: int) -> list[dict]:
    """One sample per device: allocated, reserved and peak bytes, tagged with `step`."""
    samples = []
    if not torch.accelerator.is_available():
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
