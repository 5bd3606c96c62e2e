"""Step 5, operators and fallback: every operator gets a kernel, natively or through the fallback.

Three layers; a real backend has the same three, but its fallback copies:
- the minimal operator set PyTorch needs to create, view, resize and copy tensors
  (C++, `install_minimal_operators`), plus the `*_overrideable` convolutions;
- native kernels for the operators that small CNNs, MLPs and transformers use
  (NATIVE_OPERATORS): they run the host kernel directly on device memory;
- direct kernels for the common element-wise operators and reductions (`direct_operators()`):
  PyTorch's own structured kernels, run on sim tensors with no boxing and no host aliases
  (backend/torch_sim/csrc/operators_direct.cpp); a call one cannot take as the CPU would goes
  the boxed way instead, counted per operator (`torch.sim.direct_route_exits()`);
- a boxed fallback for every other operator, counted and, by policy, warned about
  or refused (SIM_FALLBACK). A real device's fallback (PyTorch's `at::native::cpu_fallback`)
  copies every tensor argument to the host, runs the CPU kernel and copies the results
  back. sim's kernels are host code, which reaches device memory while the device's work runs (discrete memory
  included), so its fallback runs the CPU kernel on it with no copy: do not take its speed, or its silence about
  copies, for a real device's.

Some operators no fallback can serve, because PyTorch routes every device but the CPU
to a backend-specific kernel (ROUTED_OPERATORS): the fused RNN cells, and the attention
kernel PrivateUse1 gets when its attention choice (a per-device hook, in C++) answers
OVERRIDEABLE. The recurrent layers themselves (RECURRENT_OPERATORS) get whole-sequence
kernels that take the CPU's own route, so the fused cells serve only direct calls. And one composite rule a backend must override for its own key:
`_has_compatible_shallow_copy_type`, without which `model.to(device)` unties shared weights.

Bit-identity with the CPU also needs the CPU's *path*, not only its kernels: a few
operators have a CPU kernel of their own and a composite for every other device
(`addr`, `native_group_norm`, `mish_backward`, ...). A backend without its own kernel
gets the composite, which rounds differently. `host_kernels_over_composites()` finds
them in the dispatcher and sim registers the host kernel for each.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from torch_sim import config
from torch_sim.device_module import export
from torch_sim.runtime import load_runtime

T = TypeVar("T")

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
    # packed sequences: sorting by length and the gradient of the reordering
    "arange.start_out", "scatter.src_out", "index_add.out",
    # optimizers (foreach kernels)
    "_foreach_add_.List", "_foreach_add_.Scalar", "_foreach_mul_.Scalar", "_foreach_mul_.Tensor",
    "_foreach_lerp_.Scalar", "_foreach_addcmul_.Scalar", "_foreach_addcdiv_.ScalarList", "_foreach_sqrt",
    "_foreach_div_.ScalarList", "_foreach_add_.ScalarList", "_foreach_add.List", "_foreach_maximum_.List",
    # optimizers (fused kernels: `fused=True`)
    "_fused_adamw_", "_fused_adamw_.tensor_lr", "_fused_adam_", "_fused_adam_.tensor_lr", "_fused_sgd_",
    "_fused_sgd_.tensor_lr",
    # attention: the CPU flash kernels, which the overrideable attention below runs on device memory
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward",
)

# Operators that PyTorch routes to a backend-specific kernel for every device but the CPU, so a
# host fallback cannot serve them: RNN cells (fused on CUDA) and PrivateUse1's attention kernel,
# which scaled_dot_product_attention calls when the attention choice (C++) answers OVERRIDEABLE.
ROUTED_OPERATORS: tuple[str, ...] = (
    "_thnn_fused_lstm_cell", "_thnn_fused_lstm_cell_backward_impl", "_thnn_fused_gru_cell",
    "_thnn_fused_gru_cell_backward", "_scaled_dot_product_fused_attention_overrideable",
    "_scaled_dot_product_fused_attention_overrideable_backward",
)
_routed_library: torch.library.Library | None = None

# Recurrent layers as whole-sequence operators: a composite each, which takes a host route over the whole
# sequence for CPU tensors and the fused cells above, step by step, for any other device. sim runs each on
# the host's route (C++, backend/torch_sim/csrc/operators_rnn.cpp), forward and backward, as the CPU would.
RECURRENT_OPERATORS: tuple[str, ...] = (
    "lstm.input", "lstm.data", "gru.input", "gru.data", "rnn_tanh.input", "rnn_tanh.data", "rnn_relu.input",
    "rnn_relu.data", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
)


def fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    """One LSTM step from precomputed gate products; the workspace keeps the activated gates for backward."""
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias + hidden_bias
    ingate, forgetgate, cellgate, outgate = gates.chunk(4, 1)
    ingate, forgetgate, cellgate, outgate = ingate.sigmoid(), forgetgate.sigmoid(), cellgate.tanh(), outgate.sigmoid()
    cy = forgetgate * cx + ingate * cellgate
    hy = outgate * cy.tanh()
    return hy, cy, torch.cat([ingate, forgetgate, cellgate, outgate], 1)


def fused_lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    ingate, forgetgate, cellgate, outgate = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    grad_hy = torch.zeros_like(cy) if grad_hy is None else grad_hy
    grad_c = grad_hy * outgate * (1 - tanh_cy * tanh_cy)
    grad_c = grad_c if grad_cy is None else grad_c + grad_cy
    grad_gates = torch.cat([grad_c * cellgate * ingate * (1 - ingate),
                            grad_c * cx * forgetgate * (1 - forgetgate),
                            grad_c * ingate * (1 - cellgate * cellgate),
                            grad_hy * tanh_cy * outgate * (1 - outgate)], 1)
    grad_bias = grad_gates.sum(0) if has_bias else grad_gates.new_empty(0)
    return grad_gates, grad_c * forgetgate, grad_bias


def fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    """One GRU step from precomputed gate products; the workspace keeps r, z, n, hx and the hidden new gate."""
    if input_bias is not None:
        input_gates, hidden_gates = input_gates + input_bias, hidden_gates + hidden_bias
    input_reset, input_update, input_new = input_gates.chunk(3, 1)
    hidden_reset, hidden_update, hidden_new = hidden_gates.chunk(3, 1)
    resetgate = (input_reset + hidden_reset).sigmoid()
    updategate = (input_update + hidden_update).sigmoid()
    newgate = (input_new + resetgate * hidden_new).tanh()
    hy = newgate + updategate * (hx - newgate)
    return hy, torch.cat([resetgate, updategate, newgate, hx, hidden_new], 1)


def fused_gru_cell_backward(grad_hy, workspace, has_bias):
    resetgate, updategate, newgate, hx, hidden_new = workspace.chunk(5, 1)
    grad_new = grad_hy * (1 - updategate) * (1 - newgate * newgate)
    grad_update = grad_hy * (hx - newgate) * updategate * (1 - updategate)
    grad_reset = grad_new * hidden_new * resetgate * (1 - resetgate)
    grad_input_gates = torch.cat([grad_reset, grad_update, grad_new], 1)
    grad_hidden_gates = torch.cat([grad_reset, grad_update, grad_new * resetgate], 1)
    if has_bias:
        grad_input_bias, grad_hidden_bias = grad_input_gates.sum(0), grad_hidden_gates.sum(0)
    else:
        grad_input_bias = grad_hidden_bias = grad_hy.new_empty(0)
    return grad_input_gates, grad_hidden_gates, grad_hy * updategate, grad_input_bias, grad_hidden_bias


def fused_attention(query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False, return_debug_mask=False,
                    scale=None):
    """PrivateUse1's attention hook, computed by the host's flash kernel on device memory (bit-identical to CPU)."""
    output, logsumexp = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, dropout_p, is_causal, attn_mask=attn_bias, scale=scale)
    nothing, no_seed = query.new_empty(0), query.new_empty((), dtype=torch.long)
    return (in_dimension_order_of(query, output), logsumexp.contiguous(), nothing, nothing, query.size(-2), key.size(-2),
            no_seed, no_seed, nothing)


def fused_attention_backward(grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q,
                             cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, scale=None):
    """The gradients of query, key and value from the host's flash kernel; the mask's, when asked, as the CPU's."""
    mask = attn_bias if attn_bias is not None and attn_bias.numel() else None
    grad_mask = query.new_empty(0)
    if grad_input_mask[3] and mask is not None:
        grad_mask = attention_mask_gradient(grad_out, query, key, value, mask, dropout_p, is_causal, scale)
    grad_query, grad_key, grad_value = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, attn_mask=mask, scale=scale)
    return (in_dimension_order_of(query, grad_query), in_dimension_order_of(key, grad_key),
            in_dimension_order_of(value, grad_value), grad_mask)


