"""Direct kernels: PyTorch's structured kernels run on sim tensors with the CPU's own loops.

Their promise is the CPU's result to the bit (dtype, shape, strides, every value, NaNs in the same places) and
the CPU's errors (type and first line), for every input the CPU takes; these tests hold each direct operator to it
against OpInfo's samples, Python scalars, mixed dtypes, layouts, devices, the profiler, out of memory and graph
capture. The boxed route gives the same bits, so they also count the calls that leave the direct kernels for it
(`torch.sim.direct_route_exits()`): none, except the calls the direct kernels hand on by design.
"""
from __future__ import annotations

import functools
import itertools
import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
import torch_sim.operators
from pu1_explorer.profile import COPY_PREFIXES
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile
from torch.testing import make_tensor
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten, tree_map

DIRECT = torch_sim.operators.direct_operators()
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.bool, torch.int32,
          torch.uint8, torch.complex64)
SAMPLES_PER_OP = 12  # the first 12 OpInfo samples per (operator, dtype) keep this file within ~40 s on 2 cores
OPINFOS = {(op.name, op.variant_test_name): op for op in op_db}
BITS = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
        torch.float64: torch.int64, torch.complex64: torch.int64}  # an integer type of the same width


# ------------------------------------------------------------------------------------------ exact copies
class Host:
    """An argument that stays on the CPU in the sim run too (a 0-dim CPU tensor beside sim tensors)."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


def exact_copy(tensor: torch.Tensor, device: str) -> torch.Tensor:
    """A copy on `device` with the same sizes, strides, storage offset and bits as `tensor`."""
    elements = tensor.untyped_storage().nbytes() // tensor.element_size()
    storage = tensor.as_strided((elements,), (1,), 0).detach().to(device, copy=True)
    return storage.as_strided(tensor.shape, tensor.stride(), tensor.storage_offset())


def is_host(value: Any) -> bool:
    return isinstance(value, Host)


def placed(value: Any, device: str) -> Any:
    if isinstance(value, Host):
        return exact_copy(value.tensor, "cpu")
    if isinstance(value, torch.Tensor):
        return exact_copy(value, device)
    return value


def operand(shape: tuple, dtype: torch.dtype, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=generator) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=generator, dtype=torch.float64) * 4).to(dtype)
    if dtype.is_complex:
        return torch.randn(shape, generator=generator, dtype=dtype) * 4
    return torch.randint(-9 if torch.iinfo(dtype).min < 0 else 0, 10, shape, generator=generator, dtype=dtype)


def describe(value: Any) -> str:
    def one(leaf: Any) -> str:
        if isinstance(leaf, Host):
            return "cpu " + one(leaf.tensor)
        if isinstance(leaf, torch.Tensor):
            return f"{str(leaf.dtype)[6:]}{list(leaf.shape)} strides {leaf.stride()}"
        return repr(leaf)
    leaves, _ = tree_flatten(value)
    return ", ".join(one(leaf) for leaf in leaves) if leaves else "()"


def assert_bit_identical(on_sim: Any, on_cpu: Any, what: str) -> None:
    """Same structure; each tensor with the CPU's dtype, shape, strides and bits (NaNs in the same places)."""
    sim_leaves, sim_spec = tree_flatten(on_sim)
    cpu_leaves, cpu_spec = tree_flatten(on_cpu)
    assert sim_spec == cpu_spec, f"{what}: sim returned {sim_spec}, the CPU {cpu_spec}"
    for sim_leaf, cpu_leaf in zip(sim_leaves, cpu_leaves):
        if not isinstance(cpu_leaf, torch.Tensor):
            assert sim_leaf == cpu_leaf or (sim_leaf != sim_leaf and cpu_leaf != cpu_leaf), what
            continue
        assert isinstance(sim_leaf, torch.Tensor), f"{what}: sim returned {type(sim_leaf)}"
        assert sim_leaf.dtype == cpu_leaf.dtype, f"{what}: dtype {sim_leaf.dtype} on sim, {cpu_leaf.dtype} on the CPU"
        assert sim_leaf.shape == cpu_leaf.shape, f"{what}: shape {sim_leaf.shape} on sim, {cpu_leaf.shape} on the CPU"
        assert sim_leaf.stride() == cpu_leaf.stride(), \
            f"{what}: strides {sim_leaf.stride()} on sim, {cpu_leaf.stride()} on the CPU"
        host = sim_leaf.cpu()
        torch.testing.assert_close(host, cpu_leaf, rtol=0, atol=0, equal_nan=True, check_stride=False,
                                   msg=lambda message: f"{what}: {message}")
        if cpu_leaf.dtype in BITS:
            bits = BITS[cpu_leaf.dtype]
            same = (host.view(bits) == cpu_leaf.view(bits)) | (host.isnan() & cpu_leaf.isnan())
            assert bool(same.all()), f"{what}: equal values with other bits (signed zeros) at {(~same).nonzero()[:5]}"


def first_line(error: BaseException) -> str:
    """The first line of an error's message, with device names ("sim:0", "cpu", "CPU", "PrivateUse1") as "<device>"."""
    lines = str(error).splitlines()
    return re.sub(r"\b(?:sim|cpu|privateuse1)(?::\d+)?\b", "<device>", lines[0] if lines else "", flags=re.IGNORECASE)


def outcome(function: Callable, args: Any, kwargs: dict) -> tuple[Any, Exception | None]:
    try:
        return function(*args, **kwargs), None
    except Exception as error:  # the CPU's error is the expectation, whatever it is
        return None, error


def assert_same_as_cpu(function: Callable, *args: Any, label: str | None = None, **kwargs: Any) -> Any:
    """Run `function` on exact sim and CPU copies of the arguments; results, updated arguments and errors agree.
    Returns sim's result, or its exception where the CPU raised."""
    what = f"{label or getattr(function, '__name__', function)}({describe(args)}; {describe(kwargs)})"
    cpu_args, cpu_kwargs = tree_map(lambda value: placed(value, "cpu"), (args, kwargs), is_leaf=is_host)
    sim_args, sim_kwargs = tree_map(lambda value: placed(value, "sim"), (args, kwargs), is_leaf=is_host)
    cpu_result, cpu_error = outcome(function, cpu_args, cpu_kwargs)
    sim_result, sim_error = outcome(function, sim_args, sim_kwargs)
    if cpu_error is not None:
        assert sim_error is not None, f"{what}: the CPU raised {cpu_error!r}, sim returned"
        assert type(sim_error) is type(cpu_error), f"{what}: the CPU raised {cpu_error!r}, sim {sim_error!r}"
        assert first_line(sim_error) == first_line(cpu_error), \
            f"{what}: the first line differs: the CPU's {first_line(cpu_error)!r}, sim's {first_line(sim_error)!r}"
        return sim_error
    assert sim_error is None, f"{what}: sim raised {sim_error!r}, the CPU returned"
    for leaf in tree_flatten(sim_result)[0]:
        if isinstance(leaf, torch.Tensor):
            assert leaf.device.type == "sim", f"{what}: the result is on {leaf.device}"
    assert_bit_identical(sim_result, cpu_result, what)
    assert_bit_identical(sim_args, cpu_args, f"{what}, its arguments afterwards")
    return sim_result


# ----------------------------------------------------------------------- which OpInfo covers which operator
Run = tuple[Callable, tuple, dict]  # a function, its positional and keyword arguments (CPU tensors)


def plain(op, sample, dtype) -> Run:
    return op.op, (sample.input, *sample.args), dict(sample.kwargs)


def inplace(op, sample, dtype) -> Run:
    return op.inplace_variant, (sample.input, *sample.args), dict(sample.kwargs)


def scalar_overload(overload: Callable) -> Callable:
    """Runs the samples of a binary OpInfo through a `.Scalar` overload, its other operand taken as a Python number."""
    def run(op, sample, dtype) -> Run:
        other = sample.args[0]
        if isinstance(other, torch.Tensor):
            other = other.flatten()[0].item() if other.numel() else 1
        return overload, (sample.input, other), {}
    return run


def backward_of(backward: Callable) -> Callable:
    """Runs the samples of the forward OpInfo (tanh, sigmoid) through its backward: (gradient, forward result)."""
    def run(op, sample, dtype) -> Run:
        gradient = make_tensor(sample.input.shape, dtype=dtype, device="cpu", low=-3, high=3)
        return backward, (gradient, op.op(sample.input)), {}
    return run


def threshold_backward(op, sample, dtype) -> Run:
    gradient = make_tensor(sample.input.shape, dtype=dtype, device="cpu", low=-3, high=3)
    return torch.ops.aten.threshold_backward, (gradient, sample.input, sample.args[0]), {}


def gelu_backward(op, sample, dtype) -> Run:
    gradient = make_tensor(sample.input.shape, dtype=dtype, device="cpu", low=-3, high=3)
    return aten.gelu_backward, (gradient, sample.input), dict(sample.kwargs)


def softmax_backward_of(forward: Callable, backward: Callable) -> Callable:
    """Runs the samples of softmax or log_softmax through its backward: (gradient, forward result, dim, dtype)."""
    def run(op, sample, dtype) -> Run:
        dim = sample.args[0] if sample.args else sample.kwargs.get("dim", 0)
        gradient = make_tensor(sample.input.shape, dtype=dtype, device="cpu", low=-3, high=3)
        return backward, (gradient, forward(sample.input, dim), dim, dtype), {}
    return run


REDUCTION_NUMBERS = {"none": 0, "mean": 1, "sum": 2}  # as nll_loss's ATen operators take `reduction`


