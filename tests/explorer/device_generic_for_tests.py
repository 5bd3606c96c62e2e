"""A device-generic test class in PyTorch's manner, for the scorecard's tests, run as a program on sim with bugs.

It imports the broken backend (`sim_with_broken_ops`, before op_db so that the OpInfos call the broken
functions), configures torch's PrivateUse1TestBase from the scorecard's device_tests.json named by
PU1_DEVICE_TESTS (without it, torch's defaults), makes the tests for sim with
`instantiate_device_type_tests(..., only_for="sim")` and prints each test's outcome as one JSON object.

The generic class carries the name of the class of PyTorch's test/test_ops.py whose tests the configuration
names, and its tests check what those check: `test_compare_cpu` runs each sample input on the device and on
the CPU and compares, `test_errors` expects each bad input to raise what its OpInfo says, and
`test_multiple_devices` makes a tensor on the second device.
"""
from __future__ import annotations

import json
import os
import unittest

import torch

import sim_with_broken_ops  # noqa: F401  (first: the OpInfos capture the functions it breaks)
from pu1_explorer.conformance.device_tests import configure
from torch.testing._internal.common_device_type import OpDTypes, instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase

# "sub" was not swept by the scorecard and "nn.functional.dropout" was skipped (random output): no test for them.
# "mul" (an expected failure) comes first: the first OpInfo's overrides are the ones torch would drop if the
# configuration did not set the base up for the device first (`configure`).
NAMES = ("mul", "add", "sub", "flip", "tril", "nn.functional.dropout")
OPS = sorted((op for op in op_db if op.full_name in NAMES), key=lambda op: NAMES.index(op.full_name))
if os.environ.get("PU1_DEVICE_TESTS"):
    configure(os.environ["PU1_DEVICE_TESTS"])


def _moved(value, device: str):
    """`value` with its tensors (also in lists and tuples) on `device`."""
    if isinstance(value, (list, tuple)):
        return type(value)([_moved(item, device) for item in value])
    return value.detach().to(device) if isinstance(value, torch.Tensor) else value


def _name(test: unittest.TestCase) -> str:
    return test.id().rsplit(".", 1)[-1]


class TestCommon(TestCase):
    @ops(OPS, allowed_dtypes=(torch.float32,))
    def test_compare_cpu(self, device, dtype, op):
        for sample in op.sample_inputs("cpu", dtype):
            expected = op(sample.input, *sample.args, **sample.kwargs)
            on_device = sample.transform(lambda value: _moved(value, device))
            actual = op(on_device.input, *on_device.args, **on_device.kwargs)
            self.assertEqual(_moved(actual, "cpu"), expected, atol=1e-3, rtol=1e-3)

    @ops([op for op in OPS if op.error_inputs_func is not None], dtypes=OpDTypes.none)
    def test_errors(self, device, op):
        for case in op.error_inputs(device):
            sample = case.sample_input
            with self.assertRaisesRegex(case.error_type, case.error_regex):
                op(sample.input, *sample.args, **sample.kwargs)

    def test_multiple_devices(self, device):
        self.assertEqual(torch.ones(1, device=torch.device(torch.device(device).type, 1)).device.index, 1)


instantiate_device_type_tests(TestCommon, globals(), only_for="sim")


class Outcomes(unittest.TestResult):
    """Each test's outcome by its name: passed, skipped: REASON, expected failure, failed: ..., error: ..."""

    def __init__(self) -> None:
        super().__init__()
        self.outcomes: dict[str, str] = {}

    def addSuccess(self, test):
        self.outcomes[_name(test)] = "passed"

    def addSkip(self, test, reason):
        self.outcomes[_name(test)] = f"skipped: {reason}"

    def addExpectedFailure(self, test, err):
        self.outcomes[_name(test)] = "expected failure"

    def addUnexpectedSuccess(self, test):
        self.outcomes[_name(test)] = "unexpected success"

    def addFailure(self, test, err):
        self.outcomes[_name(test)] = f"failed: {str(err[1]).splitlines()[0][:200]}"

    def addError(self, test, err):
        self.outcomes[_name(test)] = f"error: {type(err[1]).__name__}: {str(err[1]).splitlines()[0][:200]}"


if __name__ == "__main__":
    made = [value for name, value in list(globals().items()) if name.startswith("TestCommon") and name != "TestCommon"]
    result = Outcomes()
    unittest.TestSuite(unittest.defaultTestLoader.loadTestsFromTestCase(cls) for cls in made).run(result)
    print(json.dumps(result.outcomes))
