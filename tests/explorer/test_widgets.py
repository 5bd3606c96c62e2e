"""The widgets as objects: set values, click buttons, check the figure data and the HTML they leave."""
import pytest
import torch

from pu1_explorer.widgets import (CoverageExplorer, DispatchTable, DispatchVisualizer, FallbackMonitor, GuideStepper,
                              MemoryMonitor)
from pu1_explorer.widgets.figures import compare_figure, trace_figure


def marker_traces(figure):
    return [trace for trace in figure.data if trace.mode == "markers"]


def test_visualizer_draws_lanes_in_dispatch_order_and_compares_devices():
    widget = DispatchVisualizer("x = torch.ones(3, device=device, requires_grad=True)\n(x * 2).sum().backward()")
    assert [t.device for t in widget.traces] == ["sim", "cpu"]
    figure = widget.figure()
    lanes = list(figure.layout.yaxis.categoryarray)[::-1]
    assert lanes.index("AutogradPrivateUse1") < lanes.index("PrivateUse1") < lanes.index("CPU")
    kinds = {trace.name for trace in marker_traces(figure)}
    assert {"autograd", "kernel", "fallthrough"} <= kinds
    symbols = {symbol for trace in marker_traces(figure) for symbol in trace.marker.symbol}
    assert {"square", "diamond"} <= symbols  # forward and backward hops look different
    buttons = [button.label for button in figure.layout.updatemenus[0].buttons]
    assert buttons == ["all hops", "hide fallthroughs", "collapse decompositions"]


def test_visualizer_rerun_with_new_code_and_hop_details():
    widget = DispatchVisualizer("torch.ones(2, device=device)", compare_with=None)
    widget.code.value = "torch.special.erfcx(torch.ones(2, device=device))"
    widget.run_button.click()
    assert any(hop.kind == "fallback" for hop in widget.traces[0].hops)
    fallback = next(hop for hop in widget.traces[0].hops if hop.kind == "fallback")
    widget.hop.value = fallback.index
    assert "aten::special_erfcx.out" in widget.details.value and "fallback" in widget.details.value
    assert "Tensor(a!) out" in widget.details.value  # the schema is shown


def test_visualizer_survives_errors_and_endless_code():
    widget = DispatchVisualizer("x = torch.ones(2, device=device)\n1 / 0", compare_with=None)
    assert "ZeroDivisionError" in widget.status.value and "up to the error" in widget.status.value
    assert widget.traces[0].hops  # the hops before the error are kept
    widget.timeout = 1
    widget.code.value = "while True:\n    pass"
    widget.run_button.click()
    assert "TimeLimitExceeded" in widget.status.value
    widget.code.value = "torch.ones(1, device=device)"
    widget.run_button.click()
    assert widget.traces[0].error is None and "hops on sim" in widget.status.value


def test_visualizer_accepts_a_callable():
    def workload():
        torch.ones(2, device="sim").relu()

    widget = DispatchVisualizer(workload, compare_with=None)
    assert widget.code.disabled
    assert "aten::relu" in {hop.operator for hop in widget.traces[0].hops}


def test_dispatch_table_grid_and_suggestions():
    widget = DispatchTable("silu", backends=("CPU", "sim"))
    grid = widget.figure().data[0]
    assert list(grid.x) == ["CPU", "sim"] and "Autograd" in grid.y
    autograd_row = list(grid.y).index("Autograd")
    assert grid.text[autograd_row][1] == "kernel"  # sim's own silu autograd kernel
    assert "autograd.py" in grid.hovertext[autograd_row][1]
    widget.operator.value = "sillu"
    assert "did you mean aten::silu" in widget.status.value
    widget.operator.value = "mul.Tensor"
    assert widget.resolved == "aten::mul.Tensor"


