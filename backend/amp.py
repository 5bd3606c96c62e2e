"""Step 9, automatic mixed precision: `torch.autocast("sim", dtype=torch.bfloat16 or torch.float16)`.

Two things are needed: kernels on the AutocastPrivateUse1 key (registered in C++
with PyTorch's KERNEL_PRIVATEUSEONE macro, and a fallthrough for every other
operator), and the autocast functions of the device module.

The cast policy is the one CUDA uses, from PyTorch's shared op lists:
- lower precision (run in the autocast dtype): LOWER_PRECISION_OPERATORS;
- float32 (inputs cast up to float32): FLOAT32_OPERATORS;
- every other operator runs in the dtype of its inputs.
`cast_policy()` reads the registered kernels back from the dispatcher.
"""
from __future__ import annotations

import torch

from torch_sim.device_module import export
from torch_sim.runtime import load_runtime

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

LOWER_PRECISION_OPERATORS = (
    "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "convolution", "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv",
    "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot",
    "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
    "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
)


def get_amp_supported_dtype() -> list[torch.dtype]:
    return list(SUPPORTED_DTYPES)


def is_autocast_enabled() -> bool:
    return torch.is_autocast_enabled("sim")


def set_autocast_enabled(enabled: bool) -> None:
    torch.set_autocast_enabled("sim", enabled)


def get_autocast_dtype() -> torch.dtype:
    return torch.get_autocast_dtype("sim")


def set_autocast_dtype(dtype: torch.dtype) -> None:
    if dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"sim autocast supports {', '.join(map(str, SUPPORTED_DTYPES))}, got {dtype}")
    torch.set_autocast_dtype("sim", dtype)


def cast_policy() -> dict[str, str]:
    """Operator overload -> 'lower_precision' or 'float32', read from the dispatcher's autocast kernels."""
    policy = {}
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::") or not torch._C._dispatch_has_kernel_for_dispatch_key(
            name, "AutocastPrivateUse1"
        ):
            continue
        short = name[len("aten::"):].split(".")[0]
        policy[name] = "lower_precision" if short in LOWER_PRECISION_OPERATORS else "float32"
    return policy


def install() -> None:
    load_runtime().install_autocast()
    export(get_amp_supported_dtype, is_autocast_enabled, set_autocast_enabled, get_autocast_dtype,
           set_autocast_dtype, cast_policy)
