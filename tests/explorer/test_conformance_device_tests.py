"""What a scorecard hands a vendor beyond its verdict: PyTorch's device-generic tests configured from its findings,
and a missing dependency of its own reported as such, never as the device's failure."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from pu1_explorer.conformance import OpResult, ProbeResult, Scorecard, probes, scorecard
from pu1_explorer.conformance.device_tests import PROBE_EXCLUSIONS, SWEEP_TESTS, configuration, torch_test_configs
from pu1_explorer.conformance.processes import child_environment
from pu1_explorer.conformance.sweeps import SWEEP_HINTS, sweep_chunk, sweep_result
from tests.conftest import run_explorer, run_forked
from tests.explorer.test_new_backend import vendor_backend  # noqa: F401  (the session fixture: mydev, built once)
from tests.vendor_backend import DEVICE as VENDOR_DEVICE, vendor_source

HERE = Path(__file__).resolve().parent
BROKEN = str(HERE / "sim_with_broken_ops.py")
DEVICE_GENERIC = HERE / "device_generic_for_tests.py"
SWEPT = ["add", "mul", "flip", "tril", "nn.functional.dropout"]
# The generated backend's sweep: operators it serves, and to_sparse, whose sparse layout the template leaves to the
# vendor (no kernel for the SparsePrivateUse1 key): its tests must be skipped with that finding as the reason.
VENDOR_SWEPT = ["add", "mul", "cat", "index_select", "softmax", "to_sparse"]


def _card() -> Scorecard:
    differential = [OpResult("add", "passed", {"passed": 8}, "float32", dtype="float32"),
                    OpResult("mul", "mismatched", {"mismatched": 1}, "float32: not close", dtype="float32"),
                    OpResult("flip", "errored", {"errored": 2}, "float32: RuntimeError: no kernel", dtype="float32"),
                    OpResult("cumsum", "crashed", {}, "the process died of SIGSEGV"),
                    OpResult("rand_like", "skipped", {}, "random or uninitialised output: nothing to compare")]
    bad_inputs = [OpResult("add", "passed", {"passed": 3}), OpResult("tril", "mismatched", {"mismatched": 1},
                                                                     "no error where the CPU raises RuntimeError")]
    probes = [ProbeResult("devices and guard", "failed", 1.0, "device_index(1) did not switch"),
              ProbeResult("autograd on layers", "passed", 1.0, "fine"),
              ProbeResult("torch.compile", "timed out", 60.0, "killed after 60 s"),
              ProbeResult("opinfo differential", "failed", 3.0, "1 of 4 ops match", ops=differential),
              ProbeResult("opinfo bad inputs", "failed", 1.0, "1 of 2 ops raise like the CPU", ops=bad_inputs)]
    return Scorecard("toy", "2.13.0", "2026-01-01T00:00:00+00:00", 66.0, probes, [], "quick")


def test_every_exclusion_and_override_is_named_and_justified_by_a_finding():
    config = configuration(_card())
    assert config["op_allowlist"] == ["add", "mul", "flip", "cumsum", "tril"]
    assert config["left_out"] == {"rand_like": "scorecard, opinfo differential: skipped: random or uninitialised "
                                                "output: nothing to compare"}
    overrides = config["op_overrides"]
    assert set(overrides) == {"mul", "flip", "cumsum", "tril"}
    (mul,) = overrides["mul"]
    assert (mul["action"], mul["test_class"], mul["test"], mul["dtypes"]) == \
        ("expected failure", "TestCommon", "test_compare_cpu", ["float32"])
    assert mul["reason"] == "scorecard, opinfo differential: mismatched: float32: not close"
    for name in ("flip", "cumsum"):  # would raise or crash in every test: skipped in all of them
        (entry,) = overrides[name]
        assert (entry["action"], entry["test_class"], entry["test"]) == ("skip", None, None)
    assert "SIGSEGV" in overrides["cumsum"][0]["reason"]
    (tril,) = overrides["tril"]
    assert (tril["action"], tril["test"]) == ("expected failure", "test_errors")
    assert "opinfo bad inputs: mismatched: no error where the CPU raises" in tril["reason"]
    exclusions = config["test_exclusions"]  # the probes that did not pass; autograd passed, so no TestBwdGradients
    assert exclusions == {
        "TestCommon": {"tests": ["test_multiple_devices"],
                       "reasons": ["scorecard, devices and guard: failed: device_index(1) did not switch"]},
        "TestInductorOpInfo": {"tests": ["*"], "reasons": ["scorecard, torch.compile: timed out: killed after 60 s"]}}
    assert set(SWEEP_TESTS) == {"opinfo differential", "opinfo bad inputs"} and "autograd on layers" in PROBE_EXCLUSIONS
    json.dumps(config)  # plain data


def test_an_operator_one_sweep_skipped_and_the_other_covered_gets_only_the_covering_sweeps_test():
    undefined = "random or uninitialised output: nothing to compare"
    card = Scorecard("toy", "2.13.0", "", 1.0, [
        ProbeResult("opinfo differential", "passed", 1.0, "", ops=[OpResult("empty_permuted", "skipped", {}, undefined)]),
        ProbeResult("opinfo bad inputs", "passed", 1.0, "", ops=[OpResult("empty_permuted", "passed", {"passed": 2})])])
    config = configuration(card)
    assert config["op_allowlist"] == ["empty_permuted"] and config["left_out"] == {}
    assert config["op_overrides"] == {"empty_permuted": [
        {"action": "skip", "test_class": "TestCommon", "test": "test_compare_cpu", "dtypes": None,
         "reason": f"scorecard, opinfo differential: skipped: {undefined}"}]}


def test_the_configuration_becomes_what_torch_reads():
    import unittest

    import torch

    configs = torch_test_configs(configuration(_card()))
    assert set(configs) == {"op_allowlist", "op_overrides", "test_exclusions"}
    assert configs["op_allowlist"] == {"add", "mul", "flip", "cumsum", "tril"}
    (mul,) = configs["op_overrides"]["mul"]
    assert mul.decorators == [unittest.expectedFailure] and mul.dtypes == (torch.float32,)
    assert mul.is_active("TestCommon", "test_compare_cpu", "sim", torch.float32, {})
    assert not mul.is_active("TestCommon", "test_compare_cpu", "sim", torch.float64, {})
    assert not mul.is_active("TestCommon", "test_out", "sim", torch.float32, {})
    (flip,) = configs["op_overrides"]["flip"]
    assert flip.is_active("TestAnything", "test_anything", "sim", torch.float64, {})
    assert configs["test_exclusions"] == {"TestCommon": ["test_multiple_devices"], "TestInductorOpInfo": ["*"]}
    no_sweeps = Scorecard("toy", "2.13.0", "", 1.0, [ProbeResult("operators", "passed", 1.0, "")])
    assert torch_test_configs(configuration(no_sweeps))["op_allowlist"] is None  # no finding: torch's default


def test_a_tolerance_override_becomes_torchs_tolerance_override_and_a_bad_action_is_refused_in_one_line():
    import copy

    import pytest
    import torch

    from pu1_explorer.conformance.device_tests import FORMAT, VERSION

    data = {"format": FORMAT, "version": VERSION, "device": "sim", "op_allowlist": None, "left_out": {},
            "test_exclusions": {}, "op_overrides": {"linalg.lstsq": [
                {"action": "tolerance", "test_class": "TestCommon", "test": "test_compare_cpu", "dtypes": ["float64"],
                 "atol": 1e-3, "rtol": 1e-4, "reason": "the CPU does not reproduce its own result"}]}}
    (lstsq,) = torch_test_configs(data)["op_overrides"]["linalg.lstsq"]
    assert lstsq.is_active("TestCommon", "test_compare_cpu", "sim", torch.float64, {})
    assert not lstsq.is_active("TestCommon", "test_compare_cpu", "sim", torch.float32, {})
    assert not lstsq.is_active("TestCommon", "test_errors", "sim", torch.float64, {})
    (decorator,) = lstsq.decorators
    assert decorator(lambda: None).tolerance_overrides == {torch.float64: (1e-3, 1e-4)}  # what torch's tests read
    for change, message in (({"action": "ignore"}, "the override of linalg.lstsq has the unknown action 'ignore'"),
                            ({"dtypes": None}, "the tolerance override of linalg.lstsq names no dtypes")):
        bad = copy.deepcopy(data)
        bad["op_overrides"]["linalg.lstsq"][0].update(change)
        with pytest.raises(ValueError, match=message):
            torch_test_configs(bad)


def test_a_bad_configuration_file_is_refused_in_one_line(tmp_path):
    import pytest

    with pytest.raises(FileNotFoundError, match="no such file"):
        torch_test_configs(tmp_path / "missing.json")
    (tmp_path / "other.json").write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="is not a pu1-explorer device-generic test configuration"):
        torch_test_configs(tmp_path / "other.json")


def _device_generic_outcomes(config: Path | None) -> dict[str, str]:
    env = {**child_environment({"SIM_FALLBACK": "silent"})}
    env.pop("PU1_DEVICE_TESTS", None)
    if config is not None:
        env["PU1_DEVICE_TESTS"] = str(config)
    run = run_forked([str(DEVICE_GENERIC)], timeout=600, cwd=HERE, **env)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_pytorchs_device_generic_tests_run_on_sim_with_the_scorecards_exclusions(tmp_path):
    card = scorecard("sim", imports=[BROKEN], probes=["devices and guard", "opinfo differential", "opinfo bad inputs"],
                     ops=SWEPT, jobs=2)
    statuses = {op.name: op.status for op in card.probe("opinfo differential").ops}
    assert statuses == {"add": "passed", "mul": "mismatched", "flip": "errored", "tril": "passed",
                        "nn.functional.dropout": "skipped"}
    assert {op.name: op.status for op in card.probe("opinfo bad inputs").ops}["tril"] == "mismatched"
    assert card.probe("devices and guard").status == "failed"
    # what usually causes each failure: the probe's own hint, the sweep's for its first kind of problem
    assert card.probe("devices and guard").hint == probes.devices_and_guard.hint
    assert card.probe("opinfo differential").hint == SWEEP_HINTS["differential"]["errored"]
    assert card.probe("opinfo bad inputs").hint == SWEEP_HINTS["bad inputs"]["mismatched"]
    written = card.write(tmp_path)
    assert [path.name for path in written] == ["scorecard.html", "scorecard.xml", "scorecard.json",
                                               "device_tests.json"]
    config = json.loads((tmp_path / "device_tests.json").read_text())
    assert config["device"] == "sim" and config["op_allowlist"] == ["add", "mul", "flip", "tril"]

    # in a fresh process, torch's PrivateUse1TestBase reads the configuration: what the scorecard found is an expected
    # failure or a skip with its reason, what it did not sweep gets no test, the excluded test is not made
    outcomes = _device_generic_outcomes(tmp_path / "device_tests.json")
    assert outcomes["test_compare_cpu_add_sim_float32"] == "passed"
    assert outcomes["test_compare_cpu_tril_sim_float32"] == "passed"
    assert outcomes["test_compare_cpu_mul_sim_float32"] == "expected failure"
    assert outcomes["test_errors_tril_sim"] == "expected failure"
    flip = outcomes["test_compare_cpu_flip_sim_float32"]  # skipped, the finding as the reason
    assert flip.startswith("skipped: scorecard, opinfo differential: errored: ") and "flip: no kernel" in flip, flip
    assert not [name for name in outcomes if "dropout" in name or "_sub_" in name or "multiple_devices" in name]
    assert not [outcome for outcome in outcomes.values() if outcome.startswith(("failed", "error"))], outcomes

    # the same tests without the configuration: the broken operators fail, and every operator gets its tests
    plain = _device_generic_outcomes(None)  # torch reports a failure inside an OpInfo test as an error
    assert plain["test_compare_cpu_mul_sim_float32"].startswith(("failed", "error")), plain
    assert plain["test_compare_cpu_flip_sim_float32"].startswith("error") and \
        "flip: no kernel" in plain["test_compare_cpu_flip_sim_float32"]
    assert plain["test_errors_tril_sim"].startswith(("failed", "error")), plain
    assert "test_compare_cpu_sub_sim_float32" in plain and "test_multiple_devices_sim" in plain


def _junit_outcomes(path: Path) -> dict[str, str]:
    """Each test of a pytest JUnit file by its name: passed, skipped: REASON, failed: ... or error: ...."""
    outcomes = {}
    for case in ElementTree.parse(path).iter("testcase"):
        found = [(kind, case.find(kind)) for kind in ("skipped", "failure", "error")]
        kind, element = next(((kind, element) for kind, element in found if element is not None), ("passed", None))
        outcomes[case.get("name")] = kind if element is None else f"{kind}: {element.get('message', '')}"
    return outcomes


def test_pytorchs_device_generic_tests_run_on_the_generated_backend_with_its_scorecards_exclusions(vendor_backend,
                                                                                                  tmp_path):
    """The scorecard of the generated backend writes device_tests.json; the generated package's own device-generic
    test module (tests/test_device_generic.py), run in a fresh process on mydev with that file, makes tests for the
    swept operators only, passes them on the device and skips those of the operator the scorecard found failing,
    with the finding as the reason."""
    card = scorecard(VENDOR_DEVICE, imports=[f"torch_{VENDOR_DEVICE}"], env=vendor_backend, jobs=2,
                     probes=["operators", "devices and guard", "opinfo differential", "opinfo bad inputs"],
                     ops=VENDOR_SWEPT)
    statuses = {op.name: op.status for op in card.probe("opinfo differential").ops}
    assert statuses == {**{name: "passed" for name in VENDOR_SWEPT[:-1]}, "to_sparse": "errored"}, statuses
    config_path = card.write(tmp_path)[-1]
    config = json.loads(config_path.read_text())
    assert config["device"] == VENDOR_DEVICE and config["op_allowlist"] == VENDOR_SWEPT
    skips = [(name, entry["test"], entry["reason"]) for name, entries in config["op_overrides"].items()
             for entry in entries if entry["action"] == "skip"]
    # to_sparse skipped in every test; an operator whose bad inputs the CPU accepts too, in test_errors only
    everywhere = {name: reason for name, test, reason in skips if test is None}
    assert list(everywhere) == ["to_sparse"] and "Sparse" in everywhere["to_sparse"], skips
    assert {test for _, test, _ in skips if test is not None} <= {"test_errors"}, skips

    source = vendor_source(Path(vendor_backend["PYTHONPATH"]))
    junit = tmp_path / "device_generic.xml"
    environment = {name: value for name, value in os.environ.items() if not name.startswith("PYTEST_")}
    environment.update(vendor_backend, DEVICE_TESTS=str(config_path))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
                          "tests/test_device_generic.py"], cwd=source, capture_output=True, text=True, timeout=900,
                         env=environment)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    outcomes = _junit_outcomes(junit)
    # made for the device, for the swept operators only, and run there
    assert all(name.endswith((f"_{VENDOR_DEVICE}", f"_{VENDOR_DEVICE}_float32")) for name in outcomes), outcomes
    compared = {name for name in outcomes if name.startswith("test_compare_cpu_")}
    assert compared == {f"test_compare_cpu_{op}_{VENDOR_DEVICE}_float32" for op in VENDOR_SWEPT}, compared
    for op in VENDOR_SWEPT[:-1]:
        assert outcomes[f"test_compare_cpu_{op}_{VENDOR_DEVICE}_float32"] == "passed", outcomes
    assert outcomes[f"test_errors_cat_{VENDOR_DEVICE}"] == outcomes[f"test_errors_index_select_{VENDOR_DEVICE}"] == \
        outcomes[f"test_multiple_devices_{VENDOR_DEVICE}"] == "passed", outcomes
    # what the scorecard excluded is exactly what it justified, with its finding as the reason
    by_scorecard = {name: outcome.removeprefix("skipped: ") for name, outcome in outcomes.items()
                    if outcome.startswith("skipped: scorecard, ")}
    justified = {f"{made}_{name.replace('.', '_')}_{VENDOR_DEVICE}{dtype}": reason for name, test, reason in skips
                 for made in ([test] if test else ["test_compare_cpu", "test_errors"]) for dtype in ("", "_float32")}
    assert by_scorecard == {name: reason for name, reason in justified.items() if name in outcomes}, outcomes
    assert f"test_compare_cpu_to_sparse_{VENDOR_DEVICE}_float32" in by_scorecard
    assert not [outcome for outcome in outcomes.values() if outcome.startswith(("failure", "error"))], outcomes


def test_the_differential_sweep_finds_no_fault_where_the_device_computes_as_the_cpu():
    """sim computes with the CPU's kernels, so on these operators every finding would be the sweep's own, and would
    exclude a test without reason: a factory call without a device (CPU outputs on both runs), a "cpu" device argument
    (to), a tensor of indices an operator takes on the CPU on every device (tensor_split), a partial view whose
    as_strided reaches outside it, float8 outputs (no tolerance in assert_close)."""
    names = ["arange", "linspace", "logspace", "to", "tensor_split", "as_strided.partial_views", "torch._scaled_mm"]
    env = child_environment({"SIM_FALLBACK": "silent"})
    results, _ = sweep_chunk([("differential", name) for name in names], "sim", [], env, 300, 0)
    found = {op.name: f"{op.status}: {op.detail}" for op in results.values()}
    assert all(finding.startswith("passed") for finding in found.values()), found
    assert set(found) == set(names)


def _without_expecttest(folder: Path) -> dict[str, str]:
    """An environment where `import expecttest` fails, as on an installation without it."""
    (folder / "expecttest.py").write_text('raise ModuleNotFoundError("No module named \'expecttest\'", '
                                          'name="expecttest")\n')
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))}


def test_without_expecttest_the_scorecard_says_what_to_install_before_any_probe(tmp_path):
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    env = {**child_environment(_without_expecttest(shadow)), "SIM_FALLBACK": "silent"}
    result = run_explorer("scorecard", "--device", "sim", "--probe", "device module", "--probe", "opinfo differential",
                          "-o", str(tmp_path), **env)
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "MissingDependencyError" in errors[0] and "pip install expecttest" in errors[0]
    assert "[1/" not in result.stderr and not list(tmp_path.glob("scorecard.*"))
    # without the sweeps the scorecard needs nothing more
    result = run_explorer("scorecard", "--device", "sim", "--probe", "device module", "-o", str(tmp_path), **env)
    assert result.returncode == 0, result.stderr


def test_a_sweep_process_without_expecttest_skips_its_operators_instead_of_failing_them(tmp_path):
    env = child_environment(_without_expecttest(tmp_path))
    results, _ = sweep_chunk([("differential", "add"), ("differential", "mul")], "sim", [], env, 120, 2)
    assert {op.status for op in results.values()} == {"skipped"}
    assert all("pip install expecttest" in op.detail for op in results.values())
    sweep = sweep_result("opinfo differential", "differential", list(results.values()), 0.0, "")
    assert sweep.status == "skipped" and "pip install expecttest" in sweep.detail and not sweep.hint


def test_the_differential_sweep_skips_exactly_the_operators_without_a_defined_output():
    """Random draws (ATen's nondeterministic_seeded tag, the functional dropouts) and empty memory are skipped;
    operators whose names merely contain such a word (normalize, poisson_nll_loss, __rand__) are compared."""
    from torch.testing._internal.common_methods_invocations import op_db

    from pu1_explorer.conformance.sweep_child import has_undefined_output

    skipped = {op.name for op in op_db if has_undefined_output(op)}
    assert {"randn", "rand_like", "bernoulli", "normal", "multinomial", "nn.functional.dropout", "empty",
            "new_empty_strided"} <= skipped
    assert not {"nn.functional.normalize", "masked.normalize", "nn.functional.poisson_nll_loss", "__rand__",
                "signal.windows.exponential", "native_dropout_backward"} & skipped
