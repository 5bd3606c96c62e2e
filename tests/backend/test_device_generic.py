"""Device-generic tests: PyTorch's OpInfo database run on `sim` against the CPU.

For every float32 OpInfo, each of its sample inputs (made on sim, the way PyTorch's
own device-generic tests make them) runs once on sim and once on CPU copies of the
same inputs (same storage, strides and offset). The outputs must agree, must be on
the sim device the inputs were on, and the inputs must agree afterwards too (in
case the op wrote into them). The tolerance is the one PyTorch's test_ops
`test_compare_cpu` uses for an accelerator against the CPU (atol = rtol = 1e-3,
NaN equal to NaN, exact dtypes). sim runs the host kernels themselves, so nearly
every op agrees bit for bit; the few that do not (addr, group_norm,
scaled_dot_product_attention, silu) differ by an ulp or two because sim takes
PyTorch's composite decomposition, or its own autograd kernel, where the CPU has a
fused kernel. Both runs start from the same seed: sim's device generator draws the
same stream as the CPU generator, so random ops are compared by value too.

Which OpInfos run:
- by default, the fixed subset `DEFAULT_SUBSET` below (about 130 common ops:
  element-wise, reductions, linear algebra basics, nn.functional, indexing, views,
  random);
- every float32 OpInfo when SIM_FULL_OPINFO=1 (`make test-full`), and in the report
  (`python -m tests.backend.device_generic_report`).
The selection is the op list given to `@ops`, so the default run has no skips for
the ops it leaves out. SIM_OPINFO_DEVICE=sim:1 makes the samples on sim:1 while
sim:0 stays the current device.

The backend's gap, every skip and expected failure with its reason, is in ONE place:
tests/backend/device_generic_gaps.py. The decorators that PyTorch's OpInfo entries
carry for its own test classes (CUDA tolerances, skips of tests in test_ops.py) do
not apply here: each OpInfo runs with its decorators stripped, so nothing outside
that file skips or expects a failure.
"""
from __future__ import annotations

import copy
import os
import unittest

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, suppress_warnings
from torch.testing._internal.opinfo.core import DecorateInfo
from torch.utils import _pytree as pytree

from tests.backend.device_generic_gaps import GAPS, SHAPES_ONLY, is_skip

FULL_SWEEP = os.environ.get("SIM_FULL_OPINFO") == "1"
# The samples go to the current sim device unless SIM_OPINFO_DEVICE names another
# (e.g. sim:1, to run everything away from the current device).
DEVICE = os.environ.get("SIM_OPINFO_DEVICE") or None
SEED = 1234
ATOL = RTOL = 1e-3  # test_ops.py test_compare_cpu

# The default subset: OpInfo full names, grouped by kind. Every name must exist in
# op_db and support float32 (a test below checks it).
DEFAULT_SUBSET: tuple[str, ...] = (
    # element-wise, unary
    "abs", "neg", "exp", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "erf",
    "floor", "round", "sign", "reciprocal", "nan_to_num", "clamp", "special.erfcx",
    # element-wise, binary and ternary
    "add", "sub", "mul", "div.no_rounding_mode", "div.floor_rounding", "pow", "maximum", "minimum",
    "fmod", "remainder", "atan2", "eq", "lt", "ge", "where", "lerp", "addcmul", "addcdiv", "logaddexp",
    "isclose",
    # reductions and scans
    "sum", "mean", "prod", "amax", "amin", "max.reduction_with_dim", "argmax", "std", "var", "norm",
    "logsumexp", "cumsum", "sort", "topk", "median", "all", "any", "count_nonzero",
    # linear algebra
    "mm", "bmm", "matmul", "addmm", "addmv", "baddbmm", "einsum", "linalg.vector_norm", "linalg.inv",
    "linalg.solve", "linalg.qr", "linalg.cholesky", "tensordot", "outer",
    # nn.functional
    "nn.functional.linear", "nn.functional.conv2d", "nn.functional.conv1d", "nn.functional.relu",
    "nn.functional.gelu", "nn.functional.silu", "softmax", "log_softmax",
    "nn.functional.layer_norm", "nn.functional.batch_norm", "nn.functional.group_norm",
    "nn.functional.embedding", "nn.functional.dropout", "nn.functional.cross_entropy",
    "nn.functional.nll_loss", "nn.functional.mse_loss", "nn.functional.max_pool2d",
    "nn.functional.avg_pool2d", "nn.functional.adaptive_avg_pool2d", "nn.functional.interpolate.bilinear",
    "nn.functional.pad.constant", "nn.functional.scaled_dot_product_attention",
    # indexing, scatter/gather, masking
    "index_select", "gather", "scatter", "scatter_add", "index_add", "index_put", "masked_fill",
    "masked_select", "take_along_dim", "__getitem__", "nonzero", "tril",
    # views, shapes and creation
    "view", "reshape", "permute", "transpose", "expand", "squeeze", "unsqueeze", "flatten", "narrow",
    "cat", "stack", "split", "chunk", "flip", "roll", "repeat", "contiguous", "as_strided", "unfold",
    "zeros_like", "full_like", "arange", "linspace", "clone",
    # random
    "bernoulli", "normal", "randn_like",
)


