"""The environment variables that configure the simulated device, parsed in one place."""
from __future__ import annotations

import os

DEFAULT_DEVICE_COUNT = 2
DEFAULT_MEMORY_CAPACITY = 8 << 30
FALLBACK_POLICIES = ("warn", "silent", "error")
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
          "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}


def parse_bytes(text: str, name: str = "memory size") -> int:
    """'512M', '2GiB' or '1048576' to a number of bytes; a clear ValueError otherwise."""
    cleaned = str(text).strip().upper()
    number = cleaned.rstrip("KMGIB")
    unit = cleaned[len(number):]
    try:
        value = int(float(number) * _UNITS[unit])
    except (ValueError, KeyError):
        raise ValueError(f"{name} must be a number of bytes such as 1073741824, 512M or 2G, got {text!r}") from None
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {text!r}")
    return value


def device_count() -> int:
    raw = os.environ.get("SIM_DEVICE_COUNT", str(DEFAULT_DEVICE_COUNT))
    try:
        count = int(raw)
    except ValueError:
        raise ValueError(f"SIM_DEVICE_COUNT must be a whole number from 1 to 64, got {raw!r}") from None
    if not 1 <= count <= 64:
        raise ValueError(f"SIM_DEVICE_COUNT must be a whole number from 1 to 64, got {raw!r}")
    return count


def memory_capacity() -> int:
    raw = os.environ.get("SIM_MEMORY_CAPACITY")
    return DEFAULT_MEMORY_CAPACITY if raw is None else parse_bytes(raw, "SIM_MEMORY_CAPACITY")


def fallback_policy() -> str:
    raw = os.environ.get("SIM_FALLBACK", "warn").strip().lower()
    if raw not in FALLBACK_POLICIES:
        raise ValueError(f"SIM_FALLBACK must be one of {', '.join(FALLBACK_POLICIES)}, got {raw!r}")
    return raw