def nll_loss_arguments(sample) -> tuple:
    """An nll_loss sample as nll_loss_forward takes it: scores of one dimension or of (rows, classes); a sample of
    nll_loss2d's form (rows, classes, d1, d2) becomes rows of classes."""
    scores, target = sample.input, sample.args[0]
    if scores.dim() > 2:
        scores, target = scores.movedim(1, -1).reshape(-1, scores.shape[1]), target.reshape(-1)
    kwargs = sample.kwargs
    return (scores, target, kwargs.get("weight"), REDUCTION_NUMBERS[kwargs.get("reduction", "mean")],
            kwargs.get("ignore_index", -100))


def nll_loss_forward(op, sample, dtype) -> Run:
    return aten.nll_loss_forward, nll_loss_arguments(sample), {}


def nll_loss_backward(op, sample, dtype) -> Run:
    """The gradient of an nll_loss sample's forward, computed on the CPU, with a gradient of its loss's shape."""
    scores, target, weight, reduction, ignore_index = nll_loss_arguments(sample)
    loss, total_weight = aten.nll_loss_forward(scores, target, weight, reduction, ignore_index)
    gradient = make_tensor(loss.shape, dtype=dtype, device="cpu", low=-3, high=3)
    return aten.nll_loss_backward, (gradient, scores, target, weight, reduction, ignore_index, total_weight), {}


@functools.cache
def pinned_classes(rows: int | None, classes: int) -> torch.Tensor:
    """A class for each of `rows` rows (one class when None), in pinned host memory kept for the process: a graph
    capture copies only from pinned memory, and each replay copies from it again."""
    return (torch.arange(rows) % classes if rows is not None else torch.tensor(0)).pin_memory()


def classes_on(device: torch.device, rows: int | None, classes: int) -> torch.Tensor:
    """pinned_classes copied to `device` (the driver's copy, not a kernel)."""
    return pinned_classes(rows, classes).to(device, non_blocking=True)


def scores_and_classes(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`a` as nll_loss's scores (a 2-D view where it has more dimensions) and a class for each row, on a's device."""
    scores = a.flatten(1) if a.dim() > 2 else a
    return scores, classes_on(a.device, scores.shape[0] if scores.dim() == 2 else None,
                              scores.shape[-1] if scores.dim() else 1)


def nll_loss_forward_of(a: torch.Tensor) -> torch.Tensor:
    return aten.nll_loss_forward(*scores_and_classes(a), None, 1, -100)[0]


def nll_loss_backward_of(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The gradient of a mean loss over `a`'s scores, from a gradient and a total weight that are views of b and a."""
    scores, classes = scores_and_classes(a)
    return aten.nll_loss_backward(b[(0,) * b.dim()], scores, classes, None, 1, -100, a[(0,) * a.dim()])


def layer_norm_backward(op, sample, dtype) -> Run:
    """The gradient of a native_layer_norm sample, from its forward on the CPU, for each gradient it can give."""
    normalized_shape, weight, bias, eps = sample.args
    _, mean, rstd = torch.native_layer_norm(sample.input, normalized_shape, weight, bias, eps)
    gradient = make_tensor(sample.input.shape, dtype=dtype, device="cpu", low=-3, high=3)
    mask = [True, weight is not None, bias is not None]
    return aten.native_layer_norm_backward, (gradient, sample.input, normalized_shape, mean, rstd, weight, bias,
                                             mask), {}


def normalized(a: torch.Tensor) -> torch.Tensor:
    """`a` with at least one dimension, as layer norm needs (a view)."""
    return a if a.dim() else a.unsqueeze(0)


def layer_norm_backward_of(a: torch.Tensor) -> torch.Tensor:
    """The input's gradient of layer norm over `a`'s last dimension, with `a` as the gradient and views of it as the
    forward's statistics."""
    x = normalized(a)
    statistics = x[..., :1]
    return aten.native_layer_norm_backward(x, x, x.shape[-1:], statistics, statistics, None, None,
                                           [True, False, False])[0]


def embedding_backward(op, sample, dtype) -> Run:
    """The weight's gradient of an embedding sample, with a gradient for each index (padding_idx as F.embedding
    passes it on: counted from the end when negative, -1 for none)."""
    weight, indices = sample.input, sample.args[0]
    rows = weight.shape[0]
    padding_idx = sample.kwargs.get("padding_idx")
    padding_idx = -1 if padding_idx is None else padding_idx % rows
    gradient = make_tensor((*indices.shape, weight.shape[1]), dtype=dtype, device="cpu", low=-3, high=3)
    return aten.embedding_dense_backward, (gradient, indices, rows, padding_idx,
                                           sample.kwargs.get("scale_grad_by_freq", False)), {}


def embedding_backward_of(a: torch.Tensor) -> torch.Tensor:
    """The gradient of a 5-row embedding from `a` as the gradient of its lookups, one lookup per row of `a`."""
    x = normalized(a)
    lookups = x.numel() // x.shape[-1] if x.shape[-1] else 0
    return aten.embedding_dense_backward(x, classes_on(x.device, lookups, 5), 5, -1, False)


def arange_into(op, sample, dtype) -> Run:
    """An arange sample as the out= form torch.arange calls on sim, into an empty tensor of the sample's dtype."""
    bounds = (sample.input, *sample.args)
    return (lambda out: torch.arange(*bounds, out=out)), (torch.empty(0, dtype=dtype),), {}


def every_column(a: torch.Tensor) -> torch.Tensor:
    """The indices of a's last dimension in order (one index for a 0-dim `a`), copied to a's device by the driver."""
    columns = a.shape[-1] if a.dim() else None
    return classes_on(a.device, columns, max(columns or 1, 1))


def seeded_dropout(input: torch.Tensor, p: float, train: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """native_dropout (what F.dropout calls on every device but the CPU) from a freshly seeded generator."""
    torch.manual_seed(7)
    return aten.native_dropout(input, p, train)


def native_dropout(op, sample, dtype) -> Run:
    """A dropout sample as native_dropout takes it: its probability and whether it trains."""
    return seeded_dropout, (sample.input, sample.kwargs.get("p", 0.5), sample.kwargs.get("training", True)), {}


def zero_in_place(op, sample, dtype) -> Run:
    return torch.zero_, (sample.input,), {}


def relu_in_place(op, sample, dtype) -> Run:
    return torch.relu_, (sample.input,), {}


def where_out(op, sample, dtype) -> Run:
    """where(condition, self, other, out=...) into an empty output that the kernel resizes."""
    def where_into(self, condition, other, out):
        return torch.where(condition, self, other, out=out)
    return where_into, (sample.input, *sample.args, torch.empty(0, dtype=sample.input.dtype)), {}


def flash_attention_arguments(sample) -> tuple[tuple, dict]:
    """A scaled_dot_product_attention sample as the CPU's flash kernel takes it: (batch, heads, tokens, features), a
    3-dimensional tensor as one head, a query of one head expanded to the key's heads, and no dropout (the kernel has
    none)."""
    query, key, value = (t if t.dim() == 4 else t.unsqueeze(1) for t in (sample.input, *sample.args[:2]))
    query = query.expand(-1, key.shape[1], -1, -1)
    kwargs = sample.kwargs
    return (query, key, value, 0.0, kwargs.get("is_causal", False)), {"attn_mask": kwargs.get("attn_mask"),
                                                                      "scale": kwargs.get("scale")}


def flash_attention(op, sample, dtype) -> Run:
    args, kwargs = flash_attention_arguments(sample)
    return aten._scaled_dot_product_flash_attention_for_cpu, args, kwargs


def flash_attention_backward(op, sample, dtype) -> Run:
    """The gradients of a flash attention sample, from its forward on the CPU and a gradient of its result's shape."""
    args, kwargs = flash_attention_arguments(sample)
    out, logsumexp = aten._scaled_dot_product_flash_attention_for_cpu(*args, **kwargs)
    gradient = make_tensor(out.shape, dtype=dtype, device="cpu", low=-3, high=3)
    return aten._scaled_dot_product_flash_attention_for_cpu_backward, (gradient, *args[:3], out, logsumexp,
                                                                        *args[3:]), kwargs


def attention_heads(a: torch.Tensor) -> torch.Tensor:
    """`a` as the query, key and value of one head (1, 1, tokens, features): its last dimension the features, its other
    elements the tokens; an empty `a` as batches of one token (the CPU's flash kernel divides by the tokens). Each row
    of features is contiguous, as the kernel reads it."""
    x = a.reshape(1, 1, -1, a.shape[-1]) if a.dim() else a.reshape(1, 1, 1, 1)
    if x.numel() == 0:
        x = x.transpose(0, 2)
    return x if x.shape[-1] <= 1 or x.stride(-1) == 1 else x.contiguous()


def flash_attention_of(a: torch.Tensor) -> torch.Tensor:
    x = attention_heads(a)
    return aten._scaled_dot_product_flash_attention_for_cpu(x, x, x)[0]


def flash_attention_backward_of(a: torch.Tensor) -> torch.Tensor:
    """The query's gradient of attention over `a`, with `a` as the gradient, the result and (its first features, in
    the dtype the kernel computes in) the log-sum-exp."""
    x = attention_heads(a)
    logsumexp = x[..., 0].to(torch.float64 if x.dtype == torch.float64 else torch.float32)
    return aten._scaled_dot_product_flash_attention_for_cpu_backward(x, x, x, x, x, logsumexp, 0.0, False)[0]


@dataclass(frozen=True)
class Coverage:
    """How a direct operator is tested: the OpInfo whose samples feed it, how a sample becomes a call, and one
    representative call on float tensors `a`, `b` and a boolean `c` of a's shape, for the profiler, device and
    layout tests."""
    opinfo: str
    run: Callable[..., Run]
    call: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], Any]
    variant: str = ""
    binary: bool = True  # takes two float tensors


