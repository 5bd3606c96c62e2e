"""PyTorch's device-generic OpInfo tests on sim, made the way a vendor's backend makes them.

The module has the shape of the one `pu1-explorer new` generates (a backend's tests/test_device_generic.py): a generic
class named after test/test_ops.py's, `TestCommon`, whose `@ops` tests `instantiate_device_type_tests` turns into
`TestCommonSIM` for sim. Which OpInfos get tests, and which tests are skipped, expected to fail or compared at
a tolerance, come from a `device_tests.json` that `pu1_explorer.conformance.device_tests.configure` sets on torch's
PrivateUse1TestBase before the tests are made: sim's own, `torch_sim/device_tests.json`, which lists sim's known gaps,
each with its reason. An expected failure that starts passing reports an unexpected success: then its entry must go.
`pytest examples/device_generic/test_sim_opinfo.py` runs it; tests/backend/test_device_generic.py runs it in the
project's test suite.

The default run narrows the file's op_allowlist to `DEFAULT_SUBSET` (about 130 common OpInfos); SIM_FULL_OPINFO=1
(`make test-full`) keeps the file's, every OpInfo.

sim runs the host's kernels on device memory, so its tests are stricter than the template's: wherever the CPU is
deterministic, sim's results must be the CPU's bit for bit (the test's `precision` and `rel_tol`, zero unless the
configuration sets a tolerance):

- test_compare_cpu: every sample input, made on sim the way PyTorch's tests make them, runs on sim and on CPU copies
  of the same inputs (same storage, strides and offset) in each of seven dtypes the OpInfo supports; the outputs,
  and the inputs afterwards, must be equal (NaN equal to NaN, same dtypes) and the outputs on the sample's device;
- test_compare_cpu_backward (float64, OpInfos that support autograd): the gradients of every sample for the same
  random output gradients;
- test_errors: every bad input the CPU refuses, sim refuses with the error the OpInfo names (and accepts what the
  CPU accepts);
- test_multiple_devices: an operator computes on the second device and its result stays there.

Both runs of a sample start from the same seed: sim's device generator draws the same stream as the CPU's, so random
ops are compared by value too. The decorators PyTorch's OpInfo entries carry for its own test classes (CUDA
tolerances, skips) are stripped, so that every exclusion is one sim's configuration lists.
"""
from __future__ import annotations

import copy
import hashlib
import importlib.resources
import json
import os
import random
import re

import numpy
import torch
from torch.testing._internal.common_device_type import (
    OpDTypes, PrivateUse1TestBase, instantiate_device_type_tests, ops,
)
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, suppress_warnings
from torch.utils import _pytree as pytree

from pu1_explorer.conformance.device_tests import configure

DEVICE = "sim"
SIM_DEVICE_TESTS = importlib.resources.files("torch_sim") / "device_tests.json"
FULL_SWEEP = os.environ.get("SIM_FULL_OPINFO") == "1"
SEED = 1234
FORWARD_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.bool,
                  torch.complex64)
BACKWARD_DTYPE = torch.float64
TESTS = ("test_compare_cpu", "test_compare_cpu_backward", "test_errors", "test_multiple_devices")

# The default run's op_allowlist: OpInfo full names, grouped by kind.
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
    "linalg.solve", "linalg.qr", "linalg.cholesky", "linalg.lstsq", "tensordot", "outer", "addr",
    # nn.functional
    "nn.functional.linear", "nn.functional.conv2d", "nn.functional.conv1d", "nn.functional.relu",
    "nn.functional.gelu", "nn.functional.silu", "nn.functional.mish", "softmax", "log_softmax",
    "nn.functional.layer_norm", "nn.functional.batch_norm", "nn.functional.group_norm",
    "nn.functional.embedding", "nn.functional.dropout", "nn.functional.cross_entropy",
    "nn.functional.linear_cross_entropy.chunked",
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


def sim_device_tests(full: bool = FULL_SWEEP) -> dict:
    """sim's configuration, its op_allowlist narrowed to `DEFAULT_SUBSET` unless `full`."""
    data = json.loads(SIM_DEVICE_TESTS.read_text())
    if not full:
        allowed = data["op_allowlist"]
        data["op_allowlist"] = [name for name in DEFAULT_SUBSET if allowed is None or name in allowed]
    return data


configure(sim_device_tests())  # before instantiate_device_type_tests, which reads it


def allowed(op) -> bool:
    """Whether the configuration lets `op` have tests (torch applies the same allowlist when it makes them)."""
    return PrivateUse1TestBase.op_allowlist is None or op.full_name in PrivateUse1TestBase.op_allowlist


def without_pytorchs_decorators(op):
    """A copy of an OpInfo without the skips, expected failures and tolerances PyTorch declares for its own tests."""
    op = copy.copy(op)
    op.decorators, op.skips = (), ()
    return op


