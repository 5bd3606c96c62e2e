"""Step 10, serialization: `torch.save`/`torch.load`, `map_location`, pickling and deepcopy.

torch.save moves each storage to the CPU (`storage.cpu()`, through the `_copy_from`
kernel) and tags it with its device; torch.load rebuilds it with `storage.sim(index)`.
That method, `is_sim` and `storage.sim()` are what this step generates for storages.
A tensor's backend metadata, the facts a device keeps beside sizes and strides, goes
along: `torch._utils.set_tensor_metadata`/`get_tensor_metadata` and torch.save/load
reach it through two functions sim registers in C++ (backend/csrc/serialization.cpp).
"""
from __future__ import annotations

import torch

from torch_sim.runtime import load_runtime


def install() -> None:
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=False, for_module=False, for_packed_sequence=False, for_storage=True
    )
    load_runtime().install_tensor_metadata()
