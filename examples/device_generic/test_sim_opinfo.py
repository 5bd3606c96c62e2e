"""Device-generic tests: PyTorch's OpInfo database run on `sim` against the CPU, bit for bit.

A vendor copies this module and points `config` (below) at its own configuration module, which has
the shape of torch_sim.device_generic; `pytest examples/device_generic/test_sim_opinfo.py` runs it, and
tests/backend/test_device_generic.py runs it in the project's test suite.

sim runs the host's kernels on device memory, so wherever the CPU is deterministic
sim's results must be bit-identical to the CPU's. Three tests per OpInfo:

- forward: every sample input (made on sim, the way PyTorch's own device-generic
  tests make them) runs once on sim and once on CPU copies of the same inputs (same
  storage, strides and offset), for each of float32, float64, bfloat16, float16,
  int64, bool and complex64 the OpInfo supports. Outputs, and the inputs afterwards
  (in case the op wrote into them), must be equal with zero tolerance (NaN equal to
  NaN, same dtypes), and on the sim device the inputs were on;
- backward (float64, OpInfos that support autograd): the gradients of every sample
  with respect to every input that requires grad, for the same random output
  gradients, must be equal with zero tolerance;
- error_inputs: every bad-input case the OpInfo lists must raise on sim the error
  type and message the OpInfo expects, as the CPU does.

Both runs of a sample start from the same seed: sim's device generator draws the same
stream as the CPU generator, so random ops are compared by value too.

Which OpInfos run:
- by default, the configuration's op_allowlist (`DEFAULT_SUBSET`, about 130 common
  ops: element-wise, reductions, linear algebra basics, nn.functional, indexing,
  views, random);
- every OpInfo when SIM_FULL_OPINFO=1 (`make test-full`), and in the report
  (`python -m torch_sim.device_generic_report`).
The selection is the op list given to `@ops`, so the default run has no skips for
the ops it leaves out. SIM_OPINFO_DEVICE=sim:1 makes the samples on sim:1 while
sim:0 stays the current device.

Every exception, a skip, an expected failure or a comparison at a tolerance, is in
ONE place with its reason: the configuration module (torch_sim.device_generic). The decorators that
PyTorch's OpInfo entries carry for its own test classes (CUDA tolerances, skips of
tests in test_ops.py) do not apply here: each OpInfo runs with its decorators
stripped.
"""
from __future__ import annotations

import copy
import os
import re
import unittest

import torch
from torch.testing._internal.common_device_type import OpDTypes, instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, suppress_warnings
from torch.testing._internal.opinfo.core import DecorateInfo
from torch.utils import _pytree as pytree

from torch_sim import device_generic as config

FULL_SWEEP = os.environ.get("SIM_FULL_OPINFO") == "1"
# The samples go to the current sim device unless SIM_OPINFO_DEVICE names another
# (e.g. sim:1, to run everything away from the current device).
DEVICE = os.environ.get("SIM_OPINFO_DEVICE") or None
SEED = 1234
FORWARD_DTYPES = tuple(getattr(torch, name) for name in config.FORWARD_DTYPES)
BACKWARD_DTYPE = getattr(torch, config.BACKWARD_DTYPE)


def _supports_any(op, dtypes) -> bool:
    return bool(set(dtypes) & set(op.supported_dtypes("cpu")))


def _decorated(op):
    """A copy of `op` with PyTorch's own decorators stripped and our exceptions (if any) applied."""
    op = copy.copy(op)
    op.skips = ()
    gap = config.GAPS.get(op.full_name)
    decorators = []
    for test in config.TESTS:
        entries = [(None, gap)] if gap else []
        entries += [(dtype, reason) for (name, where, dtype), reason in config.EXCEPTIONS.items()
                    if name == op.full_name and where == test]
        for dtype, reason in entries:
            kind = config.exception_kind(reason)
            if kind == "tolerance":
                continue  # handled inside the test
            decorator = unittest.skip(reason) if kind == "skip" else unittest.expectedFailure
            dtypes = None if dtype is None else (getattr(torch, dtype),)
            decorators.append(DecorateInfo(decorator, config.TEST_CLASS, f"test_{test}", dtypes=dtypes))
    op.decorators = tuple(decorators)
    return op


def _lists_error_inputs(op) -> bool:
    """Whether `op` lists a bad input for the device the tests run on: some list them for CUDA only, and a test
    with nothing to compare is not made."""
    try:
        return next(iter(op.error_inputs(DEVICE or "sim")), None) is not None
    except Exception:  # noqa: BLE001 - the test made for the op reports the error
        return True


def selected_ops(test: str, full: bool = FULL_SWEEP) -> list:
    """The OpInfos `test` ("forward", "backward" or "error_inputs") runs, decorated with their exceptions."""
    if test == "forward":
        chosen = [op for op in op_db if _supports_any(op, FORWARD_DTYPES)]
    elif test == "backward":
        chosen = [op for op in op_db if op.supports_autograd and _supports_any(op, (BACKWARD_DTYPE,))]
    else:
        chosen = [op for op in op_db if op.error_inputs_func is not None]
    allowlist = config.op_allowlist(full)
    if allowlist is not None:
        wanted = set(allowlist)
        chosen = [op for op in chosen if op.full_name in wanted]
    if test == "error_inputs":  # after the allowlist: making every OpInfo's bad inputs takes seconds
        chosen = [op for op in chosen if _lists_error_inputs(op)]
    return [_decorated(op) for op in chosen]


