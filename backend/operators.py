"""Step 5, operators and fallback: every operator gets a kernel, natively or through the fallback.

Three layers, as a real backend has them:
- the minimal operator set PyTorch needs to create, view, resize and copy tensors
  (C++, `install_minimal_operators`), plus the `*_overrideable` convolutions;
- native kernels for the operators that small CNNs, MLPs and transformers use
  (NATIVE_OPERATORS): they run the host kernel directly on device memory;
- a boxed fallback for every other operator, which computes the same way with no
  copy but is counted and, by policy, warned about or refused (SIM_FALLBACK).
"""
from __future__ import annotations

from torch_sim import config
from torch_sim.device_module import export
from torch_sim.runtime import load_runtime

MINIMAL_OPERATORS: tuple[str, ...] = (
    "empty.memory_format", "empty_strided", "as_strided", "view", "_reshape_alias", "resize_",
    "_copy_from", "_copy_from_and_resize", "_local_scalar_dense", "set_.source_Storage",
    "set_.source_Storage_storage_offset", "set_.source_Tensor", "set_",
)
EXPLICIT_OPERATORS: tuple[str, ...] = ("convolution_overrideable", "convolution_backward_overrideable")

NATIVE_OPERATORS: tuple[str, ...] = (
    # element-wise arithmetic
    "add.Tensor", "add_.Tensor", "add.out", "sub.Tensor", "sub_.Tensor", "sub.out", "mul.Tensor", "mul_.Tensor",
    "mul.out", "div.Tensor", "div_.Tensor", "div.out", "div.Tensor_mode", "neg", "neg.out", "pow.Tensor_Scalar",
    "pow.Tensor_Scalar_out", "sqrt", "sqrt.out", "rsqrt", "rsqrt.out", "exp", "exp.out", "log", "log.out", "tanh",
    "tanh.out", "tanh_backward", "sigmoid", "sigmoid.out", "sigmoid_backward", "abs", "abs.out", "clamp",
    "clamp_min", "clamp_max", "where.self", "where.self_out", "addcmul_", "addcdiv_", "lerp_.Scalar",
    "maximum", "minimum", "eq.Tensor", "eq.Scalar", "ne.Scalar", "gt.Scalar", "lt.Scalar", "ge.Scalar",
    "le.Scalar", "ne.Tensor_out", "eq.Tensor_out", "bitwise_and.Tensor_out", "ceil.out", "masked_select", "min",
    "max", "masked_fill_.Scalar", "all.out", "isneginf.out", "fill_.Scalar", "zero_",
    # activations and their gradients
    "relu", "relu_", "threshold_backward", "gelu", "gelu.out", "gelu_backward", "silu", "silu.out",
    "silu_backward",
    # reductions and normalisation
    "sum.dim_IntList", "sum.IntList_out", "mean.dim", "mean.out", "amax", "max.dim", "argmax", "norm.Scalar",
    "_softmax", "_softmax.out", "_softmax_backward_data", "_log_softmax", "_log_softmax.out",
    "_log_softmax_backward_data", "native_layer_norm", "native_layer_norm_backward",
    "native_batch_norm", "native_batch_norm_backward", "_native_batch_norm_legit",
    "_native_batch_norm_legit.no_stats",
    # linear algebra
    "mm", "mm.out", "addmm", "addmm.out", "bmm", "bmm.out", "baddbmm", "addmv",
    # losses
    "nll_loss_forward", "nll_loss_backward", "mse_loss", "mse_loss_backward",
    # pooling, embedding, dropout, indexing
    "max_pool2d_with_indices", "max_pool2d_with_indices_backward", "avg_pool2d", "avg_pool2d_backward",
    "_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward", "embedding_dense_backward", "index_select",
    "native_dropout", "native_dropout_backward", "bernoulli_.float", "uniform_", "normal_",
    "index.Tensor", "cat", "cat.out", "mode.values", "gather", "scatter_add", "clone",
    # optimizers (foreach kernels)
    "_foreach_add_.List", "_foreach_add_.Scalar", "_foreach_mul_.Scalar", "_foreach_mul_.Tensor",
    "_foreach_lerp_.Scalar", "_foreach_addcmul_.Scalar", "_foreach_addcdiv_.ScalarList", "_foreach_sqrt",
    "_foreach_div_.ScalarList", "_foreach_add_.ScalarList", "_foreach_add.List",
)


def set_fallback_policy(policy: str) -> None:
    """'warn' (once per operator), 'silent', or 'error' (the fallback raises NotImplementedError)."""
    if policy not in config.FALLBACK_POLICIES:
        raise ValueError(f"fallback policy must be one of {', '.join(config.FALLBACK_POLICIES)}, got {policy!r}")
    load_runtime().set_fallback_policy(config.FALLBACK_POLICIES.index(policy))


def get_fallback_policy() -> str:
    return config.FALLBACK_POLICIES[load_runtime().fallback_policy()]


def fallback_counts() -> dict[str, int]:
    """How many times each operator reached the fallback since the last reset, by 'aten::name.overload'."""
    return dict(load_runtime().fallback_counts())


def reset_fallback_counts() -> None:
    """Zero the counters; the 'warn' policy warns again for each operator after a reset."""
    load_runtime().reset_fallback_counts()


def set_fallback_observer(observer) -> None:
    """Call `observer(operator_name)` every time an operator reaches the fallback (None to stop)."""
    load_runtime().set_fallback_observer(observer)


def install() -> None:
    runtime = load_runtime()
    runtime.install_minimal_operators()
    runtime.install_native_kernels(list(NATIVE_OPERATORS))
    runtime.install_fallback()
    set_fallback_policy(config.fallback_policy())
    export(set_fallback_policy, get_fallback_policy, fallback_counts, reset_fallback_counts, set_fallback_observer)
