"""Which devices this process knows, and loading a backend that does not autoload.

Nothing here assumes the PrivateUse1 backend is sim: its name is whatever the
loaded backend registered with `torch.utils.rename_privateuse1_backend`.
"""
from __future__ import annotations

import importlib
import runpy
from pathlib import Path
from typing import Sequence

import torch

UNRENAMED = "privateuseone"


class UnknownDeviceError(ValueError):
    """A device name that is neither cpu, meta nor the loaded PrivateUse1 backend."""


def privateuse1_backend() -> str | None:
    """The name the loaded PrivateUse1 backend registered ('sim', 'toy', ...), or None if no backend renamed it."""
    name = torch.device("privateuseone").type
    return None if name == UNRENAMED else name


def known_devices() -> list[str]:
    """The device types the explorer can work on in this process: the PrivateUse1 backend first, then cpu and meta."""
    backend = privateuse1_backend()
    return ([backend] if backend else []) + ["cpu", "meta"]


def _no_backend_hint() -> str:
    backend = privateuse1_backend()
    if backend:
        return f"this process knows cpu, meta and the PrivateUse1 backend {backend!r}"
    return ("this process knows cpu and meta; no PrivateUse1 backend is loaded (one that does not autoload "
            "must be imported first: `--import MODULE` on the command line, `import MODULE` in Python)")


def default_device() -> str:
    """The loaded PrivateUse1 backend's name; raises UnknownDeviceError in one line when none is loaded."""
    backend = privateuse1_backend()
    if backend is None:
        raise UnknownDeviceError(_no_backend_hint())
    return backend


def check_device(device: str | torch.device | None) -> str:
    """The device as a string ('sim:1', 'cpu'), checked against the devices this process knows; None -> the backend."""
    if device is None:
        return default_device()
    text = str(device)
    try:
        kind = torch.device(text).type
    except RuntimeError:
        kind = None
    if kind not in known_devices():
        raise UnknownDeviceError(f"unknown device {text!r}: {_no_backend_hint()}")
    return text


def backend_key(device: str | torch.device | None) -> str:
    """The dispatch key of a device's dense tensors: 'CPU', 'Meta' or 'PrivateUse1'."""
    kind = torch.device(check_device(device)).type
    return {"cpu": "CPU", "meta": "Meta"}.get(kind, "PrivateUse1")


def import_backends(modules: Sequence[str]) -> None:
    """Import each module name or run each .py file, in order (for backends that do not autoload).

    Every name is checked before any is imported, so a typo costs nothing.
    """
    for module in modules:
        if module.endswith(".py"):
            if not Path(module).is_file():
                raise FileNotFoundError(f"--import {module}: no such file")
        elif importlib.util.find_spec(module.split(".")[0]) is None:
            raise ModuleNotFoundError(f"--import {module}: no module named {module.split('.')[0]!r} on the path "
                                      "(set PYTHONPATH or install it)")
    for module in modules:
        if module.endswith(".py"):
            runpy.run_path(module, run_name="__pu1_backend__")
        else:
            importlib.import_module(module)
