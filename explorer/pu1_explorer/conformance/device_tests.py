"""PyTorch's own device-generic tests on a vendor's device, configured from what a scorecard found.

torch's `DeviceTypeTestBase` (torch.testing._internal.common_device_type) reads three class attributes, which
`PrivateUse1TestBase.set_test_configs(...)` sets before `instantiate_device_type_tests` makes the device's test
classes:

- `op_allowlist`: the OpInfo full names ("add", "div.floor_rounding") whose `@ops` tests are made;
- `op_overrides`: OpInfo full name -> `DecorateInfo`s added to that OpInfo (skips, expected failures),
  each naming the test class and test it applies to (None: every one) and optionally dtypes;
- `test_exclusions`: generic test class name -> the test names left out, or "*" for the whole class.

`configuration(card)` derives them from a scorecard, every entry with the finding that justifies it, as
JSON-ready data: the scorecard writes it as `device_tests.json` beside its HTML, JUnit and JSON
(`write_configuration`). Data rather than generated code, so that a vendor's CI can diff, review and keep it;
`configure("device_tests.json")` turns it into torch's objects (`DecorateInfo`s) and sets them. It must run before
the test module calls `instantiate_device_type_tests`, which reads them: at the top of a vendor's own test module,
or, for PyTorch's test files (test/test_ops.py ...), in a conftest.py beside them:

    from pu1_explorer.conformance.device_tests import configure
    configure("results/device_tests.json")   # then: PYTORCH_TESTING_DEVICE_ONLY_FOR=<device> pytest test_ops.py

- What each finding becomes. op_allowlist: the operators the sweeps covered and found runnable or gave a finding
  about; an operator they skipped (random or uninitialised output, not in this torch's op_db) is left out with its
  reason in `left_out`; an operator outside the sweeps (the quick sweeps cover `QUICK_OPS`) has no finding and no
  test. Without a sweep, op_allowlist is None: torch's default, every operator.
- an operator that crashed, hung or raised on the device in the differential sweep: skipped in every test; one
  whose values differ from the CPU's: an expected failure of test_ops.py's `TestCommon.test_compare_cpu` in the
  dtype swept.
- an operator whose bad inputs crashed or hung: `TestCommon.test_errors` skipped; one that raised another error or
  none: an expected failure of `TestCommon.test_errors`.
- an operator one sweep skipped and the other covered: the skipping sweep's test is skipped, with its reason.
- a capability probe that failed, crashed or timed out excludes the test classes or tests of PyTorch's suites that
  cannot run without that capability (`PROBE_EXCLUSIONS`).

An expected failure reports an unexpected success the day the backend fixes it: then the scorecard's next
configuration no longer lists it. A scorecard writes "skip" and "expected failure" overrides; a configuration a
backend keeps by hand, in the same format, may also give a "tolerance" to one test (`atol`, `rtol`, for the
`dtypes` listed), which becomes torch's `toleranceOverride`.
"""
from __future__ import annotations

import json
import unittest
from pathlib import Path
from typing import Any

from pu1_explorer.conformance.results import Scorecard

FORMAT = "pu1-explorer device-generic test configuration"
VERSION = 1
FILE_NAME = "device_tests.json"
# The tests of PyTorch's test/test_ops.py that check what each sweep checks.
SWEEP_TESTS = {"opinfo differential": ("TestCommon", "test_compare_cpu"),
               "opinfo bad inputs": ("TestCommon", "test_errors")}
# Test classes (generic names, as in PyTorch's test/ folder) or tests that need a capability a probe checks:
# probe -> {class: [tests] or ["*"]}.
PROBE_EXCLUSIONS: dict[str, dict[str, list[str]]] = {
    "operators": {"TestCommon": ["*"]},  # copies and basic kernels: every OpInfo test needs them
    "devices and guard": {"TestCommon": ["test_multiple_devices"]},  # runs each op on every device
    "autograd on layers": {"TestBwdGradients": ["*"]},  # test_ops_gradients.py: gradcheck on the device
    "torch.compile": {"TestInductorOpInfo": ["*"]},  # inductor/test_torchinductor_opinfo.py
}
_SKIP_STATUSES = ("crashed", "timed out", "errored")
ACTIONS = ("skip", "expected failure", "tolerance")


def _override(action: str, test: tuple[str, str] | None, reason: str, dtype: str = "") -> dict[str, Any]:
    return {"action": action, "test_class": test[0] if test else None, "test": test[1] if test else None,
            "dtypes": [dtype] if dtype else None, "reason": reason}