def _is_float32_op(op) -> bool:
    return torch.float32 in op.supported_dtypes("cpu")


def _with_gap(op):
    """A copy of `op` with PyTorch's own decorators stripped and our gap (if any) applied."""
    op = copy.copy(op)
    op.decorators = ()
    op.skips = ()
    reason = GAPS.get(op.full_name)
    if reason is not None:
        if is_skip(reason):
            decorator = unittest.skip(reason)
        else:
            decorator = unittest.expectedFailure
        op.decorators = (DecorateInfo(decorator, "TestSimOpInfo", "test_matches_cpu"),)
    return op


def selected_ops(full: bool = FULL_SWEEP) -> list:
    chosen = [op for op in op_db if _is_float32_op(op)]
    if not full:
        wanted = set(DEFAULT_SUBSET)
        chosen = [op for op in chosen if op.full_name in wanted]
    return [_with_gap(op) for op in chosen]


def _to_cpu(value):
    """A CPU copy of a sim tensor with the same storage, sizes, strides and storage offset.

    Copying the whole storage (not just the elements in view) keeps what a view can
    reach: `as_strided` on a partial view reads elements outside it.
    """
    if not isinstance(value, torch.Tensor) or value.device.type != "sim":
        return value
    value = value.detach()
    if value.layout != torch.strided:
        return value.to("cpu")
    elements = value.untyped_storage().nbytes() // value.element_size()
    whole = value.as_strided((elements,), (1,), 0).to("cpu")
    return whole.as_strided(value.shape, value.stride(), value.storage_offset())


def _device_to_cpu(value):
    """Factory-style samples name the device in their arguments: the CPU run gets "cpu" there."""
    if isinstance(value, torch.device) and value.type == "sim":
        return torch.device("cpu")
    if isinstance(value, str) and (value == "sim" or value.startswith("sim:")):
        return "cpu"
    return value


def cpu_copy(sample):
    """The sample with every sim tensor copied to the CPU and every sim device replaced by the CPU."""
    copied = sample.transform(_to_cpu)
    copied.input, copied.args, copied.kwargs = pytree.tree_map(
        _device_to_cpu, (copied.input, copied.args, copied.kwargs))
    return copied


def _same_plain_value(a, e) -> bool:
    if isinstance(a, float) and isinstance(e, float) and a != a and e != e:
        return True  # NaN
    return type(a) is type(e) and a == e


def _output_device(sample) -> torch.device | None:
    """The device the outputs must be on: that of the sample's sim tensors, unless an argument asks for the CPU."""
    leaves = pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
    if any(isinstance(v, (torch.device, str)) and str(v) == "cpu" for v in leaves):
        return None
    return next((v.device for v in leaves if isinstance(v, torch.Tensor) and v.device.type == "sim"), None)


