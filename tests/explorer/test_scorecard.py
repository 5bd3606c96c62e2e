"""The conformance scorecard: probes in fresh processes, crashes and time-outs contained, writers, CLI, widget."""
from __future__ import annotations

import json
import threading
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import pytest

from pu1_explorer.conformance import PROBE_NAMES, OpResult, Probe, ProbeResult, Scorecard, scorecard
from pu1_explorer.conformance.runner import ENDING_HINTS
from tests.conftest import run_explorer as explorer, run_forked
from tests.explorer.scorecard_probes_for_tests import target

HANG = 600  # seconds after which a call that should end is taken to hang (a bound, not a speed)

QUICK_PROBES = ["device module", "torch.accelerator", "allocator statistics", "generator", "serialization",
                "autoload"]


def alive(pid: int) -> bool:
    """Whether a process runs (a killed one may linger as a zombie until init reaps it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def gone_within(pid: int, seconds: float = 60) -> bool:
    """Whether the process ends within `seconds` (waiting only as long as it takes: the bound catches a leak)."""
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not alive(pid)


def ends(call: Callable[[], object], seconds: float = HANG) -> object:
    """Call `call` in a thread and return what it returned or raised; fail if it has not ended after `seconds`."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as error:  # handed back to the test
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"the call still runs after {seconds} s: it hangs"
    return outcome[0]


def test_sim_passes_the_probes_it_implements():
    messages: list[str] = []
    card = scorecard("sim", probes=QUICK_PROBES, progress=messages.append)
    assert [probe.name for probe in card.probes] == QUICK_PROBES
    assert {probe.name: probe.status for probe in card.probes} == dict.fromkeys(QUICK_PROBES, "passed"), \
        [(p.name, p.detail) for p in card.probes if p.status != "passed"]
    assert card.probe("allocator statistics").detail.startswith("memory_allocated +")
    assert "2 device(s)" in card.probe("device module").detail
    assert len(messages) == len(QUICK_PROBES) and messages[-1].startswith(f"[{len(QUICK_PROBES)}/{len(QUICK_PROBES)}]")
    assert card.device == "sim" and card.torch_version.startswith("2.")