def attention_mask_gradient(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            mask: torch.Tensor, dropout_p: float, is_causal: bool,
                            scale: float | None) -> torch.Tensor:
    """The gradient of attention's additive mask, computed as the CPU computes it, in the mask's shape.

    The host's flash kernel returns none. The CPU sends a mask that requires grad down its math path, so sim
    runs that path on the host and differentiates it: a mask broadcast over batch or heads gets its gradient
    summed to its own shape, as autograd sums it on the CPU.
    """
    if not mask.is_floating_point():
        raise ValueError(f"sim: a {mask.dtype} attention mask has no gradient; pass grad_input_mask[3]=False, "
                         "or use a floating-point additive mask")
    if dropout_p > 0:
        raise NotImplementedError("sim: the fused attention keeps no dropout mask, so it cannot give the mask's "
                                  "gradient with dropout_p > 0; call scaled_dot_product_attention, which takes the "
                                  "math path for a mask that requires grad")
    host = [tensor.detach().cpu().requires_grad_() for tensor in (query, key, value, mask)]
    host_grad_out = grad_out.cpu()

    def differentiate_the_math_path() -> torch.Tensor:
        output, _ = torch.ops.aten._scaled_dot_product_attention_math(*host, is_causal=is_causal, scale=scale)
        return torch.autograd.grad(output, host[3], host_grad_out)[0]

    return on_a_fresh_thread(differentiate_the_math_path).to(mask.device)