def lists_error_inputs(op) -> bool:
    """Whether `op` lists a bad input for sim: some list them for CUDA only, and a test with nothing to compare is
    not made."""
    try:  # the OpInfo's generator itself: error_inputs() would also seed from the calling test, found by a stack walk
        return next(iter(op.error_inputs_func(op, DEVICE)), None) is not None
    except Exception:  # noqa: BLE001 - the test made for the op reports the error
        return True


def _supports_any(op, dtypes) -> bool:
    return bool(set(dtypes) & set(op.supported_dtypes("cpu")))


FORWARD_OPS = [without_pytorchs_decorators(op) for op in op_db if _supports_any(op, FORWARD_DTYPES)]
BACKWARD_OPS = [without_pytorchs_decorators(op) for op in op_db
                if op.supports_autograd and _supports_any(op, (BACKWARD_DTYPE,))]
# the allowlist first: making every OpInfo's bad inputs takes seconds
ERROR_OPS = [without_pytorchs_decorators(op) for op in op_db
             if op.error_inputs_func is not None and allowed(op) and lists_error_inputs(op)]


def _to_cpu(value):
    """A CPU copy of a sim tensor with the same storage, sizes, strides, storage offset and requires_grad.

    Copying the whole storage (not just the elements in view) keeps what a view can reach: `as_strided` on a
    partial view reads elements outside it.
    """
    if not isinstance(value, torch.Tensor) or value.device.type != DEVICE:
        return value
    requires_grad = value.requires_grad
    value = value.detach()
    if value.layout != torch.strided:
        return value.to("cpu").requires_grad_(requires_grad)
    elements = value.untyped_storage().nbytes() // value.element_size()
    whole = value.as_strided((elements,), (1,), 0).to("cpu")
    return whole.as_strided(value.shape, value.stride(), value.storage_offset()).requires_grad_(requires_grad)


def _device_to_cpu(value):
    """Factory-style samples name the device in their arguments: the CPU run gets "cpu" there."""
    if isinstance(value, torch.device) and value.type == DEVICE:
        return torch.device("cpu")
    if isinstance(value, str) and (value == DEVICE or value.startswith(f"{DEVICE}:")):
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
    return next((v.device for v in leaves if isinstance(v, torch.Tensor) and v.device.type == DEVICE), None)


def compare(actual, expected, what: str, atol: float = 0.0, rtol: float = 0.0,
            device: torch.device | None = None) -> None:
    """`actual` from the sim run against `expected` from the CPU run, leaf by leaf, at a tolerance (zero: bit for
    bit); device: where every tensor of `actual` must be (None: anywhere)."""
    actual_leaves, actual_spec = pytree.tree_flatten(actual)
    expected_leaves, expected_spec = pytree.tree_flatten(expected)
    if actual_spec != expected_spec:
        raise AssertionError(f"{what}: sim returned {actual_spec}, CPU {expected_spec}")
    exactness = "bit for bit" if atol == rtol == 0 else f"atol {atol:g}, rtol {rtol:g}"
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
        torch.testing.assert_close(a.detach().to("cpu"), e.detach(), atol=atol, rtol=rtol, equal_nan=True,
                                   msg=lambda m: f"{where} ({exactness}): {m}")


def _tensors_of(sample) -> list[torch.Tensor]:
    leaves = pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


def _seed(seed: int) -> None:
    """Seeds the two generators a comparison draws from, the CPU's and the device's. (torch.manual_seed would also
    queue a seed, with a captured call stack, for each other accelerator PyTorch knows: most of this module's time.)"""
    torch.default_generator.manual_seed(seed)
    torch.get_device_module(DEVICE).manual_seed_all(seed)


def _samples(op, device: str, dtype: torch.dtype, **kwargs):
    """`op`'s sample inputs, each made right after seeding what sample makers draw from (the CPU's and the device's
    generators, Python's and NumPy's) with the seed PyTorch's own sample iterator takes for the test: the same samples
    as PyTorch's tests. That iterator seeds through torch.manual_seed, whose captured stacks took a quarter of this
    module's time, so it is asked not to (`set_seed=False`)."""
    samples = op.sample_inputs(device, dtype, set_seed=False, **kwargs)
    test = samples.test_fn  # the test whose name PyTorch's iterator seeds from, found on the stack
    seed = SEED if test is None else int.from_bytes(hashlib.sha256(test.__qualname__.encode()).digest()[:4], "little")
    while True:
        _seed(seed)
        random.seed(seed)
        numpy.random.seed(seed)
        sample = next(samples, None)
        if sample is None:
            return
        yield sample


def _run(op, sample):
    _seed(SEED)
    result = op(sample.input, *sample.args, **sample.kwargs)
    return sample.output_process_fn_grad(result)


def compare_forward(test: TestCase, device: str, dtype: torch.dtype, op) -> int:
    """Runs every sample input of `op` on `device` and on CPU copies at the test's tolerance; returns how many."""
    count = 0
    for index, sample in enumerate(_samples(op, device, dtype)):
        cpu_sample = cpu_copy(sample)
        what = f"{op.full_name} {dtype} sample {index} ({sample.name or 'unnamed'})"
        sim_result = _run(op, sample)
        cpu_result = _run(op, cpu_sample)
        compare(sim_result, cpu_result, f"{what} output", test.precision, test.rel_tol, _output_device(sample))
        compare(_tensors_of(sample), _tensors_of(cpu_sample), f"{what} inputs", test.precision, test.rel_tol)
        count += 1
    test.assertGreater(count, 0, f"{op.full_name} has no {dtype} sample inputs")
    return count