def test_crashes_timeouts_failures_and_skips_are_contained(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    extra = [Probe(name, target(name.replace(" ", "_"))) for name in
             ("segfault", "sleeps", "fails", "fails silently", "skips", "exits")]
    card = ends(lambda: scorecard("sim", timeout=12, probes=[p.name for p in extra], extra_probes=extra,
                                  env={"PU1_TEST_PID_FILE": str(pid_file)}))
    assert isinstance(card, Scorecard), card
    results = {probe.name: probe for probe in card.probes}
    assert results["segfault"].status == "crashed" and "SIGSEGV" in results["segfault"].detail
    assert "Segmentation fault" in results["segfault"].log  # faulthandler's report is kept
    assert results["sleeps"].status == "timed out" and results["sleeps"].detail == "killed after 12 s"
    assert results["fails"].status == "failed" and results["fails"].detail == "two ones do not sum to 3"
    assert results["fails silently"].detail == "failed: assert x == 2"  # the failing line when there is no message
    assert results["skips"].status == "skipped" and results["skips"].detail == "nothing to check here"
    assert results["exits"].status == "crashed" and "code 3" in results["exits"].detail
    assert gone_within(int(pid_file.read_text()))  # the whole process group was killed, not only the probe
    # these probes carry no hint of their own: a crash or a time-out says what such an ending usually means
    assert results["segfault"].hint == ENDING_HINTS["crashed"] and results["sleeps"].hint == ENDING_HINTS["timed out"]
    assert results["fails"].hint == "" and results["skips"].hint == ""


def test_an_interrupted_scorecard_kills_its_processes(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    extra = [Probe("sleeps", target("sleeps")), Probe("waits", target("waits"))]

    def interrupt(message: str) -> None:
        raise KeyboardInterrupt(message)

    # the probes' time limit is far beyond the bound of `ends`: only the interruption can end the sleeping probe
    raised = ends(lambda: scorecard("sim", timeout=10 * HANG, probes=["sleeps", "waits"], extra_probes=extra,
                                    progress=interrupt, env={"PU1_TEST_PID_FILE": str(pid_file)}))
    assert isinstance(raised, KeyboardInterrupt) and "waits: skipped" in str(raised), raised
    assert gone_within(int(pid_file.read_text()), 30)


def test_a_sweep_attributes_a_segfault_to_its_operator_and_goes_on(tmp_path):
    crashing = tmp_path / "crash_flip.py"
    crashing.write_text(
        "import os, signal, torch\n"
        "_flip = torch.flip\n"
        "def flip(input, *args, **kwargs):\n"
        "    if input.device.type != 'cpu':\n"
        "        os.kill(os.getpid(), signal.SIGSEGV)\n"
        "    return _flip(input, *args, **kwargs)\n"
        "torch.flip = flip\n")
    card = scorecard("sim", imports=[str(crashing)], probes=["opinfo differential", "opinfo bad inputs"], jobs=1,
                     ops=["add", "flip", "mul", "index_select", "no_such_op"])
    differential = card.probe("opinfo differential")
    statuses = {op.name: op.status for op in differential.ops}
    assert statuses == {"add": "passed", "flip": "crashed", "mul": "passed", "index_select": "passed",
                        "no_such_op": "skipped"}
    assert differential.status == "failed" and "crashed: flip" in differential.detail
    assert differential.counts["crashed"] == 1 and differential.counts["passed"] == 3
    assert "SIGSEGV" in next(op for op in differential.ops if op.name == "flip").detail
    bad_inputs = card.probe("opinfo bad inputs")
    index_select = next(op for op in bad_inputs.ops if op.name == "index_select")
    assert index_select.status == "passed" and index_select.counts["passed"] >= 1  # sim raises like the CPU


def test_bad_arguments_fail_before_any_probe_runs():
    for arguments, message in (({"device": "nosuch"}, "unknown device 'nosuch'"),
                               ({"device": "sim", "probes": ["no such probe"]}, "unknown probe"),
                               ({"device": "sim", "opinfo": "most"}, "opinfo must be"),
                               ({"device": "sim", "imports": ["no_such_module_xyz"]}, "import no_such_module_xyz")):
        messages: list[str] = []
        with pytest.raises(ValueError, match=message):
            scorecard(**arguments, progress=messages.append)
        assert messages == []


def _card(device: str = "toy") -> Scorecard:
    ops = [OpResult("add", "passed", {"passed": 8}), OpResult("flip", "crashed", {}, "the process died of SIGSEGV"),
           OpResult("mul", "mismatched", {"passed": 2, "mismatched": 1}, "float32: Tensor-likes are not close!"),
           OpResult("rand", "skipped", {}, "random")]
    probes = [ProbeResult("device module", "passed", 1.2, "2 device(s)"),
              ProbeResult("generator", "failed", 1.0, "the same seed gave <different> draws",
                          log="Traceback & <stuff>"),
              ProbeResult("pinned memory", "crashed", 0.5, "the process died of SIGABRT"),
              ProbeResult("torch.compile", "timed out", 60.0, "killed after 60 s"),
              ProbeResult("distributed", "skipped", 0.1, "no torch.distributed"),
              ProbeResult("opinfo differential", "failed", 3.0, "1 of 3 ops match",
                          {"passed": 1, "crashed": 1, "mismatched": 1, "skipped": 1}, ops)]
    return Scorecard(device, "2.13.0", "2026-01-01T00:00:00+00:00", 66.0, probes, ["torch_toy"], "quick")


def test_junit_xml_parses_and_its_counts_match():
    card = _card()
    root = ElementTree.fromstring(card.to_junit_xml())
    assert root.tag == "testsuites"
    probes, sweep = root.findall("testsuite")
    assert probes.get("name") == "scorecard.toy" and sweep.get("name") == "scorecard.toy.opinfo differential"
    assert (probes.get("tests"), probes.get("failures"), probes.get("errors"), probes.get("skipped")) == \
        ("6", "2", "2", "1")
    assert (sweep.get("tests"), sweep.get("failures"), sweep.get("errors"), sweep.get("skipped")) == \
        ("4", "1", "1", "1")
    generator = probes.find("testcase[@name='generator']")
    assert generator.find("failure").get("message") == "the same seed gave <different> draws"
    assert generator.find("system-err").text == "Traceback & <stuff>"
    assert probes.find("testcase[@name='torch.compile']/error").get("type") == "timed out"


def test_json_round_trips_and_html_is_self_contained():
    card = _card()
    again = Scorecard.from_json(card.to_json())
    assert again == card
    written_by_version_1 = json.loads(card.to_json())  # each probe also had its guide step then
    for probe in written_by_version_1["probes"]:
        probe["capability"] = "1. device module"
    assert Scorecard.from_json(json.dumps({**written_by_version_1, "schema_version": 1})) == card
    written_by_version_2 = json.loads(card.to_json())  # no hints, no swept dtypes
    for probe in written_by_version_2["probes"]:
        del probe["hint"]
        for op in probe["ops"]:
            del op["dtype"]
    assert Scorecard.from_json(json.dumps({**written_by_version_2, "schema_version": 2})) == card
    assert json.loads(card.to_json())["summary"] == {"passed": 1, "failed": 2, "skipped": 1, "crashed": 1,
                                                     "timed out": 1}
    page = card.to_html()
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page.lower()
    assert "http://" not in page and "https://" not in page and "<link" not in page.lower()
    assert "the same seed gave &lt;different&gt; draws" in page and "Traceback &amp; &lt;stuff&gt;" in page
    assert "#c62828" in page and "#6a1b9a" in page and "#ef6c00" in page  # a colour per status
    assert page.index("<code>flip</code>") < page.index("<code>add</code>")  # problems first


def test_the_widget_shows_scorecards_side_by_side():
    from pu1_explorer.widgets import ScorecardView

    sim = _card("sim")
    toy = _card("toy")
    toy.probes = toy.probes[:2]
    view = ScorecardView([sim, toy])
    page = view.static_html()
    assert "<th>sim</th>" in page and "<th>toy</th>" in page and "not run" in page
    assert "flip" in page and "SIGSEGV" in page
    view.problems_only.value = True
    assert "device module" not in view.output.value and "generator" in view.output.value
    assert "<th>sim</th>" in ScorecardView(sim).static_html()


def test_the_cli_writes_html_junit_json_and_the_device_tests_configuration(tmp_path):
    result = explorer("scorecard", "--device", "sim", "--probe", "device module", "--probe", "autoload",
                      "--guide", "torch_sim:GUIDE", "--guide-url", "https://example.org/notebooks/",
                      "-o", str(tmp_path))
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "scorecard.json").read_text())
    assert [p["status"] for p in data["probes"]] == ["passed", "passed"]
    ElementTree.parse(tmp_path / "scorecard.xml")
    page = (tmp_path / "scorecard.html").read_text()
    assert "PrivateUse1 scorecard: <code>sim</code>" in page
    assert '<a href="https://example.org/notebooks/guide_11_autoload/">11. ' in page
    configuration = json.loads((tmp_path / "device_tests.json").read_text())
    assert configuration["device"] == "sim" and configuration["op_allowlist"] is None  # no sweep ran
    assert "[1/2]" in result.stderr and "[2/2]" in result.stderr