def on_a_fresh_thread(function: Callable[[], T]) -> T:
    """`function()`, run on a new thread and joined: there the dispatcher's thread-local state is the default.

    A backward kernel runs below autograd (its dispatch keys are excluded on the calling thread), so a
    recomputation that must record an autograd graph runs where nothing is excluded. The thread ends
    with the call, and with it any OpenMP team its host kernels started.
    """
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = function()
        except BaseException as error:  # handed to the caller
            outcome["error"] = error

    worker = threading.Thread(target=run, name="sim-recompute")
    worker.start()
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def in_dimension_order_of(reference: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    """`result`, laid out in `reference`'s order of dimensions, as PyTorch's fake kernels of the attention say.

    torch.compile plans buffers from the fake kernels and checks the real strides against them;
    the host's flash kernel lays its outputs out its own way, so a result in another order is copied
    (the log-sum-exp, which the fake kernel makes contiguous, too).
    """
    order = sorted(range(reference.dim()), key=lambda dim: reference.stride(dim), reverse=True)
    strides = [0] * result.dim()
    step = 1
    for dim in reversed(order):
        strides[dim] = step
        step *= result.size(dim)
    if all(result.stride(dim) == strides[dim] for dim in range(result.dim()) if result.size(dim) > 1):
        return result
    return torch.empty_strided(result.shape, strides, dtype=result.dtype, device=result.device).copy_(result)


def shallow_copy_compatible(tensor, other) -> bool:
    """Whether `tensor.data = other` may swap one tensor's contents for the other's, as CUDA allows with CPU.

    PyTorch's own rule lists the dense backends that use a plain TensorImpl and leaves PrivateUse1
    out, so `module.to("sim")` would build new Parameters and untie shared ones (GPT-2's lm_head and
    wte). sim's tensors are plain strided TensorImpls too, so CPU and sim tensors are compatible.
    """
    return all(t.layout == torch.strided and t.device.type in ("cpu", "sim") and not t.is_quantized
               and not t.is_nested and not t.is_mkldnn for t in (tensor, other))


def install_routed_operators() -> None:
    """Register sim's kernels for the operators PyTorch routes away from the host path (see ROUTED_OPERATORS)."""
    global _routed_library
    _routed_library = torch.library.Library("aten", "IMPL")
    kernels = (fused_lstm_cell, fused_lstm_cell_backward, fused_gru_cell, fused_gru_cell_backward, fused_attention,
               fused_attention_backward)
    for name, kernel in zip(ROUTED_OPERATORS, kernels):
        _routed_library.impl(name, kernel, "PrivateUse1")
    # A composite operator a backend may override for its own key: see shallow_copy_compatible.
    _routed_library.impl("_has_compatible_shallow_copy_type", shallow_copy_compatible, "PrivateUse1")


def host_kernels_over_composites() -> list[str]:
    """Operators whose CPU kernel PrivateUse1 would miss: a kernel of their own on the CPU, a composite elsewhere.

    The composites generated for structured operators (CompositeExplicitAutogradNonFunctional)
    call the same out= kernel as the CPU, so they are left to the fallback.
    """
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    own = {f"aten::{name}" for name in NATIVE_OPERATORS + ROUTED_OPERATORS}
    return sorted(name.removeprefix("aten::") for name in torch._C._dispatch_get_all_op_names()
                  if name.startswith("aten::") and name not in own and has_kernel(name, "CPU")
                  and not has_kernel(name, "PrivateUse1")
                  and (has_kernel(name, "CompositeExplicitAutograd") or has_kernel(name, "CompositeImplicitAutograd"))
                  and not has_kernel(name, "CompositeExplicitAutogradNonFunctional"))


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


def direct_operators() -> tuple[str, ...]:
    """The operators whose kernel is PyTorch's structured kernel run on sim tensors (backend/torch_sim/csrc/operators_direct.cpp)."""
    return tuple(load_runtime().direct_operators())


def direct_route_exits() -> dict[str, int]:
    """How many calls of each direct operator left its direct kernel for the boxed route since the last reset.

    Keyed by 'aten::name.overload' as `fallback_counts()` is; operators whose every call stayed direct are
    left out. A direct kernel hands a call on when it cannot compute it as the CPU would (an operand on
    another device, a mix of dtypes the CPU converts first, a stream capturing a graph); the result is the
    same, the route slower, and the fallback counts do not show it.
    """
    return dict(load_runtime().direct_route_exits())


def reset_direct_route_exits() -> None:
    """Zero the counters of `direct_route_exits()`."""
    load_runtime().reset_direct_route_exits()


def install() -> None:
    runtime = load_runtime()
    runtime.install_minimal_operators()
    direct = set(runtime.install_direct_kernels())
    runtime.install_native_kernels([name for name in [*NATIVE_OPERATORS, *host_kernels_over_composites()]
                                    if name not in direct])
    install_routed_operators()
    runtime.install_recurrent_kernels(list(RECURRENT_OPERATORS))
    runtime.install_attention_choice()  # C++: the choice is a per-device hook, see backend/torch_sim/csrc
    runtime.install_fallback()
    set_fallback_policy(config.fallback_policy())
    export(set_fallback_policy, get_fallback_policy, fallback_counts, reset_fallback_counts, set_fallback_observer,
           direct_route_exits, reset_direct_route_exits)