aten = torch.ops.aten
COVERAGE: dict[str, Coverage] = {
    "add.Tensor": Coverage("add", plain, lambda a, b, c: torch.add(a, b, alpha=2)),
    "add_.Tensor": Coverage("add", inplace, lambda a, b, c: a.add_(b, alpha=2)),
    "sub.Tensor": Coverage("sub", plain, lambda a, b, c: a - b),
    "sub_.Tensor": Coverage("sub", inplace, lambda a, b, c: a.sub_(b)),
    "mul.Tensor": Coverage("mul", plain, lambda a, b, c: a * b),
    "mul_.Tensor": Coverage("mul", inplace, lambda a, b, c: a.mul_(b)),
    "div.Tensor": Coverage("div", plain, lambda a, b, c: a / b, variant="no_rounding_mode"),
    "div_.Tensor": Coverage("div", inplace, lambda a, b, c: a.div_(b), variant="no_rounding_mode"),
    "maximum": Coverage("maximum", plain, lambda a, b, c: torch.maximum(a, b)),
    "minimum": Coverage("minimum", plain, lambda a, b, c: torch.minimum(a, b)),
    "eq.Tensor": Coverage("eq", plain, lambda a, b, c: a == b),
    "ne.Tensor": Coverage("ne", plain, lambda a, b, c: a != b),
    "lt.Tensor": Coverage("lt", plain, lambda a, b, c: a < b),
    "le.Tensor": Coverage("le", plain, lambda a, b, c: a <= b),
    "gt.Tensor": Coverage("gt", plain, lambda a, b, c: a > b),
    "ge.Tensor": Coverage("ge", plain, lambda a, b, c: a >= b),
    "eq.Scalar": Coverage("eq", scalar_overload(aten.eq.Scalar), lambda a, b, c: a == 0.5, binary=False),
    "ne.Scalar": Coverage("ne", scalar_overload(aten.ne.Scalar), lambda a, b, c: a != 0.5, binary=False),
    "lt.Scalar": Coverage("lt", scalar_overload(aten.lt.Scalar), lambda a, b, c: a < 0.5, binary=False),
    "le.Scalar": Coverage("le", scalar_overload(aten.le.Scalar), lambda a, b, c: a <= 0.5, binary=False),
    "gt.Scalar": Coverage("gt", scalar_overload(aten.gt.Scalar), lambda a, b, c: a > 0.5, binary=False),
    "ge.Scalar": Coverage("ge", scalar_overload(aten.ge.Scalar), lambda a, b, c: a >= 0.5, binary=False),
    "where.self": Coverage("where", plain, lambda a, b, c: torch.where(c, a, b)),
    "where.self_out": Coverage("where", where_out, lambda a, b, c: torch.where(c, a, b, out=torch.empty_like(a))),
    "exp": Coverage("exp", plain, lambda a, b, c: a.exp(), binary=False),
    "neg": Coverage("neg", plain, lambda a, b, c: -a, binary=False),
    "sqrt": Coverage("sqrt", plain, lambda a, b, c: a.sqrt(), binary=False),
    "rsqrt": Coverage("rsqrt", plain, lambda a, b, c: a.rsqrt(), binary=False),
    "log": Coverage("log", plain, lambda a, b, c: a.log(), binary=False),
    "tanh": Coverage("tanh", plain, lambda a, b, c: a.tanh(), binary=False),
    "sin": Coverage("sin", plain, lambda a, b, c: a.sin(), binary=False),
    "cos": Coverage("cos", plain, lambda a, b, c: a.cos(), binary=False),
    "sigmoid": Coverage("sigmoid", plain, lambda a, b, c: a.sigmoid(), binary=False),
    "relu": Coverage("nn.functional.relu", plain, lambda a, b, c: a.relu(), binary=False),
    "relu_": Coverage("nn.functional.relu", relu_in_place, lambda a, b, c: a.relu_(), binary=False),
    "clamp_min": Coverage("clamp_min", scalar_overload(aten.clamp_min), lambda a, b, c: a.clamp_min(0.25),
                          binary=False),
    "clamp_min_": Coverage("clamp_min", scalar_overload(aten.clamp_min_), lambda a, b, c: a.clamp_min_(0.25),
                           binary=False),
    "clamp_max": Coverage("clamp_max", scalar_overload(aten.clamp_max), lambda a, b, c: a.clamp_max(0.25),
                          binary=False),
    "pow.Tensor_Scalar": Coverage("pow", scalar_overload(aten.pow.Tensor_Scalar), lambda a, b, c: a.pow(3),
                                  binary=False),
    "threshold_backward": Coverage("nn.functional.threshold", threshold_backward,
                                   lambda a, b, c: aten.threshold_backward(a, b, 0.5)),
    "tanh_backward": Coverage("tanh", backward_of(aten.tanh_backward), lambda a, b, c: aten.tanh_backward(a, b)),
    "sigmoid_backward": Coverage("sigmoid", backward_of(aten.sigmoid_backward),
                                 lambda a, b, c: aten.sigmoid_backward(a, b)),
    "sum.dim_IntList": Coverage("sum", plain, lambda a, b, c: a.sum(-1), binary=False),
    "mean.dim": Coverage("mean", plain, lambda a, b, c: a.mean(-1), binary=False),
    "amax": Coverage("amax", plain, lambda a, b, c: a.amax(-1), binary=False),
    "fill_.Scalar": Coverage("fill", inplace, lambda a, b, c: a.fill_(0.5), binary=False),
    "tril": Coverage("tril", plain, lambda a, b, c: a.tril(-1), binary=False),
    "triu": Coverage("triu", plain, lambda a, b, c: a.triu(1), binary=False),
    "mm": Coverage("mm", plain, lambda a, b, c: torch.mm(a, b.t())),
    "bmm": Coverage("bmm", plain, lambda a, b, c: torch.bmm(a.unsqueeze(0), b.t().unsqueeze(0))),
    "addmm": Coverage("addmm", plain, lambda a, b, c: torch.addmm(a[:, :1], a, b.t())),
    "_softmax": Coverage("softmax", plain, lambda a, b, c: torch.softmax(a, -1), binary=False),
    "_log_softmax": Coverage("log_softmax", plain, lambda a, b, c: torch.log_softmax(a, -1), binary=False),
    "gelu": Coverage("nn.functional.gelu", plain, lambda a, b, c: torch.nn.functional.gelu(a), binary=False),
    "gelu_backward": Coverage("nn.functional.gelu", gelu_backward, lambda a, b, c: aten.gelu_backward(a, b)),
    "_softmax_backward_data": Coverage("softmax", softmax_backward_of(torch.softmax, aten._softmax_backward_data),
                                       lambda a, b, c: aten._softmax_backward_data(a, b, -1, a.dtype)),
    "_log_softmax_backward_data": Coverage(
        "log_softmax", softmax_backward_of(torch.log_softmax, aten._log_softmax_backward_data),
        lambda a, b, c: aten._log_softmax_backward_data(a, b, -1, a.dtype)),
    "nll_loss_forward": Coverage("nn.functional.nll_loss", nll_loss_forward,
                                 lambda a, b, c: nll_loss_forward_of(a), binary=False),
    "nll_loss_backward": Coverage("nn.functional.nll_loss", nll_loss_backward,
                                  lambda a, b, c: nll_loss_backward_of(a, b), binary=False),
    "native_layer_norm": Coverage("native_layer_norm", plain, lambda a, b, c: torch.native_layer_norm(
        normalized(a), normalized(a).shape[-1:], None, None, 1e-5)[0], binary=False),
    "native_layer_norm_backward": Coverage("native_layer_norm", layer_norm_backward,
                                           lambda a, b, c: layer_norm_backward_of(a), binary=False),
    "embedding_dense_backward": Coverage("nn.functional.embedding", embedding_backward,
                                         lambda a, b, c: embedding_backward_of(a), binary=False),
    "clone": Coverage("clone", plain, lambda a, b, c: a.clone(), binary=False),
    "index_select": Coverage("index_select", plain, lambda a, b, c: a.index_select(-1, every_column(a)),
                             binary=False),
    "arange.start_out": Coverage("arange", arange_into,
                                 lambda a, b, c: torch.arange(0.5, a.numel(), 1, out=a.view(-1) if a.is_contiguous()
                                                              else a), binary=False),
    "gather": Coverage("gather", plain, lambda a, b, c: torch.gather(a, -1, every_column(a).expand_as(a)),
                       binary=False),
    "cat": Coverage("cat", plain, lambda a, b, c: torch.cat([a, b, a], 0)),
    "native_dropout": Coverage("nn.functional.dropout", native_dropout,
                               lambda a, b, c: seeded_dropout(a, 0.25, True)[0], binary=False),
    "native_dropout_backward": Coverage("native_dropout_backward", plain,
                                        lambda a, b, c: aten.native_dropout_backward(a, c, 1.25), binary=False),
    "zero_": Coverage("zero_", zero_in_place, lambda a, b, c: a.zero_(), binary=False),
    "_scaled_dot_product_flash_attention_for_cpu": Coverage(
        "nn.functional.scaled_dot_product_attention", flash_attention, lambda a, b, c: flash_attention_of(a),
        binary=False),
    "_scaled_dot_product_flash_attention_for_cpu_backward": Coverage(
        "nn.functional.scaled_dot_product_attention", flash_attention_backward,
        lambda a, b, c: flash_attention_backward_of(a), binary=False),
}
# Direct operators without an OpInfo, each tested bit for bit, on its route, in a file of its own.
TESTED_ELSEWHERE = {"_fused_adamw_": "test_optimizers.py", "_fused_adam_": "test_optimizers.py",
                    "_fused_sgd_": "test_optimizers.py"}
