"""Step 9, automatic mixed precision: `torch.autocast("sim", dtype=torch.bfloat16 or torch.float16)`.

Two things are needed: kernels on the AutocastPrivateUse1 key (registered in C++
with PyTorch's KERNEL_PRIVATEUSEONE macro, and a fallthrough for every other
operator), and the autocast functions of the device module.

The cast policy is CUDA's whole policy, from PyTorch's shared op lists, one
registration per category (see `cast_policy()`):
- lower_precision: run in the autocast dtype (matmuls, convolutions, RNN cells, attention);
- float32: inputs cast up to float32 (exp, norms, losses, ...);
- float32_set_opt_dtype / float32_append_dtype: reductions such as sum, softmax and norm
  run in float32 by passing dtype=float32 (when the call did not choose a dtype);
- promote: mixed inputs are cast to the widest dtype (addcmul, index_put, ...);
- refused: binary_cross_entropy raises PyTorch's own error under autocast, as on CUDA;
- every other operator runs in the dtype of its inputs.
"""
from __future__ import annotations

import torch

from torch_sim.device_module import export
from torch_sim.runtime import load_runtime

# The lower precisions autocast casts to, as on the CPU and PyTorch's reference backend: for any
# other dtype (float32 included) torch.autocast("sim", dtype=...) warns and disables itself.
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)

# One operator of each category; the rest of a category shares its registration site.
CATEGORY_EXAMPLES = {
    "aten::mm": "lower_precision", "aten::exp": "float32", "aten::sum": "float32_set_opt_dtype",
    "aten::norm.Scalar": "float32_append_dtype", "aten::addcmul": "promote", "aten::binary_cross_entropy": "refused",
}


def get_amp_supported_dtype() -> list[torch.dtype]:
    """The dtypes torch.autocast("sim", dtype=...) accepts; torch.autocast reads this list."""
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


def autocast_registrations(key: str = "AutocastPrivateUse1") -> dict[str, str]:
    """Every ATen overload with its own kernel on an autocast key -> where that kernel was registered."""
    sites = {}
    for name in torch._C._dispatch_get_all_op_names():
        if name.startswith("aten::") and torch._C._dispatch_has_kernel_for_dispatch_key(name, key):
            for line in torch._C._dispatch_dump_table(name).splitlines():
                if line.startswith(f"{key}: registered at "):
                    sites[name] = line[len(f"{key}: registered at "):].rsplit(" [", 1)[0]
    return sites


def cast_policy() -> dict[str, str]:
    """Operator overload -> its autocast category on sim, read back from the dispatcher's registrations."""
    sites = autocast_registrations()
    category_of_site = {sites[example]: category for example, category in CATEGORY_EXAMPLES.items()}
    return {name: category_of_site.get(site, "other") for name, site in sites.items()}


def use_the_hosts_linear_cross_entropy_precision() -> None:
    """Give sim the CPU's defaults for `linear_cross_entropy`'s chunked path: float32 accumulation.

    PyTorch picks that path's accumulation dtype and policy by device type, in Python
    (torch/nn/modules/linear_cross_entropy_options.py: the `_AUTO_DEFAULTS` table and
    `LinearCrossEntropyOptions._resolve_auto_acc_dtype`, which answer float32 for "cpu" and
    "cuda" only). Any other device accumulates bfloat16/float16 inputs in their own dtype:
    less precise than the CPU and, on a host, slower. sim computes on the host, so it takes
    the CPU's entries. A vendor with a working mixed-precision matmul meets the same gap;
    PyTorch has no hook for it yet.
    """
    try:
        from torch.nn.modules import linear_cross_entropy_options as options
    except ImportError:  # a torch without the chunked path
        return
    resolve = getattr(options.LinearCrossEntropyOptions, "_resolve_auto_acc_dtype", None)
    if resolve is None or getattr(resolve, "sim_resolves_like_the_cpu", False):
        return
    for dtype in (torch.bfloat16, torch.float16):
        if ("cpu", dtype) in options._AUTO_DEFAULTS:
            options._AUTO_DEFAULTS[("sim", dtype)] = options._AUTO_DEFAULTS[("cpu", dtype)]

    def resolve_like_the_cpu(dtype: torch.dtype, device: torch.device | None) -> torch.dtype | None:
        if device is not None and device.type == "sim":
            device = torch.device("cpu")
        return resolve(dtype, device)

    resolve_like_the_cpu.sim_resolves_like_the_cpu = True
    options.LinearCrossEntropyOptions._resolve_auto_acc_dtype = staticmethod(resolve_like_the_cpu)


def install() -> None:
    load_runtime().install_autocast()
    use_the_hosts_linear_cross_entropy_precision()
    export(get_amp_supported_dtype, is_autocast_enabled, set_autocast_enabled, get_autocast_dtype,
           set_autocast_dtype, cast_policy)
