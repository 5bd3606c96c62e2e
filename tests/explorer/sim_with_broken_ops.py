"""sim with bugs, for the scorecard's tests: imported after torch, it breaks a few things on the device only.

`mul` returns values 0.5 off (the differential sweep finds a mismatch), `flip` raises (an error), `tril`
accepts the 1-D input the CPU refuses (a bad input that passes), and `torch.accelerator.device_index`
switches nothing (the guard probe fails). OpInfos made after this import call the broken functions.
"""
from __future__ import annotations

import contextlib

import torch

_mul, _flip, _tril = torch.mul, torch.flip, torch.tril


def _on_device(tensor: object) -> bool:
    return isinstance(tensor, torch.Tensor) and tensor.device.type == "sim"


def mul(input, other, *args, **kwargs):
    result = _mul(input, other, *args, **kwargs)
    return result + 0.5 if _on_device(result) and result.is_floating_point() else result


def flip(input, *args, **kwargs):
    if _on_device(input):
        raise RuntimeError("flip: no kernel for this device (a deliberate gap)")
    return _flip(input, *args, **kwargs)


def tril(input, *args, **kwargs):
    if _on_device(input) and input.dim() < 2:
        return input.clone()
    return _tril(input, *args, **kwargs)


@contextlib.contextmanager
def device_index(index):
    yield


torch.mul, torch.flip, torch.tril = mul, flip, tril
torch.accelerator.device_index = device_index