def test_the_cli_refuses_bad_input_in_one_line_before_any_probe(tmp_path):
    cases = (("--device", "nosuch", "-o", str(tmp_path)),
             ("--device", "sim", "-o", str(tmp_path / "missing")),
             ("--device", "sim", "--probe", "warp drive", "-o", str(tmp_path)),
             ("--device", "sim", "--guide", "no_such_module_xyz:GUIDE", "-o", str(tmp_path)))
    for arguments in cases:
        result = explorer("scorecard", *arguments)
        assert result.returncode in (1, 2), result.stderr
        errors = [line for line in result.stderr.splitlines() if "error" in line]
        assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
        assert "[1/" not in result.stderr and not list(tmp_path.glob("scorecard.*"))
    assert explorer("scorecard", "--opinfo", "most").returncode == 2


# A stand-in for a backend's guide: the shape `pu1_explorer.conformance.GradedStep` documents.
GUIDE = [SimpleNamespace(number=1, name="device_module", title="device module", probes=("device module",)),
         SimpleNamespace(number=7, name="generator", title="generator", probes=("generator",)),
         SimpleNamespace(number=5, name="operators", title="operators",
                         probes=("operators", "opinfo differential"))]


def test_a_guide_labels_each_probe_with_its_step():
    card = _card()
    page = card.to_html(guide=GUIDE)
    assert "<th>guide step</th>" in page and "7. generator" in page and "5. operators" in page
    assert "<th>guide step</th>" not in card.to_html() and "7. generator" not in card.to_html()
    from pu1_explorer.widgets import ScorecardView

    view = ScorecardView(card, guide=GUIDE)
    assert "step 1. device module" in view.table_html() and "step 7. generator" in view.table_html()
    assert "step " not in ScorecardView(card).table_html()
    hover = [text for trace in view.figure().data for text in trace.customdata]
    assert "step 5. operators: 1 of 3 ops match" in hover


def test_every_probe_is_a_documented_function_of_the_probes_module():
    from pu1_explorer.conformance import PROBES, QUICK_OPS, probes
    from pu1_explorer.conformance.harness import resolve

    assert len(PROBE_NAMES) == len(set(PROBE_NAMES)) == len(PROBES) + 2
    for probe in PROBES:
        function = resolve(probe.target)
        assert function.__module__ == probes.__name__ and function.__doc__, probe
    assert 50 <= len(QUICK_OPS) == len(set(QUICK_OPS))


