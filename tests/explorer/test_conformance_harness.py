"""The helpers a probe process uses (compare, skip, report, messages, imports) and its programs, in this process."""
from __future__ import annotations

import json

import pytest
import torch

from pu1_explorer.conformance import harness, probe_child, probes
from tests.explorer.scorecard_probes_for_tests import fails_silently, target


def test_compare_passes_within_tolerance_and_names_what_differs(monkeypatch):
    monkeypatch.setitem(harness._state, "device", "sim")
    harness.compare(torch.ones(3, device="sim"), torch.ones(3) + 1e-5, "close enough")
    with pytest.raises(AssertionError, match=r"^add: Tensor-likes are not close!$"):
        harness.compare(torch.ones(3, device="sim"), torch.zeros(3), "add")
    with pytest.raises(AssertionError, match="copy: the result is on cpu, not on sim"):
        harness.compare(torch.ones(3), torch.ones(3), "copy")
    harness.compare(2.0, 2.0005)  # plain numbers too, and no name


def test_skip_and_report():
    with pytest.raises(harness.Skipped, match="needs two devices"):
        harness.skip("needs two devices")
    harness.take_report()
    harness.report("3 things checked", things=3)
    assert harness.take_report() == ("3 things checked", {"things": 3})
    assert harness.take_report() is None


def _raised(function) -> BaseException:
    try:
        function()
    except BaseException as error:
        return error
    raise AssertionError("nothing raised")


def test_describe_gives_one_line():
    # a module pytest does not rewrite: its bare assert has no message, as in a probe process
    assert harness.describe(_raised(lambda: fails_silently("sim", []))) == "failed: assert x == 2"
    assert harness.describe(AssertionError("what differs\nmore")) == "what differs"
    assert harness.describe(RuntimeError("  \n  no kernel\n")) == "RuntimeError: no kernel"
    assert harness.describe(KeyError()) == "KeyError"
    assert harness.first_line("x" * 400) == "x" * 300 + "..."


def test_a_message_goes_out_marked_and_comes_back(capfd):
    print("the program's own output")
    harness.emit("op", op="add", counts={"passed": 2})
    lines = capfd.readouterr().out.splitlines()
    assert harness.parse_message(lines[0]) is None
    assert harness.parse_message(lines[1]) == {"kind": "op", "op": "add", "counts": {"passed": 2}}


def test_imports_and_probe_references(tmp_path):
    module = tmp_path / "conformance_import_example.py"
    module.write_text("VALUE = 42\n")
    assert harness.resolve(f"{module}:VALUE") == 42
    assert harness.resolve("pu1_explorer.conformance.probes:operators").__name__ == "operators"
    with pytest.raises(ImportError, match="no such file"):
        harness.import_spec(str(tmp_path / "missing.py"))
    with pytest.raises(ValueError, match="a probe is 'module:function' or 'file.py:function', not 'operators'"):
        harness.resolve("operators")
    with pytest.raises(RuntimeError, match="import no_such_module_xyz failed: ModuleNotFoundError"):
        harness.setup("sim", ["no_such_module_xyz"])


def _child_messages(capfd, config: dict) -> list[dict]:
    probe_child.main([json.dumps(config)])
    return [message for line in capfd.readouterr().out.splitlines()
            if (message := harness.parse_message(line)) is not None]


def test_the_probe_program_reports_each_ending(capfd, monkeypatch):
    monkeypatch.setitem(harness._state, "device", None)
    config = {"device": "sim", "imports": [], "uses_imports": True}
    cases = {"fails": ("failed", "two ones do not sum to 3"), "skips": ("skipped", "nothing to check here"),
             "fails_silently": ("failed", "failed: assert x == 2")}
    for name, (status, detail) in cases.items():
        messages = _child_messages(capfd, {**config, "target": target(name)})
        # first the probe's hint (these test probes have none), sent before the probe runs, then its result
        assert messages == [{"kind": "hint", "hint": ""}, {"kind": "result", "status": status, "detail": detail}]
    passed = _child_messages(capfd, {**config, "target": "pu1_explorer.conformance.probes:operators"})
    assert passed[0] == {"kind": "hint", "hint": probes.operators.hint}
    assert passed[1]["status"] == "passed" and "match the CPU" in passed[1]["detail"]
    found = _child_messages(capfd, {"preflight": True, "device": "sim", "imports": []})
    assert found == [{"kind": "preflight", "name": "sim", "version": torch.__version__, "module": True,
                      "missing": []}]