IN_PLACE = {"add_.Tensor", "sub_.Tensor", "mul_.Tensor", "div_.Tensor", "relu_", "clamp_min_", "fill_.Scalar",
            "zero_"}  # self first
COVERED = [name for name in DIRECT if name in COVERAGE]


def opinfo_of(name: str):
    coverage = COVERAGE[name]
    return OPINFOS[(coverage.opinfo, coverage.variant)]


def operator_dtype_pairs() -> list:
    supported = {name: opinfo_of(name).supported_dtypes("cpu") for name in COVERED}
    return [pytest.param(name, dtype, id=f"{name}-{str(dtype)[6:]}")
            for name in COVERED for dtype in DTYPES if dtype in supported[name]]


def direct_fallbacks() -> dict[str, int]:
    """The fallback counts of direct operators (and of their out= forms): a direct operator must never fall back."""
    bases = {name.split(".")[0] for name in DIRECT}
    return {name: count for name, count in torch.sim.fallback_counts().items()
            if name.removeprefix("aten::").split(".")[0] in bases}


# The calls a direct kernel hands to the boxed route by design (backend/torch_sim/csrc/operators_direct.cpp): those
# whose operands the CPU converts to the computation's dtype first, which the CPU's loops leave to their caller.
FLOAT_VALUED = {"div.Tensor", "div_.Tensor", "exp", "log", "sqrt", "rsqrt", "tanh", "sin", "cos", "sigmoid",
                "tanh_backward", "sigmoid_backward",
                "native_dropout_backward"}  # computed in a floating dtype whatever the operands' dtype
SCALAR_COMPARISONS = {"eq.Scalar", "ne.Scalar", "lt.Scalar", "le.Scalar", "gt.Scalar", "ge.Scalar"}


def may_leave_the_direct_route(name: str, dtype: torch.dtype) -> bool:
    """Whether calls of the direct operator `name` on `dtype` tensors may take the boxed route: integer or boolean
    operands of an operator computed in a floating dtype, or a Python number compared with float16, bfloat16 or
    boolean tensors (a direct kernel converts a number itself, except into float16 or bfloat16, and never converts
    a sim tensor: converts_like_the_cpu and promotable in operators_direct.cpp)."""
    if name in FLOAT_VALUED:
        return not (dtype.is_floating_point or dtype.is_complex)
    if name in SCALAR_COMPARISONS:
        return dtype in (torch.float16, torch.bfloat16, torch.bool)
    return False


def test_every_direct_operator_has_an_opinfo_and_a_representative_call():
    assert DIRECT, "sim reports no direct operators"
    assert len(set(DIRECT)) == len(DIRECT), f"an operator is registered twice: {sorted(DIRECT)}"
    missing = sorted(set(DIRECT) - set(COVERAGE) - set(TESTED_ELSEWHERE))
    assert not missing, f"direct operators without a test here: {missing}; add them to COVERAGE"
    for name, file in TESTED_ELSEWHERE.items():
        assert f"aten::{name}" in (Path(__file__).parent / file).read_text(), f"{file} does not test {name}"
    for name in COVERED:
        coverage = COVERAGE[name]
        op = opinfo_of(name)
        assert coverage.run is not inplace or op.inplace_variant is not None, f"{op.name} has no in-place variant"


# ------------------------------------------------------------------------- 1. OpInfo samples, every dtype
@pytest.mark.parametrize(("name", "dtype"), operator_dtype_pairs())
def test_opinfo_samples_are_bit_identical_to_the_cpu(name, dtype):
    op, coverage = opinfo_of(name), COVERAGE[name]
    torch.manual_seed(0)
    torch.sim.reset_fallback_counts()
    torch.sim.reset_direct_route_exits()
    samples = list(itertools.islice(op.sample_inputs("cpu", dtype), SAMPLES_PER_OP))
    assert samples, f"{op.name} has no {dtype} samples"
    for sample in samples:
        function, args, kwargs = coverage.run(op, sample, dtype)
        assert_same_as_cpu(function, *args, **kwargs)
    assert direct_fallbacks() == {}, "a direct operator reached the fallback"
    if not may_leave_the_direct_route(name, dtype):
        assert torch.sim.direct_route_exits() == {}, "calls left the direct kernels for the boxed route"


def bad_calls() -> dict[str, tuple[Callable, tuple]]:
    """Calls the CPU refuses, each naming the direct operator it reaches."""
    def f32(*shape: int) -> torch.Tensor:
        return operand(shape, torch.float32, 1)

    def i64(*shape: int) -> torch.Tensor:
        return operand(shape, torch.int64, 2)

    def flag(*shape: int) -> torch.Tensor:
        return operand(shape, torch.bool, 3)

    return {
        "add: shapes that do not broadcast": (lambda a, b: a + b, (f32(3, 4), f32(5))),
        "mul: shapes that do not broadcast": (lambda a, b: a * b, (f32(3, 4), f32(2, 4))),
        "gt: shapes that do not broadcast": (lambda a, b: a > b, (f32(3, 4), f32(5))),
        "sub: of booleans": (lambda a, b: a - b, (flag(3), flag(3))),
        "neg: of booleans": (lambda a: -a, (flag(3),)),
        "add_: an int64 self with a float32 other": (lambda a, b: a.add_(b), (i64(3), f32(3))),
        "mul_: a bool self with a float32 other": (lambda a, b: a.mul_(b), (flag(3), f32(3))),
        "div_: an int64 self (true division)": (lambda a, b: a.div_(b), (i64(3), i64(3))),
        "sub_: self smaller than the broadcast shape": (lambda a, b: a.sub_(b), (f32(3, 1), f32(3, 4))),
        "add_: a self that overlaps itself": (lambda a, b: a.expand(3, 4).add_(b), (f32(3, 1), f32(3, 4))),
        "add_: an other that partly overlaps self": (lambda a: a[1:].add_(a[:-1]), (f32(6),)),
        "add_: an other that is self transposed": (lambda a: a.add_(a.t()), (f32(4, 4),)),
        "where out=: an out that partly overlaps an input": (lambda a: torch.where(a > 0, a, a, out=a[1:]), (f32(7),)),
        "sum: a dimension out of range": (lambda a: a.sum(2), (f32(3, 4),)),
        "amax: over an empty dimension": (lambda a: a.amax(0), (f32(0, 4),)),
        "amax: a dimension out of range": (lambda a: a.amax(-3), (f32(3, 4),)),
        "mean: of int64": (lambda a: a.mean(0), (i64(3, 4),)),
        "clamp_min_: an int64 self with a float bound": (lambda a: a.clamp_min_(0.5), (i64(3),)),
        "relu: of booleans": (lambda a: a.relu(), (flag(3),)),
        "threshold_backward: shapes that do not broadcast": (
            lambda a, b: aten.threshold_backward(a, b, 0.0), (f32(3, 4), f32(5))),
        "where: a float condition": (lambda c, a, b: torch.where(c, a, b), (f32(3), f32(3), f32(3))),
        "native_layer_norm: an input that does not end in the normalized shape": (
            lambda a: torch.native_layer_norm(a, (3,), None, None, 1e-5), (f32(3, 4),)),
        "native_layer_norm: a weight of another shape": (
            lambda a, w: torch.native_layer_norm(a, (4,), w, None, 1e-5), (f32(3, 4), f32(3))),
        "native_layer_norm: of int64": (lambda a: torch.native_layer_norm(a, (4,), None, None, 1e-5), (i64(3, 4),)),
        "embedding_dense_backward: indices that do not number the gradient's rows": (
            lambda g, i: aten.embedding_dense_backward(g, i, 7, -1, False), (f32(3, 5), i64(4))),
        "embedding_dense_backward: float indices": (
            lambda g, i: aten.embedding_dense_backward(g, i, 7, -1, False), (f32(3, 5), f32(3))),
        "nll_loss_forward: float classes": (
            lambda a, t: aten.nll_loss_forward(a, t, None, 1, -100), (f32(3, 4), f32(3))),
        "nll_loss_forward: a class per row of another count": (
            lambda a, t: aten.nll_loss_forward(a, t, None, 1, -100), (f32(3, 4), i64(5))),
        "where out=: an out of another dtype": (
            lambda c, a, b, out: torch.where(c, a, b, out=out), (flag(3), f32(3), f32(3), i64(3))),
        "arange: a zero step": (lambda out: torch.arange(0, 10, 0, out=out), (f32(0),)),
        "arange: a range that does not end": (lambda out: torch.arange(0, math.inf, 1, out=out), (f32(0),)),
        "arange: a step against the range": (lambda out: torch.arange(0, 10, -1, out=out), (i64(0),)),
        "arange: into booleans": (lambda out: torch.arange(0, 2, 1, out=out), (flag(0),)),
        "arange: into complex numbers": (lambda out: torch.arange(0, 2, 1, out=out), (f32(0).to(torch.complex64),)),
        "gather: float indices": (lambda a, i: torch.gather(a, 1, i), (f32(3, 4), f32(3, 2))),
        "gather: indices of another number of dimensions": (lambda a, i: torch.gather(a, 1, i), (f32(3, 4), i64(3))),
        "gather: a dimension out of range": (lambda a, i: torch.gather(a, 2, i), (f32(3, 4), i64(3, 2))),
    }


@pytest.mark.parametrize("case", list(bad_calls()))
def test_calls_the_cpu_refuses_raise_its_exception_type_on_sim(case):
    function, args = bad_calls()[case]
    error = assert_same_as_cpu(function, *args, label=case)
    assert isinstance(error, Exception), f"the CPU accepts {case}"