FINDS_THE_TEST_FUNCTION = """
import json, unittest
from pu1_explorer.conformance import sweep_child as child
from torch.testing._internal import common_utils
from torch.testing._internal.opinfo import core

torchs = common_utils.extract_test_fn

class TestFinding(unittest.TestCase):
    def test_found(self):
        self.results = [extract() for extract in (torchs, common_utils.extract_test_fn, core.extract_test_fn)]

child.find_the_test_function_from_frames()
case = TestFinding("test_found")
case.run()
outside = [extract() for extract in (torchs, common_utils.extract_test_fn, core.extract_test_fn)]
replaced = common_utils.extract_test_fn is not torchs and core.extract_test_fn is common_utils.extract_test_fn
print(json.dumps({"replaced": replaced,
                  "inside": [getattr(found, "__qualname__", None) for found in case.results],
                  "outside": [found is None for found in outside]}))
"""


def test_the_sweeps_find_the_running_test_function_as_torch_does_without_reading_sources():
    # torch's own search reads every frame's source lines for each sample input (most of a sweep's time); the sweep
    # processes replace it with a search over the frames alone, which must answer as torch's does
    result = run_forked(["-c", FINDS_THE_TEST_FUNCTION])
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout) == {"replaced": True, "inside": ["TestFinding.test_found"] * 3,
                                         "outside": [True, True, True]}


def test_every_probe_and_sweep_says_in_one_line_what_usually_causes_its_failure():
    from pu1_explorer.conformance import PROBES
    from pu1_explorer.conformance.harness import hint, resolve
    from pu1_explorer.conformance.sweeps import PROBLEM_ORDER, SWEEP_HINTS

    for probe in PROBES:
        text = resolve(probe.target).hint
        assert 40 <= len(text) <= 300 and "\n" not in text, probe
    assert "DeviceGuardImplInterface" in resolve(PROBES[1].target).hint  # torch.accelerator: the guard and hooks
    assert all(set(hints) == set(PROBLEM_ORDER) for hints in SWEEP_HINTS.values())
    for bad in ("", "two\nlines"):
        with pytest.raises(ValueError, match="one line"):
            hint(bad)


def _accelerator_card() -> Scorecard:
    from pu1_explorer.conformance import probes

    failed = ProbeResult("torch.accelerator", "failed", 0.4, "RuntimeError: The device index is out of range. It "
                         "must be in [0, 2), but got -1.", hint=probes.accelerator.hint)
    return Scorecard("vendor", "2.13.0", "2026-01-01T00:00:00+00:00", 2.0,
                     [ProbeResult("device module", "passed", 0.3, "2 device(s)"), failed])


def test_a_failed_probe_says_what_usually_causes_it_and_links_to_its_guide_step():
    import torch_sim

    from pu1_explorer.widgets import ScorecardView

    card = _accelerator_card()
    page = card.to_html(guide=torch_sim.GUIDE)
    assert page.count("<b>usual cause:</b> torch.accelerator asks PrivateUse1HooksInterface") == 2  # table, details
    assert '<a href="../guide_02_hooks/">guide step 2. ' in page  # torch_sim's guide grades it in step 2
    assert page.count("usual cause") == 2  # the probe that passed has none
    elsewhere = card.to_html(guide=torch_sim.GUIDE, guide_url="https://example.org/notebooks")
    assert '<a href="https://example.org/notebooks/guide_02_hooks/">' in elsewhere
    plain = card.to_html()
    assert "usual cause:</b> torch.accelerator asks" in plain and "guide_02" not in plain
    view = ScorecardView(card, guide=torch_sim.GUIDE)
    table = view.table_html()
    assert "usual cause:</b> torch.accelerator asks PrivateUse1HooksInterface" in table
    assert "href='../guide_02_hooks/'" in table and table.count("usual cause") == 1
    assert "guide_02" not in ScorecardView(card).table_html()


def test_the_guide_links_point_at_the_sites_pages_of_the_guide_notebooks():
    import torch_sim

    from pu1_explorer.conformance import step_page

    root = Path(__file__).resolve().parents[2]
    nav = (root / "mkdocs.yml").read_text()
    for step in torch_sim.GUIDE:
        page = step_page(step)
        stem = page.removeprefix("../").removesuffix("/")
        assert (root / "notebooks" / f"{stem}.ipynb").is_file(), page  # mkdocs serves it as notebooks/<stem>/
        assert f"notebooks/{stem}.ipynb" in nav
