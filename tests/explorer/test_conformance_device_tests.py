"""What a scorecard hands a vendor beyond its verdict: PyTorch's device-generic tests configured from its findings,
and a missing dependency of its own reported as such, never as the device's failure."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pu1_explorer.conformance import OpResult, ProbeResult, Scorecard, probes, scorecard
from pu1_explorer.conformance.device_tests import PROBE_EXCLUSIONS, SWEEP_TESTS, configuration, torch_test_configs
from pu1_explorer.conformance.processes import child_environment
from pu1_explorer.conformance.sweeps import SWEEP_HINTS, sweep_chunk, sweep_result

HERE = Path(__file__).resolve().parent
BROKEN = str(HERE / "sim_with_broken_ops.py")
DEVICE_GENERIC = HERE / "device_generic_for_tests.py"
SWEPT = ["add", "mul", "flip", "tril", "nn.functional.dropout"]


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
    run = subprocess.run([sys.executable, str(DEVICE_GENERIC)], capture_output=True, text=True, env=env,
                         timeout=600, cwd=HERE)
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


def _without_expecttest(folder: Path) -> dict[str, str]:
    """An environment where `import expecttest` fails, as on an installation without it."""
    (folder / "expecttest.py").write_text('raise ModuleNotFoundError("No module named \'expecttest\'", '
                                          'name="expecttest")\n')
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))}


def test_without_expecttest_the_scorecard_says_what_to_install_before_any_probe(tmp_path):
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    env = {**child_environment(_without_expecttest(shadow)), "SIM_FALLBACK": "silent"}
    result = subprocess.run([sys.executable, "-m", "pu1_explorer", "scorecard", "--device", "sim", "--probe",
                             "device module", "--probe", "opinfo differential", "-o", str(tmp_path)],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "MissingDependencyError" in errors[0] and "pip install expecttest" in errors[0]
    assert "[1/" not in result.stderr and not list(tmp_path.glob("scorecard.*"))
    # without the sweeps the scorecard needs nothing more
    result = subprocess.run([sys.executable, "-m", "pu1_explorer", "scorecard", "--device", "sim", "--probe",
                             "device module", "-o", str(tmp_path)], capture_output=True, text=True, env=env,
                            timeout=300)
    assert result.returncode == 0, result.stderr


def test_a_sweep_process_without_expecttest_skips_its_operators_instead_of_failing_them(tmp_path):
    env = child_environment(_without_expecttest(tmp_path))
    results, _ = sweep_chunk([("differential", "add"), ("differential", "mul")], "sim", [], env, 120, 2)
    assert {op.status for op in results.values()} == {"skipped"}
    assert all("pip install expecttest" in op.detail for op in results.values())
    sweep = sweep_result("opinfo differential", "differential", list(results.values()), 0.0, "")
    assert sweep.status == "skipped" and "pip install expecttest" in sweep.detail and not sweep.hint