def _to_cpu(value):
    """A CPU copy of a sim tensor with the same storage, sizes, strides, storage offset and requires_grad.

    Copying the whole storage (not just the elements in view) keeps what a view can
    reach: `as_strided` on a partial view reads elements outside it.
    """
    if not isinstance(value, torch.Tensor) or value.device.type != "sim":
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


def _compare(actual, expected, what: str, mode: str = "exact", device: torch.device | None = None) -> None:
    """`actual` from the sim run against `expected` from the CPU run, leaf by leaf.

    mode: "exact" (zero tolerance), "tolerance" (test_compare_cpu's) or "shapes"
    (structure, shapes and dtypes only); device: where every tensor of `actual` must
    be (None: anywhere).
    """
    actual_leaves, actual_spec = pytree.tree_flatten(actual)
    expected_leaves, expected_spec = pytree.tree_flatten(expected)
    if actual_spec != expected_spec:
        raise AssertionError(f"{what}: sim returned {actual_spec}, CPU {expected_spec}")
    tolerance = config.TOLERANCE if mode == "tolerance" else 0.0
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
        if mode == "shapes":
            if (a.shape, a.dtype) != (e.shape, e.dtype):
                raise AssertionError(f"{where}: sim gave {tuple(a.shape)} {a.dtype}, CPU {tuple(e.shape)} {e.dtype}")
            continue
        torch.testing.assert_close(a, e.detach(), atol=tolerance, rtol=tolerance, equal_nan=True,
                                   msg=lambda m: f"{where} ({'bit for bit' if mode == 'exact' else mode}): {m}")


def _tensors_of(sample) -> list[torch.Tensor]:
    leaves = pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


def _run(op, sample):
    torch.manual_seed(SEED)
    result = op(sample.input, *sample.args, **sample.kwargs)
    return sample.output_process_fn_grad(result)


def _mode(op, test: str, dtype: torch.dtype | None) -> str:
    """How strictly `test` compares `op`: "shapes", "tolerance" (an exception says why) or "exact"."""
    return config.comparison_mode(op.full_name, test, None if dtype is None else str(dtype).removeprefix("torch."))


def compare_forward(test: unittest.TestCase, device: str, dtype: torch.dtype, op) -> int:
    """Runs every sample input of `op` on `device` and on CPU copies; returns the number of samples."""
    mode = _mode(op, "forward", dtype)
    count = 0
    for index, sample in enumerate(op.sample_inputs(device, dtype)):
        cpu_sample = cpu_copy(sample)
        what = f"{op.full_name} {dtype} sample {index} ({sample.name or 'unnamed'})"
        sim_result = _run(op, sample)
        cpu_result = _run(op, cpu_sample)
        _compare(sim_result, cpu_result, f"{what} output", mode, device=_output_device(sample))
        _compare(_tensors_of(sample), _tensors_of(cpu_sample), f"{what} inputs", mode)
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
    torch.manual_seed(SEED)
    return torch.autograd.grad(outputs, inputs, _output_gradients(outputs), allow_unused=True)


def compare_backward(test: unittest.TestCase, device: str, dtype: torch.dtype, op) -> int:
    """The gradients of every sample on `device` against those of CPU copies; returns how many samples had any."""
    mode = _mode(op, "backward", dtype)
    count = 0
    for index, sample in enumerate(op.sample_inputs(device, dtype, requires_grad=True)):
        cpu_sample = cpu_copy(sample)
        what = f"{op.full_name} {dtype} sample {index} ({sample.name or 'unnamed'}) gradients"
        sim_gradients = _gradients(op, sample)
        cpu_gradients = _gradients(op, cpu_sample)
        if sim_gradients is None and cpu_gradients is None:
            continue
        _compare(sim_gradients, cpu_gradients, what, mode, device=_output_device(sample))
        count += 1
    test.assertGreater(count, 0, f"{op.full_name}: no {dtype} sample input has a gradient to compare")
    return count


def _raised_by(op, sample) -> Exception | None:
    try:
        op(sample.input, *sample.args, **sample.kwargs)
    except Exception as raised:  # noqa: BLE001 - the exception is the result being compared
        return raised
    return None


def compare_error_inputs(test: unittest.TestCase, device: str, op) -> int:
    """Every bad-input case of `op` that the CPU refuses, sim refuses with the error the OpInfo expects.

    A few OpInfos list error inputs that no device refuses (PyTorch marks them expectedFailure on
    every device); for those, sim must accept them just as the CPU does. Inputs that only exist off
    the CPU (a tensor on each device) must always be refused. Returns how many ran.
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


class TestSimOpInfo(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        torch.sim.set_fallback_policy("silent")

    @suppress_warnings
    @ops(selected_ops("forward"), allowed_dtypes=FORWARD_DTYPES)
    def test_forward(self, device, dtype, op):
        compare_forward(self, DEVICE or device, dtype, op)

    @suppress_warnings
    @ops(selected_ops("backward"), allowed_dtypes=(BACKWARD_DTYPE,))
    def test_backward(self, device, dtype, op):
        compare_backward(self, DEVICE or device, dtype, op)

    @suppress_warnings
    @ops(selected_ops("error_inputs"), dtypes=OpDTypes.none)
    def test_error_inputs(self, device, op):
        compare_error_inputs(self, DEVICE or device, op)


instantiate_device_type_tests(TestSimOpInfo, globals(), only_for="sim")