def test_coverage_explorer_filters_drills_down_and_diffs():
    widget = CoverageExplorer(device="sim", compare_with="CPU")
    everything = len(widget.filtered())
    widget.status.value = "fallback"
    widget.core_only.value = True
    rows = widget.filtered()
    assert 0 < len(rows) < everything and all(row.core and row.transitive == "fallback" for row in rows)
    assert f"<b>{len(rows)}</b>" in widget.count.value
    widget.search.value = "pool"
    assert all("pool" in row.operator for row in widget.filtered())
    widget.drill.value = "aten::mul.Tensor"
    assert widget.drilled.layout.title.text.startswith("aten::mul.Tensor")
    assert list(widget.drilled.data[0].x) == ["CPU", "PrivateUse1"]
    assert "overloads differ from CPU" in widget.differences.value
    treemap = widget.figure().data[0]
    assert "fallback" in treemap.labels and treemap.values[0] == 193  # core only


def test_fallback_and_memory_monitors_run_workloads_with_progress():
    x = torch.rand(8, device="sim")
    fallbacks = FallbackMonitor()
    report = fallbacks.run(lambda step: torch.special.erfcx(x), steps=4)
    assert report.total == 4 and fallbacks.progress.value == 4
    assert fallbacks.figure().data[0].y[-1] == "aten::special_erfcx.out"
    assert "aten::special_erfcx.out" in fallbacks.table_html()
    keep = []
    memory = MemoryMonitor()
    samples = memory.run(lambda step: keep.append(torch.empty(1 << 16, device="sim:1")), steps=3)
    device_one = [sample["allocated"] for sample in samples if sample["device"] == 1]
    assert device_one == sorted(device_one) and device_one[-1] - device_one[0] >= 3 << 18
    assert any(trace.name == "sim:1 allocated" for trace in memory.figure().data)


def test_monitor_reports_a_failing_step():
    monitor = FallbackMonitor()
    monitor.run(lambda step: 1 / 0 if step == 1 else None, steps=3)
    assert "step 1 failed: ZeroDivisionError" in monitor.status.value and monitor.progress.value == 1
    with pytest.raises(ValueError, match="steps must be at least 1"):
        monitor.run(lambda step: None, steps=0)


def test_guide_stepper_moves_and_checks():
    widget = GuideStepper(start="generator")
    assert "Step 7" in widget.body.value and "backend/generator.py" in widget.body.value
    widget.check_button.click()
    check = widget.checks["generator"]
    assert check.demonstrates_the_step and "not installed" in check.before
    assert ">fails</b>" in widget.body.value and ">works</b>" in widget.body.value
    widget.next.click()
    assert widget.step.name == "autograd" and widget.progress.value == 8
    widget.back.click()
    widget.back.click()
    assert widget.step.name == "streams_events"
    html = widget.static_html()
    assert html.count("<details") >= 11 * 3 and "AutogradPrivateUse1" in html
    with pytest.raises(ValueError, match="unknown step 'kernels'"):
        GuideStepper(start="kernels")


def test_static_html_draws_without_a_kernel(monkeypatch):
    monkeypatch.setenv("EXPLORER_STATIC", "1")
    widget = DispatchVisualizer("torch.ones(2, device=device).neg()", compare_with=None)
    bundle = widget._repr_mimebundle_()
    assert set(bundle) == {"text/html", "text/plain"}
    html = bundle["text/html"]
    assert "Plotly.newPlot" in html and "<script src" not in html  # draws with the page's plotly.js
    assert len(html) < 200_000  # no copy of plotly.js per figure


def test_big_traces_are_cut_to_the_drawing_limit():
    widget = DispatchVisualizer("for _ in range(300): torch.ones(2, device=device).neg()", compare_with=None,
                                max_hops=500)
    assert len(widget.traces[0].hops) > 500
    drawn = sum(len(trace.x) for trace in marker_traces(widget.figure()))
    assert drawn == 500 and "drawing the first 500" in widget.status.value
    assert compare_figure(widget.traces * 2, max_hops=100).layout.updatemenus
    assert trace_figure(widget.traces[0], max_hops=100).layout.title.text.startswith("Dispatcher trace on sim")
