"""Step 1, device module: rename PrivateUse1 to `sim` and register `torch.sim`.

`torch.sim` is this module. It starts with the device basics; every later step
adds its own functions to it (memory statistics, streams, seeds, autocast), the
way a vendor's `torch.<device>` grows during a bring-up.

PyTorch calls `torch.sim._lazy_init()` once, before the first tensor reaches the device. After it,
a process that forks gives its child a device it must not use: a real driver's context does not
survive fork(), so CUDA marks such a child "in a bad fork" and refuses to start there, and so does
sim (`torch.sim._is_in_bad_fork()`), although its host memory would survive. Code that works on sim
then also works on a real device: workers that use the device are started with 'spawn'.
"""
from __future__ import annotations

import os
import sys
import sysconfig
from typing import Any, Callable, Sequence

import torch

import torch_sim

NAME = "sim"


def _runtime():
    from torch_sim.runtime import load_runtime

    return load_runtime()


def is_available() -> bool:
    """True once the runtime (the hooks step) is installed and there is at least one device."""
    return "hooks" in torch_sim.installed_steps() and _runtime().device_count() > 0


def is_initialized() -> bool:
    """True while the device can be used in this process: available, and not inherited through a fork."""
    return is_available() and not _is_in_bad_fork()


def _is_in_bad_fork() -> bool:
    """True in a child forked after the device started in its parent: the child must not use the device."""
    return "hooks" in torch_sim.installed_steps() and _runtime().in_bad_fork()


def _lazy_init() -> None:
    """PyTorch calls this before it first touches the device, and counts the device as started once it returns.

    Like CUDA's, it fails while the runtime cannot start (before the hooks step): a device counted as started
    without its hooks and host allocator crashes torch.accelerator.empty_host_cache(). Like CUDA's, it also fails
    in a child forked after the device started: a real device's driver context does not survive fork(), so the
    child must start the device afresh (multiprocessing's 'spawn'). sim's memory is host memory and would survive,
    but sim refuses as a real device must, so that code which runs on sim also runs on one.
    """
    torch_sim.require("hooks")
    if _is_in_bad_fork():
        raise RuntimeError(
            "Cannot re-initialize sim in forked subprocess. To use sim with multiprocessing, you must use the "
            "'spawn' start method (the parent had already started sim when it forked)"
        )
    _runtime().poison_forks()


def device_count() -> int:
    """How many sim devices this process has (SIM_DEVICE_COUNT, default 2)."""
    return _runtime().device_count() if "hooks" in torch_sim.installed_steps() else 0


def _device_index(device: Any = None, optional: bool = True) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        index = device
    else:
        device = torch.device(device)
        if device.type != NAME:
            raise ValueError(f"expected a sim device, got {device}")
        index = current_device() if device.index is None else device.index
    if not 0 <= index < device_count():
        raise RuntimeError(  # PyTorch's own wording first, then sim's advice
            f"The device index is out of range. It must be in [0, {device_count()}), but got {index}. "
            f"sim:{index} does not exist: this process has {device_count()} sim device(s). "
            "Use a smaller index or set SIM_DEVICE_COUNT before the backend starts."
        )
    return index


def init() -> None:
    """Initialize sim, like torch.cuda.init(): the runtime is ready once the hooks step is installed."""
    torch_sim.require("hooks")
    _lazy_init()


def current_device() -> int:
    torch_sim.require("guard")
    return _runtime().current_device()


def set_device(device: Any) -> None:
    """Make `device` the current sim device of this thread."""
    torch_sim.require("guard")
    _runtime().set_device(_device_index(device))


def synchronize(device: Any = None) -> None:
    """Wait for all work on the device; sim computes synchronously, so this checks the index, and refuses while a
    stream of the device captures a graph (as CUDA does)."""
    _runtime().refuse_synchronize_while_capturing(_device_index(device))


class device:
    """Context manager that makes a sim device current, like torch.cuda.device."""

    def __init__(self, device: Any):
        self.index = -1 if device is None else _device_index(device)
        self.previous = -1

    def __enter__(self) -> None:
        if self.index >= 0:
            self.previous = current_device()
            set_device(self.index)

    def __exit__(self, *exc_info: Any) -> None:
        if self.index >= 0:
            set_device(self.previous)


def get_device_name(device: Any = None) -> str:
    return f"Simulated accelerator {_device_index(device)}"


def _package_folder(module: Any) -> str:
    return os.path.dirname(os.path.abspath(module.__file__)) + os.sep


def start_interface_trace(ignored_paths: Sequence[str] = ()) -> None:
    """Record every call PyTorch makes into sim's interfaces, and operator begin/end, until stop_interface_trace().

    Each call's Python line is the innermost frame outside torch, torch_sim, the standard library and
    `ignored_paths` (folders or files, e.g. a tool's own package). One trace at a time per process.
    """
    ignored = [_package_folder(torch), _package_folder(torch_sim), sysconfig.get_paths()["stdlib"] + os.sep]
    _runtime().start_interface_trace(ignored + [str(path) for path in ignored_paths])


def stop_interface_trace() -> list[dict[str, Any]]:
    """Stop the trace and return its records in order: sequence, kind ("call", "operator_begin",
    "operator_end"), interface, method, arguments, thread (native id), python ("file:line" or "")."""
    return _runtime().stop_interface_trace()


def export(*functions: Callable | type, **named: Any) -> None:
    """Add functions to torch.sim; the later steps call this as they are installed."""
    module = sys.modules[__name__]
    for function in functions:
        setattr(module, function.__name__, function)
    for name, value in named.items():
        setattr(module, name, value)


def install() -> None:
    torch.utils.rename_privateuse1_backend(NAME)
    torch._register_device_module(NAME, sys.modules[__name__])
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=False
    )
