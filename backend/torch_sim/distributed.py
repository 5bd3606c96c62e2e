"""Step 14, distributed: a c10d backend, `simccl`, so torch.distributed works on sim tensors.

torch.distributed runs each collective on the backend registered for the tensors' device.
sim registers `simccl` for the device "sim" (backend/torch_sim/csrc/distributed.cpp), so
`init_process_group()` with no backend argument uses it for sim tensors and Gloo for CPU ones.
simccl runs the host's Gloo backend: with unified memory on CPU views of the device memory, so
collectives, DDP and FSDP move no staging copies; with SIM_MEMORY=discrete on host copies, staged
before the collective and copied back after it. A tensor on another device gets one clear
error before anything is sent. sim also gives DDP a timer for its devices, so DDP's runtime
statistics cover sim as they cover CPU and CUDA.
"""
from __future__ import annotations

from datetime import timedelta

import torch

from torch_sim.runtime import load_runtime

BACKEND_NAME = "simccl"


def create_process_group(store, rank: int, size: int, timeout: timedelta):
    """c10d's factory for simccl: one Gloo backend over the same store, seen through sim's checks and views."""
    from torch.distributed import ProcessGroupGloo

    host = ProcessGroupGloo(store, rank, size, timeout)
    return load_runtime().create_process_group(host, rank, size)


def install() -> None:
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        raise RuntimeError("sim: the distributed step needs a torch built with distributed and Gloo support "
                           "(torch.distributed.is_gloo_available() is False); install a torch wheel that has them")
    load_runtime().install_distributed()
    backend = torch.distributed.Backend
    if BACKEND_NAME not in backend.backend_list:
        backend.register_backend(BACKEND_NAME, create_process_group, devices=["sim"])
