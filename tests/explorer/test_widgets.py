"""The widgets as objects: set values, click buttons, check the figure data and the HTML they leave."""
import re

import pytest
import torch

from pu1_explorer.widgets import (CoverageExplorer, DispatchTable, DispatchVisualizer, FallbackMonitor, GuideStepper,
                              MemoryMonitor, guide_step)
from pu1_explorer.baselines import baseline
from pu1_explorer.op_coverage import core_operators
from pu1_explorer.widgets.figures import WEBGL_ABOVE_HOPS, compare_figure, trace_figure
from pu1_explorer.widgets.base import escape
from torch_sim import GUIDE


def marker_traces(figure):
    """The traces that draw hops (the legend has entries of its own)."""
    return [trace for trace in figure.data if trace.mode == "markers" and trace.showlegend is False]


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
    assert "fallback" in treemap.labels and treemap.values[0] == len(core_operators())  # core only
    widget.search.value = ""
    widget.among.value = "cuda"
    among_cuda = widget.filtered()
    assert among_cuda and all(row.operator in baseline("cuda").operators for row in among_cuda)
    assert "sim has its own kernel for" in widget.count.value and "core-ATen kernels" in widget.count.value
    assert "<th>CUDA</th>" in widget.table.value and "<td>kernel</td>" in widget.table.value


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
    widget = GuideStepper(GUIDE, start="generator")
    assert "Step 7" in widget.body.value and "backend/torch_sim/generator.py" in widget.body.value
    widget.check_button.click()
    check = widget.checks["generator"]
    assert check.demonstrates_the_step and "implement `getNewGenerator`" in check.before  # PyTorch's own error
    assert ">fails</b>" in widget.body.value and ">works</b>" in widget.body.value
    widget.next.click()
    assert widget.step.name == "autograd" and widget.progress.value == 8
    widget.back.click()
    widget.back.click()
    assert widget.step.name == "streams_events"
    html = widget.static_html()
    assert html.count("<details") >= 11 * 3 and "AutogradPrivateUse1" in html
    with pytest.raises(ValueError, match="unknown step 'kernels'"):
        GuideStepper(GUIDE, start="kernels")
    with pytest.raises(ValueError, match="unknown step 'kernels'; the steps are: device_module, hooks"):
        GuideStepper(GUIDE, only=["kernels"])
    with pytest.raises(ValueError, match="the guide has no steps: pass a backend's guide, e.g. torch_sim.GUIDE"):
        GuideStepper([])


def test_before_operators_exist_the_coverage_line_says_there_is_no_kernel_yet():
    from pu1_explorer.guide import StepCheck
    from pu1_explorer.widgets.guide import check_html

    early = StepCheck("hooks", False, "error", True, "ok", 59.42, 59.42, [], runnable_before=0, runnable_after=0)
    html = check_html(early, "sim")
    assert "no kernel and no fallback yet" in html and "run without the fallback" not in html
    later = StepCheck("operators", False, "error", True, "ok", 59.42, 64.92, [], runnable_before=0, runnable_after=900)
    assert "59.42% → 64.92% run without the fallback" in check_html(later, "sim")


def test_a_guide_step_page_checks_its_step_and_shows_the_check_program():
    page = guide_step(GUIDE, "guard")
    assert [step.name for step in page.steps] == ["guard"] and page.checks["guard"].demonstrates_the_step
    assert "set_device_index" in page.body.value and "not linked with support for sim" in page.body.value
    assert "backend/torch_sim/csrc/guard.cpp" in page.static_html() and "C10_REGISTER_GUARD_IMPL" in page.static_html()
    # the site shows the error before the step as text, outside every element a reader has to unfold
    unfolded = re.sub(r"<details.*?</details>", "", page.static_html(), flags=re.DOTALL)
    assert "<details" not in unfolded and escape(page.checks["guard"].before) in unfolded


