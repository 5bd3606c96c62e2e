"""PyTorch's device-generic OpInfo tests on sim, through the route a vendor's backend takes, and what that route reads.

The tests live in examples/device_generic/test_sim_opinfo.py, a module of the shape `pu1-explorer new` generates
(`TestCommon`, configured by a device_tests.json through `pu1_explorer.conformance.device_tests.configure`), with sim's
stricter comparisons (bit for bit against the CPU). This module runs that same module in the project's test suite
(default subset; SIM_FULL_OPINFO=1 for every OpInfo) and checks sim's configuration, torch_sim/device_tests.json, and
the comparisons themselves.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import unittest
from pathlib import Path

import pytest
import torch
from torch.testing._internal.common_device_type import PrivateUse1TestBase
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase

from pu1_explorer.conformance.device_tests import torch_test_configs

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "device_generic" / "test_sim_opinfo.py"


def _load_example():
    spec = importlib.util.spec_from_file_location("sim_opinfo_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


if os.environ.get("PYTEST_XDIST_WORKER"):
    # Every OpInfo sample_inputs() call walks the stack (inspect.stack) to seed from the calling test; a frame whose
    # file no imported module has as its __file__ makes inspect scan all of sys.modules. In an xdist worker the
    # bottom frames run xdist/remote.py's code without importing it: importing it names those frames.
    import xdist.remote  # noqa: F401

example = _load_example()
# The device-specific classes that instantiate_device_type_tests made there, collected here.
globals().update({name: value for name, value in vars(example).items()
                  if name.startswith("TestCommon") and isinstance(value, type)})
DEVICE = example.DEVICE


def test_the_generic_class_became_sims_device_class():
    assert [name for name, value in vars(example).items()
            if name.startswith("TestCommon") and isinstance(value, type)] == ["TestCommonSIM"]


def test_default_subset_names_are_opinfos():
    known = {op.full_name for op in op_db}
    assert [name for name in example.DEFAULT_SUBSET if name not in known] == []
    assert len(set(example.DEFAULT_SUBSET)) == len(example.DEFAULT_SUBSET)


def test_sims_configuration_names_opinfos_tests_and_dtypes_each_with_a_reason():
    data = json.loads(example.SIM_DEVICE_TESTS.read_text())
    assert data["device"] == DEVICE and data["op_allowlist"] is None and data["test_exclusions"] == {}
    known = {op.full_name for op in op_db}
    assert sorted(set(data["op_overrides"]) - known) == [] and sorted(set(data["left_out"]) - known) == []
    entries = [entry for entries in data["op_overrides"].values() for entry in entries]
    assert {entry["test_class"] for entry in entries} <= {None, "TestCommon"}
    assert {entry["test"] for entry in entries} <= {None, *example.TESTS}
    assert all(isinstance(getattr(torch, dtype, None), torch.dtype)
               for entry in entries for dtype in entry["dtypes"] or ())
    reasons = [entry["reason"] for entry in entries] + list(data["left_out"].values())
    assert reasons and all(reason.strip() and "\n" not in reason for reason in reasons)
    assert set(torch_test_configs(data)["op_overrides"]) == set(data["op_overrides"])  # the explorer reads each


def test_the_configuration_narrows_the_default_run_and_decorates_the_gaps():
    assert example.sim_device_tests(full=True)["op_allowlist"] is None
    assert example.sim_device_tests(full=False)["op_allowlist"] == list(example.DEFAULT_SUBSET)
    assert PrivateUse1TestBase.op_allowlist == (None if example.FULL_SWEEP else set(example.DEFAULT_SUBSET))
    overrides = PrivateUse1TestBase.op_overrides
    lstsq = overrides["linalg.lstsq"]  # compared at a tolerance per dtype, in the forward test only
    for dtype in (torch.float32, torch.float64, torch.complex64):
        active = [entry for entry in lstsq if entry.is_active("TestCommon", "test_compare_cpu", DEVICE, dtype, {})]
        assert len(active) == 1, f"{dtype}: {len(active)} tolerances apply"
        assert not any(entry.is_active("TestCommon", "test_compare_cpu_backward", DEVICE, dtype, {}) for entry in lstsq)
    (to_sparse,) = overrides["to_sparse"]  # an expected failure in every test
    assert to_sparse.decorators == [unittest.expectedFailure]
    assert to_sparse.is_active("TestCommon", "test_errors", DEVICE, None, {})


def test_a_tolerance_of_the_configuration_reaches_the_test(monkeypatch):
    """linalg.lstsq's forward test compares at the configuration's tolerance, add's bit for bit."""
    names = [f"test_compare_cpu_{op}_{DEVICE}_float64" for op in ("linalg_lstsq", "add")]
    seen = {}

    def record(test, device, dtype, op):
        seen[op.full_name] = (test.precision, test.rel_tol)
        return 1

    monkeypatch.setattr(example, "compare_forward", record)
    for name in names:
        getattr(example.TestCommonSIM(name), name)()
    (float64_tolerance,) = [(entry["atol"], entry["rtol"]) for entry in example.sim_device_tests(full=False)[
        "op_overrides"]["linalg.lstsq"] if "float64" in entry["dtypes"]]
    assert float64_tolerance != (0, 0)
    assert seen == {"linalg.lstsq": float64_tolerance, "add": (0, 0)}


def _op_by_name(name: str):
    return next(op for op in op_db if op.full_name == name)


class _NoSampleInputs:
    """What OpInfo.sample_inputs returns (an iterator that knows the test it serves), with nothing in it."""

    test_fn = None

    def __iter__(self):
        return self

    def __next__(self):
        raise StopIteration


class _NoSamples:
    """An OpInfo stand-in whose sample and error inputs are empty: a comparison over it compares nothing."""

    full_name = "no_samples"

    def sample_inputs(self, device, dtype, requires_grad=False, set_seed=True):
        return _NoSampleInputs()

    def error_inputs(self, device):
        return iter(())


def _bit_for_bit_case() -> TestCase:
    case = TestCase()
    case.precision, case.rel_tol = 0, 0
    return case


def test_a_backward_comparison_that_compares_nothing_fails():
    with pytest.raises(AssertionError, match="no torch.float64 sample input has a gradient to compare"):
        example.compare_backward(_bit_for_bit_case(), DEVICE, torch.float64, _NoSamples())


def test_an_error_input_comparison_that_compares_nothing_fails():
    with pytest.raises(AssertionError, match="no_samples lists no error input for sim"):
        example.compare_error_inputs(_bit_for_bit_case(), DEVICE, _NoSamples())


def test_the_comparisons_count_what_they_compared():
    """On a real OpInfo every comparison reports the samples it compared (each fails above when that is none)."""
    case = _bit_for_bit_case()
    mul = _op_by_name("mul")
    assert example.compare_forward(case, DEVICE, torch.float32, mul) > 0
    assert example.compare_backward(case, DEVICE, torch.float64, mul) > 0
    assert example.compare_error_inputs(case, DEVICE, _op_by_name("gather")) > 0


def test_a_comparison_is_bit_for_bit_unless_given_a_tolerance():
    one = torch.ones(3, device=DEVICE)
    close = torch.ones(3) + 1e-6
    with pytest.raises(AssertionError, match="bit for bit"):
        example.compare(one, close, "ones")
    example.compare(one, close, "ones", atol=1e-3, rtol=1e-3)