def _compare(actual, expected, what: str, values: bool = True, device: torch.device | None = None) -> None:
    """`actual` from the sim run against `expected` from the CPU run, leaf by leaf.

    values: compare tensor values (else only shapes and dtypes); device: where every
    tensor of `actual` must be (None: anywhere).
    """
    actual_leaves, actual_spec = pytree.tree_flatten(actual)
    expected_leaves, expected_spec = pytree.tree_flatten(expected)
    if actual_spec != expected_spec:
        raise AssertionError(f"{what}: sim returned {actual_spec}, CPU {expected_spec}")
    for index, (a, e) in enumerate(zip(actual_leaves, expected_leaves)):
        where = f"{what}, value {index}"
        if not isinstance(e, torch.Tensor):
            if not _same_plain_value(a, e):
                raise AssertionError(f"{where}: sim gave {a!r}, CPU {e!r}")
            continue
        if not isinstance(a, torch.Tensor):
            raise AssertionError(f"{where}: sim gave a {type(a).__name__}, CPU a tensor")
        if device is not None and a.device != device:
            raise AssertionError(f"{where}: the sim run gave a tensor on {a.device}, expected {device}")
        a = a.detach().to("cpu")
        if values:
            torch.testing.assert_close(a, e.detach(), atol=ATOL, rtol=RTOL, equal_nan=True,
                                       msg=lambda m: f"{where}: {m}")
        elif (a.shape, a.dtype) != (e.shape, e.dtype):
            raise AssertionError(f"{where}: sim gave {tuple(a.shape)} {a.dtype}, CPU {tuple(e.shape)} {e.dtype}")


def _tensors_of(sample) -> list[torch.Tensor]:
    leaves = pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


def _run(op, sample):
    torch.manual_seed(SEED)
    result = op(sample.input, *sample.args, **sample.kwargs)
    return sample.output_process_fn_grad(result)


def compare_op_with_cpu(test: unittest.TestCase, device: str, dtype: torch.dtype, op) -> int:
    """Runs every sample input of `op` on `device` and on CPU copies; returns the number of samples."""
    values = op.full_name not in SHAPES_ONLY
    count = 0
    for index, sample in enumerate(op.sample_inputs(device, dtype)):
        cpu_sample = cpu_copy(sample)
        what = f"{op.full_name} sample {index} ({sample.name or 'unnamed'})"
        sim_result = _run(op, sample)
        cpu_result = _run(op, cpu_sample)
        _compare(sim_result, cpu_result, f"{what} output", values, device=_output_device(sample))
        # The inputs afterwards, in case the op wrote into them.
        _compare(_tensors_of(sample), _tensors_of(cpu_sample), f"{what} inputs", values)
        count += 1
    test.assertGreater(count, 0, f"{op.full_name} has no float32 sample inputs")
    return count


class TestSimOpInfo(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        torch.sim.set_fallback_policy("silent")

    @suppress_warnings
    @ops(selected_ops(), allowed_dtypes=(torch.float32,))
    def test_matches_cpu(self, device, dtype, op):
        compare_op_with_cpu(self, DEVICE or device, dtype, op)


instantiate_device_type_tests(TestSimOpInfo, globals(), only_for="sim")


def test_default_subset_names_are_float32_opinfos():
    known = {op.full_name for op in op_db if _is_float32_op(op)}
    assert [name for name in DEFAULT_SUBSET if name not in known] == []
    assert len(set(DEFAULT_SUBSET)) == len(DEFAULT_SUBSET)


def test_every_gap_names_a_float32_opinfo():
    known = {op.full_name for op in op_db if _is_float32_op(op)}
    assert sorted(set(GAPS) - known) == [] and sorted(set(SHAPES_ONLY) - known) == []
    assert set(GAPS).isdisjoint(SHAPES_ONLY)
    assert all(reason.strip() and "\n" not in reason for reason in (*GAPS.values(), *SHAPES_ONLY.values()))