def test_error_parity_compares_the_first_line_with_device_names_normalised():
    def refuse(x: torch.Tensor) -> None:
        raise RuntimeError(f"no kernel for {x.device}\n{'sim' if x.device.type == 'sim' else 'the CPU'}'s advice")

    def refuse_in_other_words(x: torch.Tensor) -> None:
        raise RuntimeError("sim refuses" if x.device.type == "sim" else "cpu declines")

    assert first_line(assert_same_as_cpu(refuse, operand((2,), torch.float32, 1))) == "no kernel for <device>"
    with pytest.raises(AssertionError, match="the first line differs"):
        assert_same_as_cpu(refuse_in_other_words, operand((2,), torch.float32, 1))


# --------------------------------------------------------------------------------------- 2. Python scalars
SCALAR_CALLS = {
    "x*2": lambda x: x * 2,
    "x*2.5": lambda x: x * 2.5,
    "x+1": lambda x: x + 1,
    "x-1.5": lambda x: x - 1.5,
    "x/3": lambda x: x / 3,
    "x>0": lambda x: x > 0,
    "x>1e6": lambda x: x > 1e6,
    "x*1e6": lambda x: x * 1e6,
    "x==2.5": lambda x: x == 2.5,
    "x.mul_(0.9)": lambda x: x.mul_(0.9),
    "x.add_(1)": lambda x: x.add_(1),
    "x.add_(1e6)": lambda x: x.add_(1e6),
    "x.clamp_min(0.5)": lambda x: x.clamp_min(0.5),
    "2-x": lambda x: 2 - x,
    "x==1e-50": lambda x: x == 1e-50,  # the number rounds to 0 in the tensor's dtype
    "x*1e-50": lambda x: x * 1e-50,
    "x>1e39": lambda x: x > 1e39,
    "x+2**40": lambda x: x + 2**40,
    "x*(2**31+1)": lambda x: x * (2**31 + 1),
    "x.clamp_min(nan)": lambda x: x.clamp_min(float("nan")),
    "x.clamp_min_(1)": lambda x: x.clamp_min_(1),
    "where(x>0,x,0.5)": lambda x: torch.where(x > 0, x, 0.5),
    "x-True": lambda x: x - True,
}


def scalar_operand(dtype: torch.dtype) -> torch.Tensor:
    """37 elements (a vector body and a tail), values around and beyond float16's range, and IEEE's specials."""
    if not dtype.is_floating_point:  # int32 and uint8 wrap the larger values around
        return torch.tensor([-(2**40), -70000, -3, -1, 0, 1, 2, 3, 65504, 70000, 2**40] * 3 + [5, 6, 7, 8]).to(dtype)
    values = torch.tensor([-1e6, -7e4, -2.5, -1.0, -0.0, 0.0, 1e-8, 0.1, 1.0, 2.5, 6e4, 7e4, 1e6,
                           float("inf"), float("-inf"), float("nan")], dtype=torch.float64)
    return torch.cat([values, values, values[:5]]).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                                   torch.uint8], ids=str)
@pytest.mark.parametrize("expression", list(SCALAR_CALLS))
def test_python_scalars_are_bit_identical_to_the_cpu(expression, dtype):
    function = SCALAR_CALLS[expression]
    assert_same_as_cpu(function, scalar_operand(dtype), label=expression)
    assert_same_as_cpu(function, scalar_operand(dtype)[7], label=expression)  # a 0-dim tensor


def test_float16_overflow_from_a_python_scalar_matches_the_cpu():
    h = torch.tensor([1.0, 60000.0, -60000.0], dtype=torch.float16)
    result = assert_same_as_cpu(lambda x: x * 1e6, h)
    assert torch.isinf(result.cpu()).all()
    assert not assert_same_as_cpu(lambda x: x > 1e6, h).cpu().any()


# ----------------------------------------------------------------------------------------- 3. mixed dtypes
def matrix(dtype: torch.dtype, seed: int = 1) -> torch.Tensor:
    return operand((5, 7), dtype, seed)


def zero_dim(dtype: torch.dtype, seed: int = 2) -> torch.Tensor:
    return operand((), dtype, seed)


def on_host(dtype: torch.dtype, seed: int = 2) -> Host:
    return Host(operand((), dtype, seed))


f16, bf16, f32, f64, i32, i64, b8 = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32,
                                     torch.int64, torch.bool)
MIXED = {
    "float16+float32": (lambda a, b: a + b, matrix(f16), matrix(f32, 2)),
    "bfloat16*float32": (lambda a, b: a * b, matrix(bf16), matrix(f32, 2)),
    "int64/int64": (lambda a, b: a / b, matrix(i64), matrix(i64, 2)),
    "int32+int64": (lambda a, b: a + b, matrix(i32), matrix(i64, 2)),
    "bool+float32": (lambda a, b: a + b, matrix(b8), matrix(f32, 2)),
    "bool*bool": (lambda a, b: a * b, matrix(b8), matrix(b8, 2)),
    "float16>float32": (lambda a, b: a > b, matrix(f16), matrix(f32, 2)),
    "maximum(int64,float16)": (lambda a, b: torch.maximum(a, b), matrix(i64), matrix(f16, 2)),
    "float32+0-dim float64": (lambda a, b: a + b, matrix(f32), zero_dim(f64)),
    "float32+0-dim cpu": (lambda a, b: a + b, matrix(f32), on_host(f32)),
    "float32*0-dim cpu float64": (lambda a, b: a * b, matrix(f32), on_host(f64)),
    "0-dim cpu*float32": (lambda a, b: a * b, on_host(f32), matrix(f32)),
    "0-dim cpu int64-float16": (lambda a, b: a - b, on_host(i64), matrix(f16)),
    "bfloat16+0-dim cpu float64": (lambda a, b: a + b, matrix(bf16), on_host(f64)),
    "int32>0-dim cpu float64": (lambda a, b: a > b, matrix(i32), on_host(f64)),
    "where(float32, 0-dim cpu)": (lambda a, b: torch.where(a > 0, a, b), matrix(f32), on_host(f32)),
    "where(float16, float32)": (lambda a, b: torch.where(b > 0, a, b), matrix(f16), matrix(f32, 2)),
    "where(0-dim cpu, 0-dim cpu)": (lambda c, a, b: torch.where(c, a, b), matrix(b8), on_host(f32), on_host(f32, 3)),
    "float32.add_(float16)": (lambda a, b: a.add_(b), matrix(f32), matrix(f16, 2)),
    "float32.add_(float64)": (lambda a, b: a.add_(b), matrix(f32), matrix(f64, 2)),
    "float16.mul_(float32)": (lambda a, b: a.mul_(b), matrix(f16), matrix(f32, 2)),
    "int32.add_(int64)": (lambda a, b: a.add_(b), matrix(i32), matrix(i64, 2)),
    "int64.add_(float32)": (lambda a, b: a.add_(b), matrix(i64), matrix(f32, 2)),
    "float32.div_(0-dim cpu)": (lambda a, b: a.div_(b), matrix(f32), on_host(f32)),
    "sum(float16, dtype=float32)": (lambda a: a.sum(0, dtype=torch.float32), matrix(f16)),
    "sum(int32)": (lambda a: a.sum(1), matrix(i32)),
    "sum(bool)": (lambda a: a.sum(1), matrix(b8)),
    "threshold_backward(float16,float32)": (lambda a, b: aten.threshold_backward(a, b, 0.0), matrix(f16),
                                            matrix(f32, 2)),
}


@pytest.mark.parametrize("case", list(MIXED))
def test_mixed_dtypes_are_bit_identical_to_the_cpu(case):
    function, *operands = MIXED[case]
    assert_same_as_cpu(function, *operands, label=case)


