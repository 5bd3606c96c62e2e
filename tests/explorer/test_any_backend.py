"""Nothing in the engine, the command line or the widgets assumes the PrivateUse1 backend is sim."""
import json
import textwrap

import torch

from pu1_explorer.op_coverage import coverage
from pu1_explorer.fallback_report import monitor_fallbacks
from tests.conftest import run_explorer as explorer, run_forked
from tests.explorer.test_foreign_backend import FOREIGN_BACKEND


def test_python_numbers_reach_the_fallback_kernel_as_the_dispatcher_passed_them():
    """A scalar the dispatcher carried as a tensor is handed back as one (the issue's copysign and fmod)."""
    x = torch.linspace(-2, 2, 9)
    with monitor_fallbacks("sim") as report:
        copysign = torch.copysign(x.to("sim"), -1.0).cpu()
        fmod = torch.fmod(x.to("sim"), 0.7).cpu()
    assert torch.equal(copysign, torch.copysign(x, -1.0))
    assert torch.equal(fmod, torch.fmod(x, 0.7))
    assert report.total >= 1  # the numbers went through the monitor's own kernel, not around it


def test_an_adam_step_runs_under_the_fallback_monitor_and_matches_the_cpu():
    torch.manual_seed(0)
    cpu = torch.nn.Linear(8, 4)
    device = torch.nn.Linear(8, 4).to("sim")
    device.load_state_dict(cpu.state_dict())
    batch = torch.randn(5, 8)
    for model, inputs in ((cpu, batch), (device, batch.to("sim"))):
        optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
        with monitor_fallbacks("sim"):
            model(inputs).square().sum().backward()
            optimizer.step()
    assert torch.equal(device.weight.cpu(), cpu.weight) and torch.equal(device.bias.cpu(), cpu.bias)


def test_sim_fallback_views_device_memory_so_nothing_is_counted_as_copied():
    with monitor_fallbacks("sim") as report:
        torch.special.erfcx(torch.ones(4, device="sim"))
    assert report.total >= 1 and report.copied == 0 and not report.copying_kernels


def test_an_unknown_device_is_one_line_that_names_the_loaded_backend():
    result = explorer("coverage", "--device", "nosuchdev")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "pu1-explorer: error: UnknownDeviceError: unknown device 'nosuchdev': this process knows cpu, meta and "
        "the PrivateUse1 backend 'sim'")