def configuration(card: Scorecard) -> dict[str, Any]:
    """op_allowlist, op_overrides and test_exclusions for `card`'s device, each entry with the finding behind it.

    Plain data (see the module's docstring); `configure` or `torch_test_configs` turns it into what torch reads.
    """
    allowlist: dict[str, None] = {}
    left_out: dict[str, str] = {}
    overrides: dict[str, list[dict[str, Any]]] = {}
    skipped: list[tuple[str, tuple[str, str], str]] = []  # (operator, the sweep's test, finding)
    swept = False
    for probe in card.probes:
        if probe.name not in SWEEP_TESTS:
            continue
        swept = True
        test = SWEEP_TESTS[probe.name]
        for op in probe.ops:
            finding = f"scorecard, {probe.name}: {op.status}: {op.detail}".rstrip(": ")
            if op.status == "skipped":
                left_out.setdefault(op.name, finding)
                skipped.append((op.name, test, finding))
                continue
            allowlist[op.name] = None
            if op.status == "passed":
                continue
            if probe.name == "opinfo differential":
                entry = (_override("skip", None, finding) if op.status in _SKIP_STATUSES else
                         _override("expected failure", test, finding, op.dtype))
            else:
                entry = _override("skip" if op.status in ("crashed", "timed out") else "expected failure", test,
                                  finding)
            overrides.setdefault(op.name, []).append(entry)
    for name in allowlist:
        left_out.pop(name, None)
    for name, test, finding in skipped:  # the other sweep covered it: this sweep's test has nothing to check
        if name in allowlist:
            overrides.setdefault(name, []).append(_override("skip", test, finding))
    exclusions: dict[str, dict[str, Any]] = {}
    for probe in card.probes:
        if probe.name not in PROBE_EXCLUSIONS or probe.status in ("passed", "skipped"):
            continue
        for test_class, tests in PROBE_EXCLUSIONS[probe.name].items():
            entry = exclusions.setdefault(test_class, {"tests": [], "reasons": []})
            entry["tests"] = list(dict.fromkeys(entry["tests"] + tests))
            entry["reasons"].append(f"scorecard, {probe.name}: {probe.status}: {probe.detail}")
    return {"format": FORMAT, "version": VERSION, "device": card.device, "torch_version": card.torch_version,
            "scorecard_started": card.started, "opinfo": card.opinfo,
            "op_allowlist": list(allowlist) if swept else None, "left_out": left_out,
            "op_overrides": overrides, "test_exclusions": exclusions}


def write_configuration(card: Scorecard, folder: str | Path) -> Path:
    """Write `configuration(card)` as `device_tests.json` into `folder`; return the file's path."""
    path = Path(folder) / FILE_NAME
    path.write_text(json.dumps(configuration(card), indent=1) + "\n")
    return path


def _read(source: str | Path | dict) -> dict[str, Any]:
    if isinstance(source, dict):
        data = source
    else:
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"{source}: no such file; `pu1-explorer scorecard -o FOLDER` writes "
                                    f"FOLDER/{FILE_NAME}")
        data = json.loads(path.read_text())
    if data.get("format") != FORMAT or data.get("version") != VERSION:
        raise ValueError(f"{source if not isinstance(source, dict) else 'the data'} is not a {FORMAT} "
                         f"(version {VERSION}); write one with pu1_explorer.conformance.device_tests")
    return data


def torch_test_configs(source: str | Path | dict) -> dict[str, Any]:
    """The keyword arguments of torch's `DeviceTypeTestBase.set_test_configs` from a configuration (a file or data):
    op_allowlist, op_overrides (with `DecorateInfo`s: skips that give the finding as their reason, expected
    failures, tolerances) and test_exclusions."""
    import torch
    from torch.testing._internal.opinfo.core import DecorateInfo

    from torch.testing._internal.common_device_type import tol, toleranceOverride

    data = _read(source)
    overrides: dict[str, list[DecorateInfo]] = {}
    for name, entries in data["op_overrides"].items():
        for entry in entries:
            action = entry["action"]
            if action not in ACTIONS:
                raise ValueError(f"the override of {name} has the unknown action {action!r}: use one of "
                                 f"{', '.join(repr(known) for known in ACTIONS)}")
            if action == "tolerance" and not entry["dtypes"]:
                raise ValueError(f"the tolerance override of {name} names no dtypes: list the dtypes it applies to")
            dtypes = tuple(getattr(torch, dtype) for dtype in entry["dtypes"]) if entry["dtypes"] else None
            if action == "skip":
                decorator = unittest.skip(entry["reason"])
            elif action == "expected failure":
                decorator = unittest.expectedFailure
            else:
                decorator = toleranceOverride({dtype: tol(entry["atol"], entry["rtol"]) for dtype in dtypes})
            overrides.setdefault(name, []).append(
                DecorateInfo(decorator, entry["test_class"], entry["test"], dtypes=dtypes))
    allowlist = data["op_allowlist"]
    return {"op_allowlist": None if allowlist is None else set(allowlist), "op_overrides": overrides,
            "test_exclusions": {test_class: entry["tests"] for test_class, entry in data["test_exclusions"].items()}}


def configure(source: str | Path | dict) -> None:
    """Set a configuration on torch's `PrivateUse1TestBase`, before `instantiate_device_type_tests` reads it.

    The base is set up for the PrivateUse1 device first, so that the overrides carry the device's name from the
    first test on (the base otherwise learns it only while it makes its first test).
    """
    from torch.testing._internal.common_device_type import PrivateUse1TestBase

    configs = torch_test_configs(source)
    PrivateUse1TestBase.setUpClass()
    PrivateUse1TestBase.set_test_configs(**configs)