# ---------------------------------------------------------------------------------------------- 4. layouts
def layout_operands(layout: str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Two CPU operands `a` and `b` for the representative call, in the given layout."""
    if layout == "transposed":
        return operand((7, 5), dtype, 1).t(), operand((5, 7), dtype, 2)
    if layout == "both transposed":
        return operand((7, 5), dtype, 1).t(), operand((7, 5), dtype, 2).t()
    if layout == "sliced":
        return operand((6, 16), dtype, 1)[1:, ::3], operand((5, 12), dtype, 2)[:, 1::2]
    if layout == "broadcast":
        return operand((4, 3, 5), dtype, 1), operand((3, 1), dtype, 2)
    if layout == "expanded":
        return operand((3, 1), dtype, 1).expand(3, 5), operand((3, 5), dtype, 2)
    if layout == "channels last":
        return (operand((2, 3, 4, 5), dtype, 1).contiguous(memory_format=torch.channels_last),
                operand((2, 3, 4, 5), dtype, 2).contiguous(memory_format=torch.channels_last))
    if layout == "channels last and contiguous":
        return (operand((2, 3, 4, 5), dtype, 1).contiguous(memory_format=torch.channels_last),
                operand((2, 3, 4, 5), dtype, 2))
    if layout == "0-dim":
        return operand((), dtype, 1), operand((), dtype, 2)
    if layout == "0-dim other":
        return operand((3, 5), dtype, 1), operand((), dtype, 2)
    if layout == "empty":
        return operand((0, 3), dtype, 1), operand((0, 3), dtype, 2)
    if layout == "special values":
        values = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 1e-40, -1e-40, 1e38, -2.0,
                               0.5, 1.0, 88.8, -88.8, 1e4], dtype=torch.float64)
        return values.to(dtype), values.flip(0).to(dtype)
    raise AssertionError(layout)


LAYOUTS = ["transposed", "both transposed", "sliced", "broadcast", "expanded", "channels last",
           "channels last and contiguous", "0-dim", "0-dim other", "empty", "special values"]


SHAPES_DIFFER = {"broadcast", "0-dim other"}  # the layouts whose two operands have different shapes
# The gradients of softmax and log_softmax from an output of another shape: the CPU reads past the output's memory
# (its meta() never compares the shapes), and sim refuses them (test_a_softmax_gradient_from_an_output_of_another_
# shape_is_refused), so there is nothing of the CPU's to compare with.
SOFTMAX_GRADIENTS = {"_softmax_backward_data", "_log_softmax_backward_data"}


@pytest.mark.parametrize(("name", "layout"), [(name, layout) for name in COVERED for layout in LAYOUTS
                                               if not (name in SOFTMAX_GRADIENTS and layout in SHAPES_DIFFER)])
def test_layouts_are_bit_identical_to_the_cpu_on_the_direct_route(name, layout):
    call = COVERAGE[name].call
    torch.sim.reset_fallback_counts()
    for dtype in (torch.float32, torch.float16, torch.float64):
        a, b = layout_operands(layout, dtype)
        torch.sim.reset_direct_route_exits()
        assert_same_as_cpu(call, a, b, a > 0)  # the condition is made on the CPU and copied
        # gelu_backward hands operands of two shapes to the boxed route, where the CPU's oneDNN refuses them
        leaves = may_leave_the_direct_route(name, dtype) or (name == "gelu_backward" and layout in SHAPES_DIFFER)
        handed_on = {f"aten::{name}": 1} if leaves else {}
        assert torch.sim.direct_route_exits() == handed_on, f"{dtype}: the calls that took the boxed route"
    assert direct_fallbacks() == {}, "a direct operator reached the fallback"


@pytest.mark.parametrize("name", sorted(SOFTMAX_GRADIENTS))
def test_a_softmax_gradient_from_an_output_of_another_shape_is_refused(name):
    gradient, output = torch.ones(4, 3, 5, device="sim"), torch.ones(3, 1, device="sim")
    with pytest.raises(RuntimeError, match=rf"^aten::{name} needs the gradient \(sizes \[4, 3, 5\]\) and the "
                                           r"forward's output \(sizes \[3, 1\]\) of one shape; pass the output"):
        getattr(aten, name)(gradient, output, -1, torch.float32)
    assert torch.equal(output.cpu(), torch.ones(3, 1)), "the refused call changed its operand"


HANDED_ON = {  # calls a direct kernel hands to the boxed route, each with the operator that counts it
    "float16 + float32 on sim": (lambda x, h, b, i: h + x, "aten::add.Tensor"),
    "int64 / int64 (true division)": (lambda x, h, b, i: i / i, "aten::div.Tensor"),
    "float16 > a Python number": (lambda x, h, b, i: h > 0.5, "aten::gt.Scalar"),
    "bfloat16 * a 0-dim CPU float64": (lambda x, h, b, i: b * torch.tensor(2.0).double(), "aten::mul.Tensor"),
    "a multiply while a stream captures": (lambda x, h, b, i: captured(lambda: x * x)[1], "aten::mul.Tensor"),
}


@pytest.mark.parametrize("case", list(HANDED_ON))
def test_a_call_a_direct_kernel_hands_on_is_counted_against_its_operator(case):
    call, operator = HANDED_ON[case]
    operands = [operand((5, 7), dtype, seed).to("sim") for seed, dtype in
                enumerate((torch.float32, torch.float16, torch.bfloat16, torch.int64))]
    torch.sim.reset_direct_route_exits()
    result = call(*operands)
    assert result.device.type == "sim"
    assert torch.sim.direct_route_exits() == {operator: 1}
    torch.sim.reset_direct_route_exits()
    assert torch.sim.direct_route_exits() == {}


def test_an_operand_on_the_cpu_with_dimensions_takes_the_boxed_route_to_the_cpus_refusal():
    a = operand((3, 4), torch.float32, 1).to("sim")
    torch.sim.reset_direct_route_exits()
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        a * operand((3, 4), torch.float32, 2)
    assert torch.sim.direct_route_exits() == {"aten::mul.Tensor": 1}


REDUCTIONS = {
    "sum over the two fastest dimensions": lambda a: a.sum((1, 2)),
    "sum over the two fastest dimensions, kept": lambda a: a.sum((2, 1), keepdim=True),
    "sum over the outer and the fastest dimension": lambda a: a.sum((0, 2)),
    "sum of everything": lambda a: a.sum(),
    "sum into float32": lambda a: a.sum((1, 2), dtype=torch.float32),
    "mean over the two fastest dimensions": lambda a: a.mean((1, 2)),
    "amax over the two fastest dimensions": lambda a: a.amax((1, 2)),
}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "sliced", "permuted", "large"])
@pytest.mark.parametrize("reduction", list(REDUCTIONS))
def test_reductions_over_strided_dimensions_are_bit_identical_to_the_cpu(reduction, layout, dtype):
    if layout == "large":  # large enough for the CPU's loops to split the work between threads
        a = operand((16, 256, 256), dtype, 1)
    else:
        base = operand((8, 64, 64), dtype, 1)
        a = {"contiguous": base, "sliced": base[:, :, :48], "permuted": base.permute(0, 2, 1)}[layout]
    assert_same_as_cpu(REDUCTIONS[reduction], a, label=reduction)


# Shapes whose tensors hold about 32,768 elements in all, on either side: the CPU splits the work of these loops
# between its threads only above that size, and sim's launch computes with the caller's intra-op threads.
AROUND_THE_CPUS_GRAIN = [(128, 255), (100, 300), (181, 181), (3, 7, 1500), (2, 16384), (16384, 2)]


@pytest.mark.parametrize("shape", AROUND_THE_CPUS_GRAIN, ids=lambda shape: "x".join(map(str, shape)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_sums_means_and_triangles_around_the_cpus_grain_are_bit_identical_to_the_cpu(shape, dtype):
    torch.sim.reset_direct_route_exits()
    x = operand(shape, dtype, 7)
    for dim in [None, *range(len(shape))]:
        assert_same_as_cpu(lambda t: t.sum() if dim is None else t.sum(dim), x, label=f"sum over {dim}")
        assert_same_as_cpu(lambda t: t.mean() if dim is None else t.mean(dim, keepdim=True), x, label=f"mean over {dim}")
    assert_same_as_cpu(lambda t: (t.tril(1), t.triu(-1)), x.reshape(shape[0], -1), label="tril and triu")
    assert torch.sim.direct_route_exits() == {}, "calls left the direct kernels for the boxed route"


# Matrix products (m, k, n) and softmaxes (shape, dim) within the calling thread's limit. Which of them the CPU computes
# with other bits on one intra-op thread depends on the processor and the BLAS it picks: (10, 32, 128) does on some of
# this project's machines, (1, 256, 1) and (16, 1000, 16) on others.
SMALL_MATRIX_PRODUCTS = [(10, 32, 128), (1, 256, 1), (1, 512, 8), (16, 1000, 16)]
SMALL_SOFTMAXES = [((120, 120), 0), ((127, 129), 0), ((1024, 16), 0)]


def bits_depend_on_the_thread_count(function: Callable, *args: torch.Tensor) -> bool:
    threads = torch.get_num_threads()
    on_default_threads = function(*args)
    torch.set_num_threads(1)
    try:
        on_one_thread = function(*args)
    finally:
        torch.set_num_threads(threads)
    return not torch.equal(on_default_threads, on_one_thread)


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="compares one intra-op thread with several; this process has one")
def test_matrix_products_and_softmaxes_stay_off_the_calling_thread_because_their_cpu_bits_depend_on_the_thread_count():
    """Why run_kernel's calling-thread route leaves them out: small as they are, the CPU computes some of them with
    other bits on one intra-op thread than on its default threads, and a kernel on the calling thread has one."""
    products = [(operand((m, k), torch.float32, 1), operand((k, n), torch.float32, 2))
                for m, k, n in SMALL_MATRIX_PRODUCTS]
    softmaxes = [(operand(shape, torch.float32, 3), dim) for shape, dim in SMALL_SOFTMAXES]
    assert any(bits_depend_on_the_thread_count(torch.mm, a, b) for a, b in products)
    assert any(bits_depend_on_the_thread_count(lambda t: torch.softmax(t, dim), x) for x, dim in softmaxes)
    for a, b in products:  # on the executor: the CPU's bits
        assert_same_as_cpu(lambda p, q: torch.mm(p, q), a, b, label="mm on sim")
    for x, dim in softmaxes:
        assert_same_as_cpu(lambda t: torch.softmax(t, dim), x, label="softmax on sim")


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
@pytest.mark.parametrize("out_layout", ["transposed", "sliced", "wrong shape", "empty"])
def test_where_writes_into_an_out_tensor_as_the_cpu_does(out_layout):
    a, b = operand((5, 7), torch.float32, 1), operand((5, 7), torch.float32, 2)
    out = {"transposed": operand((7, 5), torch.float32, 3).t(), "sliced": operand((5, 14), torch.float32, 3)[:, ::2],
           "wrong shape": operand((3, 3), torch.float32, 3), "empty": torch.empty(0)}[out_layout]

    def where_into(condition, x, y, into):
        return torch.where(condition, x, y, out=into)

    result = assert_same_as_cpu(where_into, a > 0, a, b, out)
    assert result.shape == (5, 7)


def test_channels_last_results_keep_the_cpus_strides():
    a, b = layout_operands("channels last", torch.float32)
    result = assert_same_as_cpu(lambda x, y: x * y, a, b)
    assert result.is_contiguous(memory_format=torch.channels_last) and not result.is_contiguous()


def test_in_place_on_a_transposed_view_updates_the_original_storage_as_on_the_cpu():
    x, y = operand((5, 7), torch.float32, 1), operand((7, 5), torch.float32, 2)
    before = x.clone()

    def transposed_add(base, other):
        return base.t().add_(other)

    assert_same_as_cpu(transposed_add, x, y)  # compares x afterwards too
    on_sim = x.to("sim")
    view = on_sim.t()
    assert view.add_(y.to("sim")).data_ptr() == on_sim.data_ptr()
    assert torch.equal(on_sim.cpu(), before + y.t())


def test_in_place_on_a_sliced_view_leaves_the_rest_of_the_storage_alone():
    def strided_mul(base, other):
        return base[:, ::2].mul_(other)

    x, y = operand((4, 10), torch.float32, 1), operand((4, 5), torch.float32, 2)
    assert_same_as_cpu(strided_mul, x, y)
    on_sim = x.to("sim")
    on_sim[:, ::2].mul_(y.to("sim"))
    assert torch.equal(on_sim[:, 1::2].cpu(), x[:, 1::2])


def test_launches_that_reuse_earlier_launches_handles_see_their_own_geometry_dtype_and_aliasing():
    """A launching thread reuses the tensor handles and byte storages of launches the device has run (a ring of
    256 of each): across several turns of the ring, every later launch computes with its own arguments."""
    cases = [
        (lambda a, b: a * b, operand((64, 64), torch.float32, 1), operand((64, 64), torch.float32, 2)),
        (lambda a, b: a.t() + b, operand((5, 7), torch.float64, 3), operand((7, 5), torch.float64, 4)),
        (lambda a: a[1:] * a[:-1], operand((9,), torch.int64, 5)),
        (lambda a: a[2:].add_(a[:2].sum()), operand((6,), torch.float16, 6)),
        (lambda a, b: a.conj() * b, operand((4, 3), torch.complex64, 7), operand((4, 3), torch.complex64, 8)),
        (lambda a, b: torch.where(a > 0, a, b), operand((3, 1, 5), torch.bfloat16, 9),
         operand((4, 5), torch.bfloat16, 10)),
    ]
    for turn in range(60):
        for index, (function, *args) in enumerate(cases):
            assert_same_as_cpu(function, *args, label=f"case {index}, turn {turn}")


# ---------------------------------------------------------------------------------------------- 5. devices
@pytest.mark.usefixtures("settled_memory")
@pytest.mark.parametrize("name", COVERED)
def test_a_direct_operator_on_sim1_allocates_its_result_there_and_nothing_else(name):
    a, b = operand((64, 64), torch.float32, 1).to("sim:1"), operand((64, 64), torch.float32, 2).to("sim:1")
    c = a > 0
    call = COVERAGE[name].call
    expected = call(a.cpu(), b.cpu(), c.cpu())
    on_zero, on_one = torch.sim.memory_allocated(0), torch.sim.memory_allocated(1)
    torch.sim.reset_direct_route_exits()
    result = call(a, b, c)
    assert torch.sim.direct_route_exits() == {}, "the call on sim:1 took the boxed route"
    assert result.device == torch.device("sim:1")
    assert torch.sim.memory_allocated(0) == on_zero, "a kernel on sim:1 allocated on sim:0"
    grown = torch.sim.memory_allocated(1) - on_one
    if result.untyped_storage().data_ptr() == a.untyped_storage().data_ptr():
        assert grown == 0, f"{name} in place left {grown} bytes allocated"
    else:
        before_twin = torch.sim.memory_allocated(1)
        twin = torch.empty(result.untyped_storage().nbytes(), dtype=torch.uint8, device="sim:1")
        result_bytes = torch.sim.memory_allocated(1) - before_twin  # what the allocator books for the result alone
        del twin
        assert grown == result_bytes, f"{name} left {grown} bytes allocated on sim:1 for a result of {result_bytes}"
    assert_bit_identical(result, expected, name)


BINARY = [name for name in COVERED if COVERAGE[name].binary]


@pytest.mark.parametrize("name", BINARY)
def test_operands_on_two_sim_devices_raise(name):
    a, b = operand((3, 4), torch.float32, 1).to("sim:0"), operand((3, 4), torch.float32, 2).to("sim:1")
    with pytest.raises(RuntimeError, match="sim:0") as caught:
        COVERAGE[name].call(a, b, a > 0)
    assert "sim:1" in str(caught.value)


def test_a_0dim_operand_on_another_sim_device_raises():
    a, b = operand((3, 4), torch.float32, 1).to("sim:0"), operand((), torch.float32, 2).to("sim:1")
    with pytest.raises(RuntimeError, match="sim:1"):
        a * b
    with pytest.raises(RuntimeError, match="sim:1"):
        a.add_(b)


def test_a_direct_operator_leaves_the_current_device_as_it_was():
    a, b = operand((3, 4), torch.float32, 1).to("sim:0"), operand((3, 4), torch.float32, 2).to("sim:0")
    torch.sim.set_device(1)
    result = a * b
    assert result.device == torch.device("sim:0")
    assert torch.sim.current_device() == 1
    assert torch.equal(result.cpu(), a.cpu() * b.cpu())


@pytest.mark.parametrize("name", BINARY)
def test_an_operand_on_the_cpu_with_dimensions_raises_naming_both_devices(name):
    a, b = operand((3, 4), torch.float32, 1).to("sim"), operand((3, 4), torch.float32, 2)
    for first, second in ((a, b),) if name in IN_PLACE else ((a, b), (b, a)):
        with pytest.raises(RuntimeError) as caught:
            COVERAGE[name].call(first, second, a > 0)
        message = str(caught.value)
        assert "sim:0" in message and "cpu" in message, message


# ---------------------------------------------------------------------------------------------- 7. profiler
SIM_ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def sim_kernel_names(prof) -> list[str]:
    """sim's kernels in the profile: its device activity but for the driver's copies (a call's classes, copied in)."""
    return [event.name for event in prof.events()
            if event.device_type == DeviceType.PrivateUse1 and not event.name.startswith(COPY_PREFIXES)]


def test_a_direct_mul_records_one_sim_kernel_per_call_linked_to_its_operator():
    a, b = operand((32, 32), torch.float32, 1).to("sim"), operand((32, 32), torch.float32, 2).to("sim")
    with profile(activities=SIM_ACTIVITIES) as prof:
        for _ in range(3):
            a * b
    assert sim_kernel_names(prof) == ["sim::mul.Tensor"] * 3
    operators = [event for event in prof.events() if event.name == "aten::mul"]
    assert len(operators) == 3
    assert all([kernel.name for kernel in event.kernels] == ["sim::mul.Tensor"] for event in operators)


# relu is clamp_min(self, 0) on every device: its kernel is the one of the operator it calls (DirectComposite)
LAUNCHED_BY_THE_OPERATOR_CALLED = {"relu": "clamp_min", "relu_": "clamp_min_", "zero_": "fill_.Scalar"}


@pytest.mark.parametrize("name", COVERED)
def test_every_direct_operator_records_exactly_one_kernel_per_call(name):
    a, b = operand((8, 8), torch.float32, 1).to("sim"), operand((8, 8), torch.float32, 2).to("sim")
    c, call = a > 0, COVERAGE[name].call
    with profile(activities=SIM_ACTIVITIES) as prof:
        call(a, b, c)
        call(a, b, c)
    launcher = LAUNCHED_BY_THE_OPERATOR_CALLED.get(name, name)
    operators = [event for event in prof.events() if event.name == "aten::" + launcher.split(".")[0]]
    assert [[kernel.name for kernel in event.kernels] for event in operators] == [[f"sim::{launcher}"]] * 2
    names = sim_kernel_names(prof)
    assert names == [f"sim::{launcher}"] * 2, f"two calls of {name} recorded the kernels {names}"


def test_where_with_a_python_scalar_records_one_kernel_per_call():
    a = operand((16, 16), torch.float32, 1).to("sim")
    condition = a > 0
    with profile(activities=SIM_ACTIVITIES) as prof:
        torch.where(condition, a, 0.0)  # where.ScalarOther fills a 0-dim sim tensor, then calls where.self
        torch.where(condition, a, 0.0)
    assert sim_kernel_names(prof) == ["sim::fill_.Scalar", "sim::where.self"] * 2


# ----------------------------------------------------------------------------------------- 8. out of memory
@pytest.mark.usefixtures("settled_memory", "small_device_one")
@pytest.mark.parametrize("call", [lambda a, b: a * b, lambda a, b: a + b, lambda a, b: a > b,
                                  lambda a, b: a.sum(0, keepdim=True).expand_as(a) + b,
                                  lambda a, b: torch.where(a[0, 0] > 0, a, b), lambda a, b: a.relu()],
                         ids=["mul", "add", "gt", "sum then add", "where", "relu"])
def test_out_of_memory_inside_a_direct_kernel_names_sim1_and_leaks_nothing(call):
    a = torch.ones(120_000, device="sim:1").view(1000, 120)  # 480 kB each; 88 kB of 1 MiB are left
    b = torch.full((1000, 120), 2.0, device="sim:1")
    baseline = torch.sim.memory_allocated(1)
    with pytest.raises(torch.OutOfMemoryError) as caught:
        call(a, b)
    message = str(caught.value).strip()
    assert "sim:1" in message and "\n" not in message, message
    del caught
    assert torch.sim.memory_allocated(1) == baseline
    assert torch.sim.current_device() == 0
    assert torch.equal((a[:2] * b[:2]).cpu(), torch.full((2, 120), 2.0))


@pytest.mark.parametrize("exponent", [0, 1, 0.0, 1.0, False, True, 2, 3.0])
def test_a_power_is_computed_in_the_streams_order_behind_a_busy_device(exponent):
    """pow fills or copies for an exponent of 0 or 1 instead of running its loop: queued behind a sleeping device
    with the operators that read its result, every exponent gives the CPU's bits once the device has run it all, and
    the call takes the direct route (no boxed route, no fallback)."""
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    expected = (x * 1.5).pow(exponent) * 2.0
    on_sim = x.to("sim")
    torch.sim.reset_direct_route_exits()
    torch.sim.reset_fallback_counts()
    results = [(on_sim * 1.5).pow(exponent) * 2.0]  # the first launch of a kernel's kind waits for it
    for _ in range(2):
        sleep = torch.sim.device_sleep(20_000)
        results.append((on_sim * 1.5).pow(exponent) * 2.0)
        pending = not torch.sim.current_stream().query()
        sleep.wake()
        assert pending, "the work ran before the sleep queued ahead of it had ended"
    assert torch.sim.direct_route_exits() == {} and torch.sim.fallback_counts() == {}
    for got in results:
        assert got.dtype == expected.dtype and torch.equal(got.cpu(), expected)


POWERS = {"square": torch.square, "pow 2": lambda t: t.pow(2), "pow 3.0": lambda t: t.pow(3.0),
          "pow 1": lambda t: t.pow(1), "pow 0 times t": lambda t: t.pow(0) * t}


@pytest.mark.parametrize("power", list(POWERS))
def test_the_gradient_of_a_power_is_the_cpus_at_every_call(power):
    """A power's backward takes pow again with the exponent less one (`square`'s: pow 1, which copies), on
    autograd's device thread, where the kernels of the forward may still be queued: twenty calls in a row each
    give the CPU's gradient."""
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))

    def gradient(device: str) -> torch.Tensor:
        t = x.to(device).detach().requires_grad_()
        POWERS[power](t * 1.5).sum().backward()
        return t.grad.cpu()

    expected = gradient("cpu")
    mismatches = [call for call in range(20) if not torch.equal(gradient("sim"), expected)]
    assert not mismatches, f"calls {mismatches} of 20 gave another gradient than the CPU's"


