"""Step 10, serialization: `torch.save`/`torch.load`, `map_location`, pickling and deepcopy.

torch.save moves each storage to the CPU (`storage.cpu()`, through the `_copy_from`
kernel) and tags it with its device; torch.load rebuilds it with `storage.sim(index)`.
That method, `is_sim` and `storage.sim()` are what this step generates for storages.
"""
from __future__ import annotations

import torch


def install() -> None:
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=False, for_module=False, for_packed_sequence=False, for_storage=True
    )