def test_the_guide_takes_any_backends_steps_as_data(tmp_path):
    from types import SimpleNamespace

    from pu1_explorer.guide import run_check

    (tmp_path / "toy_bringup.py").write_text("import os\n\ndef up():\n    print('up to', os.environ['TOY_STEP'])\n")
    program = tmp_path / "check.py"
    program.write_text("import os\nprint('check sees', os.environ.get('TOY_STEP'), os.environ['TOY_X'])\n")
    bring_up = SimpleNamespace(device="toy", function="toy_bringup:up", variable="TOY_STEP",
                               environment={"TOY_X": "x", "PYTHONPATH": str(tmp_path)})
    source = SimpleNamespace(caption="toy's code", path="toy/a.py", text="x = 1", language="python")
    steps = [SimpleNamespace(number=number, name=name, title=f"The {name}", probes=(), explanation="Why `it` matters.",
                             sources=[source], check_program=program, checks_autoload=False, bring_up=bring_up)
             for number, name in enumerate(["first", "second"], start=1)]
    assert run_check(steps[1], "first").output == "up to first\ncheck sees first x\n"
    assert run_check(steps[0], None).output == "check sees None x\n"  # before the first step: nothing brought up
    unnamed = SimpleNamespace(**{**vars(bring_up), "function": "toy_bringup"})
    assert run_check(SimpleNamespace(**{**vars(steps[1]), "bring_up": unnamed}), "first").error == (
        "ValueError: --bring-up 'toy_bringup': expected 'module:function', e.g. 'torch_sim:bring_up'")
    page = GuideStepper(steps, start="second").body.value
    assert "Step 2: The second" in page and "toy&#x27;s code <code>toy/a.py</code>" in page and "check sees" in page


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


def test_a_trace_draws_as_svg_up_to_plotly_expresss_webgl_threshold_and_with_webgl_above_it():
    """SVG needs no WebGL context (slow to start, and a browser allows only a few at once); a long trace keeps WebGL."""
    widget = DispatchVisualizer("for _ in range(600): torch.ones(2, device=device).neg()", compare_with=None)
    trace = widget.traces[0]
    assert len(trace.hops) > WEBGL_ABOVE_HOPS
    assert {part.type for part in marker_traces(trace_figure(trace, max_hops=WEBGL_ABOVE_HOPS))} == {"scatter"}
    assert {part.type for part in marker_traces(trace_figure(trace))} == {"scattergl"}


def test_the_legend_keeps_what_the_remaining_markers_mean_when_decompositions_collapse():
    widget = DispatchVisualizer(compare_with=None)
    figure = widget.figure()
    collapse = next(button for button in figure.layout.updatemenus[0].buttons if button.label == "collapse decompositions")
    visible = collapse.args[0]["visible"]
    shown_kinds = {trace.name for trace, on in zip(figure.data, visible) if on and trace in marker_traces(figure)}
    legend = {trace.name for trace, on in zip(figure.data, visible) if on and trace.showlegend is not False}
    assert "autograd" in shown_kinds and {kind.replace("_", " ") for kind in shown_kinds} <= legend
    assert any(name.startswith("backward pass") for name in legend)


def test_the_buttons_sit_between_the_title_and_the_first_panel_title():
    widget = DispatchVisualizer()
    figure = widget.figure()
    layout = figure.layout
    plot_height = layout.height - layout.margin.t - layout.margin.b
    buttons_top_px = (layout.updatemenus[0].y - 1) * plot_height  # above the plot area, in pixels
    panel_title = next(annotation for annotation in layout.annotations if annotation.text == "on sim")
    assert panel_title.y == 1 and panel_title.yanchor == "bottom"
    assert buttons_top_px >= 30 + 20  # the buttons (30 px) clear the panel title (20 px) below them
    assert buttons_top_px <= layout.margin.t - 30  # and stay under the figure's title
    assert all(trace.marker.size >= 6 for trace in marker_traces(figure))