def test_gradients_through_direct_operators_are_bit_identical_to_the_cpu():
    def gradients(device: str) -> list[torch.Tensor]:
        x = operand((6, 9), torch.float32, 1).to(device).requires_grad_()
        w = operand((6, 9), torch.float32, 2).to(device).requires_grad_()
        loss = (torch.tanh(x * w).relu() + torch.sigmoid(x - w) / 3).clamp_min(0.1).sum(1).mean()
        loss.backward()
        return [loss.detach(), x.grad, w.grad]

    assert_bit_identical(gradients("sim"), gradients("cpu"), "loss and gradients")


# ----------------------------------------------------------------------------------------- 9. graph capture
def captured(work: Callable[[], torch.Tensor]) -> tuple[torch.accelerator.Graph, torch.Tensor]:
    """Capture `work()` on a new side stream of sim:0; returns the graph and the tensor it fills at replay."""
    graph = torch.accelerator.Graph()
    with torch.Stream(device="sim"), graph:
        result = work()
    return graph, result


def test_a_captured_mul_then_add_replays_to_the_bits_of_eager():
    a, b, c = (operand((33, 17), dtype, seed).to("sim") for dtype, seed in
               ((torch.float32, 1), (torch.float32, 2), (torch.float32, 3)))
    eager = (a * b).add_(c)
    graph, result = captured(lambda: (a * b).add_(c))
    graph.replay()
    assert_bit_identical(result, eager.cpu(), "replayed (a * b).add_(c)")
    a.copy_(operand((33, 17), torch.float32, 4).to("sim"))
    graph.replay()
    assert_bit_identical(result, (a.cpu() * b.cpu()).add_(c.cpu()), "replayed with new inputs")


