"""PyTorch's device-generic OpInfo tests on sim, run from the module a vendor copies, and sim's configuration.

The tests themselves live in examples/device_generic/test_sim_opinfo.py (forward, backward and bad inputs
against the CPU, bit for bit) and read sim's configuration from torch_sim.device_generic; this module runs
that same module in the project's test suite (default subset; SIM_FULL_OPINFO=1 for every OpInfo) and checks
the configuration and the comparisons themselves.
"""
from __future__ import annotations

import importlib.util
import sys
import unittest
from pathlib import Path

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

from torch_sim import device_generic as config

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "device_generic" / "test_sim_opinfo.py"


def _load_example():
    spec = importlib.util.spec_from_file_location("sim_opinfo_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


example = _load_example()
# The device-specific classes that instantiate_device_type_tests made there, collected here.
globals().update({name: value for name, value in vars(example).items()
                  if name.startswith("TestSimOpInfo") and isinstance(value, type)})


def test_the_example_instantiated_the_sim_test_class():
    assert [name for name in vars(example) if name.startswith("TestSimOpInfo")] == ["TestSimOpInfoPRIVATEUSE1"]


def test_default_subset_names_are_opinfos():
    known = {op.full_name for op in op_db}
    assert [name for name in config.DEFAULT_SUBSET if name not in known] == []
    assert len(set(config.DEFAULT_SUBSET)) == len(config.DEFAULT_SUBSET)


def test_every_exception_names_an_opinfo_a_test_and_a_dtype_with_a_reason():
    known = {op.full_name for op in op_db}
    names = [*config.GAPS, *config.SHAPES_ONLY, *(name for name, _, _ in config.EXCEPTIONS)]
    assert sorted(set(names) - known) == []
    assert set(config.GAPS).isdisjoint(config.SHAPES_ONLY)
    assert all(test in config.TESTS for _, test, _ in config.EXCEPTIONS)
    assert all(dtype is None or isinstance(getattr(torch, dtype, None), torch.dtype)
               for _, _, dtype in config.EXCEPTIONS)
    assert all(isinstance(getattr(torch, name, None), torch.dtype)
               for name in (*config.FORWARD_DTYPES, config.BACKWARD_DTYPE))
    reasons = [*config.GAPS.values(), *config.SHAPES_ONLY.values(), *config.EXCEPTIONS.values()]
    assert all(reason.strip() and "\n" not in reason for reason in reasons)


def test_the_configuration_picks_the_comparison_and_the_selection():
    assert config.comparison_mode("empty", "forward", "float32") == "shapes"
    assert config.comparison_mode("linalg.lstsq", "forward", "float64") == "tolerance"
    assert config.comparison_mode("add", "forward", "float32") == "exact"
    assert [config.exception_kind(reason) for reason in ("skip: x", "tolerance: y", "z")] == ["skip", "tolerance",
                                                                                               "xfail"]
    assert config.op_allowlist(full=False) == config.DEFAULT_SUBSET and config.op_allowlist(full=True) is None


def _op_by_name(name: str):
    return next(op for op in op_db if op.full_name == name)


class _NoSamples:
    """An OpInfo stand-in whose sample and error inputs are empty: a comparison over it compares nothing."""

    full_name = "no_samples"

    def sample_inputs(self, device, dtype, requires_grad=False):
        return iter(())

    def error_inputs(self, device):
        return iter(())


def test_a_backward_comparison_that_compares_nothing_fails():
    with pytest.raises(AssertionError, match="no torch.float64 sample input has a gradient to compare"):
        example.compare_backward(unittest.TestCase(), "sim", torch.float64, _NoSamples())


def test_an_error_input_comparison_that_compares_nothing_fails():
    with pytest.raises(AssertionError, match="no_samples lists no error input for sim"):
        example.compare_error_inputs(unittest.TestCase(), "sim", _NoSamples())


def test_the_comparisons_count_what_they_compared():
    """On a real OpInfo every comparison reports the samples it compared (each fails above when that is none)."""
    torch.sim.set_fallback_policy("silent")
    case = unittest.TestCase()
    mul = _op_by_name("mul")
    assert example.compare_forward(case, "sim", torch.float32, mul) > 0
    assert example.compare_backward(case, "sim", torch.float64, mul) > 0
    assert example.compare_error_inputs(case, "sim", _op_by_name("gather")) > 0