def _output_gradients(outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Random gradients for `outputs`, drawn on the CPU from a fixed seed so both runs get the same ones."""
    generator = torch.Generator().manual_seed(SEED + 1)
    return [torch.randn(o.shape, dtype=o.dtype, generator=generator).to(o.device) for o in outputs]


def _gradients(op, sample):
    """The gradients of `sample`'s differentiable outputs with respect to its inputs that require grad."""
    result = _run(op, sample)
    outputs = [t for t in pytree.tree_leaves(result) if isinstance(t, torch.Tensor) and t.requires_grad]
    inputs = [t for t in _tensors_of(sample) if t.requires_grad]
    if not outputs or not inputs:
        return None
    _seed(SEED)
    return torch.autograd.grad(outputs, inputs, _output_gradients(outputs), allow_unused=True)


def compare_backward(test: TestCase, device: str, dtype: torch.dtype, op) -> int:
    """The gradients of every sample on `device` against those of CPU copies; returns how many samples had any."""
    count = 0
    for index, sample in enumerate(_samples(op, device, dtype, requires_grad=True)):
        cpu_sample = cpu_copy(sample)
        what = f"{op.full_name} {dtype} sample {index} ({sample.name or 'unnamed'}) gradients"
        sim_gradients = _gradients(op, sample)
        cpu_gradients = _gradients(op, cpu_sample)
        if sim_gradients is None and cpu_gradients is None:
            continue
        compare(sim_gradients, cpu_gradients, what, test.precision, test.rel_tol, _output_device(sample))
        count += 1
    test.assertGreater(count, 0, f"{op.full_name}: no {dtype} sample input has a gradient to compare")
    return count


def _raised_by(op, sample) -> Exception | None:
    try:
        op(sample.input, *sample.args, **sample.kwargs)
    except Exception as raised:  # noqa: BLE001 - the exception is the result being compared
        return raised
    return None


def compare_error_inputs(test: TestCase, device: str, op) -> int:
    """Every bad-input case of `op` that the CPU refuses, sim refuses with the error the OpInfo expects.

    A few OpInfos list error inputs that no device refuses (PyTorch marks them expectedFailure on every device);
    for those, sim must accept them just as the CPU does. Inputs that only exist off the CPU (a tensor on each
    device) must always be refused. Returns how many ran.
    """
    count = 0
    cpu_errors = list(op.error_inputs("cpu"))
    for index, error in enumerate(op.error_inputs(device)):
        what = f"{op.full_name} error input {index}"
        raised = _raised_by(op, error.sample_input)
        expected = error.error_type.__name__ + f" matching {error.error_regex!r}"
        cpu_accepts = index < len(cpu_errors) and _raised_by(op, cpu_errors[index].sample_input) is None
        if cpu_accepts:
            test.assertIsNone(raised, f"{what}: the CPU accepts this input but sim raised {raised!r}")
        elif raised is None:
            raise AssertionError(f"{what}: sim raised nothing; expected {expected}")
        elif not isinstance(raised, error.error_type) or not re.search(error.error_regex, str(raised)):
            raise AssertionError(f"{what}: sim raised {type(raised).__name__}: {raised}; expected {expected}")
        count += 1
    test.assertGreater(count, 0, f"{op.full_name} lists no error input for {device}")
    return count


class TestCommon(TestCase):
    """Named after test/test_ops.py's class, so that the configuration's overrides and exclusions apply to it."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        torch.sim.set_fallback_policy("silent")

    @suppress_warnings
    @ops(FORWARD_OPS, allowed_dtypes=FORWARD_DTYPES)
    def test_compare_cpu(self, device, dtype, op):
        compare_forward(self, device, dtype, op)

    @suppress_warnings
    @ops(BACKWARD_OPS, allowed_dtypes=(BACKWARD_DTYPE,))
    def test_compare_cpu_backward(self, device, dtype, op):
        compare_backward(self, device, dtype, op)

    @suppress_warnings
    @ops(ERROR_OPS, dtypes=OpDTypes.none)
    def test_errors(self, device, op):
        compare_error_inputs(self, device, op)

    def test_multiple_devices(self, device):
        if torch.accelerator.device_count() < 2:
            self.skipTest(f"one {DEVICE} device (SIM_DEVICE_COUNT)")
        second = torch.device(DEVICE, 1)
        values = torch.arange(6.0)
        result = (values.to(second) * 2).sum()
        self.assertEqual(result.device, second)
        self.assertEqual(result.cpu(), (values * 2).sum(), atol=0, rtol=0)


instantiate_device_type_tests(TestCommon, globals(), only_for=DEVICE)