def test_the_memory_chart_leaves_out_series_that_stay_at_zero():
    from pu1_explorer.widgets.figures import memory_figure

    samples = [{"device": device, "step": step, "allocated": (step << 20) * (device == 0), "reserved": (4 << 20) * (device == 0),
                "peak": (step << 20) * (device == 0)} for device in (0, 1) for step in range(3)]
    figure = memory_figure(samples, {0: 1 << 30, 1: 1 << 30}, device_type="mydev")
    assert sorted(trace.name for trace in figure.data) == ["mydev:0 allocated", "mydev:0 peak", "mydev:0 reserved"]
    assert "mydev:1: nothing allocated" in figure.layout.title.text and "<br>" in figure.layout.title.text


def test_a_step_page_shows_the_python_module_and_the_cpp_file_highlighted_and_no_raw_markdown():
    page = GuideStepper(GUIDE, start="distributed", only=["distributed"]).static_html()
    assert "<h3>" not in page  # the page's own heading and text say what the step is
    assert "backend/torch_sim/distributed.py" in page and "backend/torch_sim/csrc/distributed.cpp" in page
    assert "c10d::Backend" in page and "<span style=" in page  # the real C++, highlighted
    assert "white-space:pre;" in page and "pre-wrap" not in page.split("The code of this step")[1]
    live = GuideStepper(GUIDE, start="distributed").body.value
    introduction = live.split("<h4>The check</h4>")[0]
    assert introduction.count("Step 14") == 1 and "`" not in introduction and "<code>" in introduction


def test_the_fallback_table_keeps_operator_names_whole():
    x = torch.rand(4, device="sim")
    monitor = FallbackMonitor()
    monitor.run(lambda step: torch.special.erfcx(x), steps=1)
    assert "<code style='white-space:nowrap'>aten::special_erfcx.out</code>" in monitor.table_html()


def test_coverage_by_step_shows_where_operators_autograd_and_autocast_arrive():
    from pu1_explorer.guide import coverage_by_step
    from pu1_explorer.widgets.figures import bringup_coverage_figure

    progress = {row.step: row for row in coverage_by_step(GUIDE)}
    assert progress["allocator"].counts["kernel"] == 0 and progress["allocator"].counts["fallback"] == 0
    assert progress["operators"].counts["kernel"] > 100 and progress["operators"].counts["missing"] == 0
    assert progress["generator"].autograd_kernels == 0 < progress["autograd"].autograd_kernels
    assert progress["autograd"].autocast_kernels == 0 < progress["amp"].autocast_kernels
    figure = bringup_coverage_figure(list(progress.values()), highlight="amp")
    assert len(figure.data[0].x) == len(progress) and figure.layout.shapes


def test_the_coverage_page_lists_every_overload_with_a_search_box(monkeypatch):
    monkeypatch.setenv("EXPLORER_STATIC", "1")
    widget = CoverageExplorer(device="sim")
    page = widget.static_html()
    assert page.count("<tr><td><code style='white-space:nowrap'>") == len(widget.snapshot.rows) > 2000
    assert "type='search'" in page and "oninput=" in page
    # its thousands of rows are laid out only once the box scrolls into view, not while the page loads
    assert "content-visibility:auto" in page.split("<table>")[0].rsplit("<div", 1)[1]
    assert "sim has its own kernel for" in page and escape("of CUDA's") in page


def test_a_figure_for_the_page_carries_the_template_defaults_of_its_own_trace_types_only():
    import json

    import plotly.graph_objects as go

    from pu1_explorer.widgets.base import figure_html, with_used_template

    figure = go.Figure([go.Bar(x=[1], y=[2]), go.Scatter(x=[1], y=[3])])
    assert {"bar", "scatter", "heatmap", "histogram"} <= set(figure.layout.template.data.to_plotly_json())
    assert set(with_used_template(figure)["layout"]["template"]["data"]) == {"bar", "scatter"}
    html = figure_html(figure)
    layout_start = re.search(r'\],\s*\{"template"', html).start() + 1
    layout, _ = json.JSONDecoder().raw_decode(html, html.index("{", layout_start))
    assert set(layout["template"]["data"]) == {"bar", "scatter"}
    assert layout["template"]["layout"] == figure.layout.template.layout.to_plotly_json()  # the look is kept