def test_without_a_backend_the_default_device_says_how_to_load_one():
    result = explorer("coverage", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert result.returncode == 1
    assert "no PrivateUse1 backend is loaded" in result.stderr and "--import MODULE" in result.stderr
    assert "classifying" not in result.stderr  # refused before any work


def test_output_paths_and_workloads_are_checked_before_any_work(tmp_path):
    missing = tmp_path / "no-such-folder" / "report.html"
    result = explorer("report", "-o", str(missing))
    assert result.returncode == 1 and "does not exist; create it first" in result.stderr
    assert "[1/3]" not in result.stderr
    unknown = explorer("report", "--workload", "resnet", "-o", str(tmp_path / "r.html"))
    assert unknown.returncode == 1 and "--workload resnet: unknown; give one of mlp, cnn, transformer" in unknown.stderr
    assert "[1/3]" not in unknown.stderr
    bad_import = explorer("coverage", "--import", "torch_nosuchbackend")
    assert bad_import.returncode == 1 and "no module named 'torch_nosuchbackend'" in bad_import.stderr


def test_a_failing_workload_is_on_the_page_and_the_others_still_run(tmp_path):
    failing = tmp_path / "failing.py"
    failing.write_text("import torch\nx = torch.ones(2, device=device)\nraise ValueError('this workload breaks')\n")
    page = tmp_path / "report.html"
    result = explorer("report", "--workload", str(failing), "--workload", "mlp", "--steps", "1", "-o", str(page))
    assert result.returncode == 0, result.stderr  # the page is the result; a failing workload is a finding on it
    assert "warning: 1 of 2 workload(s) failed" in result.stderr and "ValueError: this workload breaks" in result.stderr
    text = page.read_text()
    assert "ValueError: this workload breaks (failing.py:3)" in text
    assert "<td>mlp</td>" in text and "<td>ran</td>" in text


def test_a_backend_that_does_not_autoload_is_imported_by_the_command_line(tmp_path):
    backend = tmp_path / "tiny_backend.py"
    backend.write_text(FOREIGN_BACKEND)
    result = explorer("coverage", "--import", str(backend), "--format", "json", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["label"] == "tiny"  # the default device is the backend just imported
    rows = {row["operator"]: row for row in data["rows"]}
    assert rows["aten::add.Tensor"]["backend"] == "kernel"


def test_coverage_follows_a_convolution_to_the_default_that_only_raises():
    program = FOREIGN_BACKEND + textwrap.dedent("""
        import pu1_explorer
        rows = pu1_explorer.coverage("tiny").by_operator()
        for name in ("aten::convolution_overrideable", "aten::conv2d", "aten::convolution_backward"):
            print(name, rows[name].backend, rows[name].transitive)
    """)
    result = run_forked(["-c", program], TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:3] == [
        "aten::convolution_overrideable composite_explicit missing",  # ATen's default only raises
        "aten::conv2d composite_implicit missing",
        "aten::convolution_backward composite_explicit missing",
    ]
    sim = coverage("sim").by_operator()  # sim registers its own convolution: it runs
    assert sim["aten::conv2d"].transitive == "composite_implicit"


def test_widgets_default_to_the_loaded_backend_and_offer_its_real_name():
    program = FOREIGN_BACKEND + textwrap.dedent("""
        from pu1_explorer.widgets import CoverageExplorer, DispatchTable, DispatchVisualizer, MemoryMonitor
        visualizer = DispatchVisualizer("torch.empty(3, device=device) + torch.empty(3, device=device)")
        print("visualizer", visualizer.device.value, list(visualizer.device.options))
        print("table", list(DispatchTable().tables))
        print("coverage", CoverageExplorer().snapshot.label)
        monitor = MemoryMonitor()
        samples = monitor.run(lambda step: torch.empty(4, device="tiny"), steps=2)
        print("memory", len(samples), monitor.progress.value, "no memory chart" in monitor.static_html())
    """)
    result = run_forked(["-c", program], TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert result.returncode == 0, result.stderr
    answers = ("visualizer ", "table ", "coverage ", "memory ")  # outside a notebook, figures print too
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if line.startswith(answers))
    assert lines["visualizer"] == "tiny ['tiny', 'cpu']"
    assert lines["table"] == "['CPU', 'tiny', 'Meta']"
    assert lines["coverage"] == "tiny"
    assert lines["memory"] == "0 2 True"  # the workload ran both steps; the widget says why there is no chart


def test_without_a_backend_the_widgets_say_so_in_one_line():
    result = run_forked(["-c", "from pu1_explorer.widgets import CoverageExplorer\nCoverageExplorer()"],
                        TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].startswith(
        "pu1_explorer.devices.UnknownDeviceError: this process knows cpu and meta; no PrivateUse1 backend is loaded")


def test_calls_from_the_reference_workloads_name_the_workload_line(fixture_backend_env):
    """The workloads ship inside the explorer's folder, yet the report points into them, not past them."""
    program = textwrap.dedent("""
        import torch, torch_toy
        from pu1_explorer.fallback_report import monitor_fallbacks
        from pu1_explorer.workloads import train
        with monitor_fallbacks("toy") as report:
            train("mlp", "toy", steps=1)
        print(sorted({site for entry in report.calls.values() for site in entry.call_sites}))
    """)
    result = run_forked(["-c", program], **fixture_backend_env)
    assert result.returncode == 0, result.stderr
    assert "explorer/pu1_explorer/workloads.py:" in result.stdout and " in train" in result.stdout, result.stdout