def test_a_captured_chain_of_direct_operators_replays_to_the_bits_of_eager():
    def chain(x, y):
        return torch.sigmoid(x * y).sub_(x.clamp_min(0.0)).sum(1) / y.amax(1)

    x, y = operand((40, 24), torch.float16, 1).to("sim"), operand((40, 24), torch.float16, 2).to("sim")
    graph, result = captured(lambda: chain(x, y))
    graph.replay()
    assert_bit_identical(result, chain(x.cpu(), y.cpu()), "replayed chain")
    assert_bit_identical(result, chain(x, y).cpu(), "replayed chain against eager sim")


def test_a_direct_operator_on_another_device_runs_at_once_during_a_capture():
    x0, x1 = torch.ones(4, device="sim:0"), torch.full((4,), 3.0, device="sim:1")
    graph = torch.accelerator.Graph()
    with torch.Stream(device="sim:0"), graph:
        doubled = x0 * 2
        squared = x1 * x1  # sim:1's stream is not capturing
        assert squared.cpu().tolist() == [9.0] * 4
    x1.fill_(5.0)
    graph.replay()
    assert doubled.cpu().tolist() == [2.0] * 4 and squared.cpu().tolist() == [9.0] * 4


@pytest.mark.parametrize("name", COVERED)
def test_every_direct_operator_replays_to_the_bits_of_eager(name):
    call = COVERAGE[name].call
    a, b = operand((16, 24), torch.float32, 1), operand((16, 24), torch.float32, 2)
    eager_self = a.to("sim")
    eager = call(eager_self, b.to("sim"), (a > 0).to("sim"))
    graph_self, graph_other, graph_condition = a.to("sim"), b.to("sim"), (a > 0).to("sim")
    graph, result = captured(lambda: call(graph_self, graph_other, graph_condition))
    graph.replay()
    assert_bit_identical(result, eager.cpu(), f"replayed {name}")
    assert_bit_identical(graph_self, eager_self.cpu(), f"the first operand after replaying {name}")


ARANGES = {  # start, end, step, dtype
    "integers": (3, 17, 2, torch.int64),
    "a float step": (0, 1, 0.1, torch.float32),
    "downwards in double": (5, -3, -0.7, torch.float64),
    "half": (0, 300, 1, torch.float16),
    "bfloat16 from a float start": (1.5, 9.2, 0.3, torch.bfloat16),
    "int32 from float bounds": (0.5, 20.5, 3, torch.int32),
    "empty": (4, 4, 1, torch.float32),
}
ARANGE_OUTPUTS = {  # what arange writes into: resized only where its number of elements differs, as on the CPU
    "empty": lambda dtype: torch.empty(0, dtype=dtype),
    "2-D": lambda dtype: torch.zeros(2, 7, dtype=dtype),  # the integers' 7 elements: it keeps its shape
    "transposed": lambda dtype: torch.zeros(7, 2, dtype=dtype).t(),
    "longer": lambda dtype: torch.zeros(40, dtype=dtype),
}


def warnings_of(call: Callable[[], Any]) -> list[str]:
    """The messages of the warnings `call()` raises, each once."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return sorted({str(warning.message) for warning in caught})


@pytest.mark.parametrize("output", ARANGE_OUTPUTS)
@pytest.mark.parametrize("case", ARANGES)
def test_arange_fills_its_output_with_the_cpus_values_on_the_device(case, output):
    """Into an output with elements of another number, the CPU resizes it and warns: that call takes the boxed route,
    which warns as the CPU does; every other call stays on the direct kernel."""
    start, end, step, dtype = ARANGES[case]

    def arange_into(out: torch.Tensor) -> torch.Tensor:
        return torch.arange(start, end, step, out=out)

    make = ARANGE_OUTPUTS[output]
    cpu_warnings = warnings_of(lambda: arange_into(make(dtype)))
    torch.sim.reset_direct_route_exits()
    assert warnings_of(lambda: arange_into(make(dtype).to("sim"))) == cpu_warnings
    resized_with_a_warning = bool(cpu_warnings)
    assert torch.sim.direct_route_exits() == ({"aten::arange.start_out": 1} if resized_with_a_warning else {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = assert_same_as_cpu(arange_into, make(dtype), label=f"arange {case} into {output}")
    assert result.device.type == "sim"


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="during a graph capture sim learns what a kernel does to its out= tensor from "
                   "PyTorch's Meta kernel, and arange's resizes an out= tensor of the range's length to one dimension, "
                   "where the CPU's keeps its shape")
def test_a_captured_arange_keeps_the_shape_of_an_out_tensor_of_the_ranges_length():
    out = torch.zeros(2, 7, device="sim")
    graph, result = captured(lambda: torch.arange(0, 14, 1, out=out))
    graph.replay()
    assert result.shape == torch.arange(0, 14, 1, out=torch.zeros(2, 7)).shape == (2, 7)


INDEX_CALLS = {  # each with the CPU's reason for an index out of range
    "index_select": (lambda weight, indices: weight.index_select(0, indices), "index out of range"),
    "gather": (lambda weight, indices: torch.gather(weight, 0, indices.unsqueeze(1).expand(2, 3)),
               "index 7 is out of bounds for dimension 0 with size 5"),
}


@pytest.mark.parametrize("operator", INDEX_CALLS)
def test_an_index_out_of_range_is_the_devices_error_raised_by_the_next_synchronising_call(operator):
    """index_select and gather read their indices on the device, as CUDA's do: the call returns, and the device's
    error names the kernel and the CPU's reason; the device then runs work again."""
    call, reason = INDEX_CALLS[operator]
    weight = torch.ones(5, 3, device="sim")
    indices = torch.tensor([1, 7], device="sim")
    call(weight, indices)
    with pytest.raises(RuntimeError, match=rf"the kernel 'sim::{operator}' failed on sim:0 .*{reason}"):
        torch.sim.synchronize()
    assert torch.equal(call(weight, indices.clamp(max=4)).cpu(), torch.ones(2, 3))
