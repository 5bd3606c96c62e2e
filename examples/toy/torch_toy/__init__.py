"""The "toy" PrivateUse1 backend: import it explicitly (it has no autoload entry point)."""
from __future__ import annotations

import types

import torch

from torch_toy import _C


def is_available() -> bool:
    """Whether toy devices exist (always: toy simulates two)."""
    return _C.device_count() > 0


def device_count() -> int:
    """The number of toy devices."""
    return _C.device_count()


def current_device() -> int:
    """The index of this thread's current toy device."""
    return _C.current_device()


def set_device(device: int | str | torch.device) -> None:
    """Make a toy device current for this thread ("toy" without an index means toy:0)."""
    _C.set_device(device if isinstance(device, int) else torch.device(device).index or 0)


def _is_in_bad_fork() -> bool:
    """toy has no state that a fork could break."""
    return False


def manual_seed_all(seed: int) -> None:
    """toy has no generator: random operators run on the CPU through the fallback, so there is nothing to seed."""


def _device_module() -> types.ModuleType:
    """The small `torch.toy` module: fewer functions than torch.sim on purpose."""
    module = types.ModuleType("torch.toy", "The toy test backend's device module.")
    for function in (is_available, device_count, current_device, set_device, _is_in_bad_fork, manual_seed_all):
        setattr(module, function.__name__, function)
    return module


torch.utils.rename_privateuse1_backend("toy")
torch._register_device_module("toy", _device_module())
torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
