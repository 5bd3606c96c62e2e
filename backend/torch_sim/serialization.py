"""Step 10, serialization: `torch.save`/`torch.load`, `map_location`, pickling and deepcopy.

Loading a plain tensor needs nothing of this step. torch.save copies each storage to the
CPU (`storage.cpu()`, through the `_copy_from` kernel of step 5) and tags it with its
device, "sim:1"; torch.load checks the tag against `torch.sim` (`is_available()`,
`device_count()`) and moves the storage back with `storage.to(device=...)`, an allocation
and the same copy kernel, under `torch.sim.device(...)`. So steps 1 to 5 are what loading
needs; `map_location` only changes the tag it moves to.

What this step adds is what travels beside the data. A tensor's backend metadata, the
facts a device keeps beside sizes and strides (a tiling, a private format), goes into the
file only through two functions the backend registers in C++ for PrivateUse1
(backend/torch_sim/csrc/serialization.cpp); `torch._utils.get_tensor_metadata`/`set_tensor_metadata`
and torch.save/torch.load call them. Without them PyTorch raises nothing: it drops the
metadata silently, which is why the check compares the flags after a save and a load.

The step also generates the storage methods `storage.sim()` and `is_sim` (torch.load does
not call them; code written for `storage.cuda()` does).
"""
from __future__ import annotations

import torch

from torch_sim.runtime import load_runtime


def install() -> None:
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=False, for_module=False, for_packed_sequence=False, for_storage=True
    )
    load_runtime().install_tensor_metadata()
