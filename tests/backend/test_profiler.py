"""Step 12, profiler: sim's kernels in torch.profiler's tables and Chrome traces, with real times."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from pu1_explorer import timeline

SIM_ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def matmul_and_relu(device: str = "sim") -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(128, 128, generator=generator).to(device), torch.randn(128, generator=generator).to(device)


def sim_kernels(prof) -> list:
    return [event for event in prof.events() if event.device_type == DeviceType.PrivateUse1]


def test_every_operator_that_computes_on_sim_has_one_kernel_linked_to_it():
    a, bias = matmul_and_relu()
    with profile(activities=SIM_ACTIVITIES) as prof:
        torch.relu(a @ a + bias)
    # relu is clamp_min(self, 0) on every device: its kernel is clamp_min's
    assert sorted(kernel.name for kernel in sim_kernels(prof)) == ["sim::add.Tensor", "sim::clamp_min", "sim::mm"]
    mm = next(event for event in prof.events() if event.name == "aten::mm")
    assert [kernel.name for kernel in mm.kernels] == ["sim::mm"]
    assert mm.kernels[0].device == 0


def test_key_averages_show_non_negative_sim_time_for_each_operator():
    a, _ = matmul_and_relu()
    with profile(activities=SIM_ACTIVITIES) as prof:
        for _ in range(5):
            a @ a
    rows = {row.key: row for row in prof.key_averages()}
    mm = rows["aten::mm"]
    assert mm.count == 5
    assert mm.device_time_total > 0
    assert all(row.device_time_total >= 0 and row.cpu_time_total >= 0 for row in rows.values())
    assert "Self SIM" in prof.key_averages().table(sort_by="device_time_total", row_limit=5)


def test_a_queued_kernel_starts_after_its_operator_began_and_a_waited_for_one_ends_inside_it():
    """`mm` returns once its kernel is queued, as on CUDA; `abs` (a host kernel on the boxed route, which sim's host
    waits for) returns after it."""
    a, _ = matmul_and_relu()
    with profile(activities=SIM_ACTIVITIES) as prof:
        torch.abs(a @ a)
    spans = {}
    for name in ("mm", "abs"):
        operator = next(event for event in prof.events() if event.name == f"aten::{name}")
        kernel = next(event for event in sim_kernels(prof) if event.name == f"sim::{name}")
        assert operator.time_range.start <= kernel.time_range.start <= kernel.time_range.end, name
        spans[name] = operator.time_range, kernel.time_range
    absolute, absolutes_kernel = spans["abs"]
    assert absolutes_kernel.end <= absolute.end


def test_copies_show_as_the_devices_memcpy_records_linked_to_the_operator_that_queued_them(tmp_path):
    """As CUDA's driver reports its copies to the profiler, sim's reports each copy it ran (simActivityEnable):
    timed on the device, named by direction and host memory, on the stream it ran on."""
    host = torch.randn(256, 256)
    pinned = torch.randn(256, 256).pin_memory()
    side = torch.sim.Stream()
    with profile(activities=SIM_ACTIVITIES) as prof:
        on_device = host.to("sim")
        with torch.sim.stream(side):
            side.wait_stream(torch.sim.default_stream())
            from_pinned = pinned.to("sim", non_blocking=True)
        back = on_device.cpu()
        torch.sim.synchronize()
    assert torch.equal(back, host) and torch.equal(from_pinned.cpu(), pinned)
    copies = {event.name: event for event in sim_kernels(prof) if event.name.startswith("Memcpy")}
    assert sorted(copies) == ["Memcpy DtoH (Device -> Pageable)", "Memcpy HtoD (Pageable -> Device)",
                              "Memcpy HtoD (Pinned -> Device)"]
    copy_from = [event for event in prof.events() if event.name == "aten::_copy_from"]
    assert sorted(kernel.name for event in copy_from for kernel in event.kernels) == sorted(copies)
    for event in copy_from:
        (copy,) = event.kernels
        assert event.time_range.start <= copies[copy.name].time_range.start
    assert all(copy.time_range.end >= copy.time_range.start for copy in copies.values())
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    traced = {event["name"]: event for event in json.loads(path.read_text())["traceEvents"]
              if event.get("name", "").startswith("Memcpy")}
    assert traced["Memcpy HtoD (Pinned -> Device)"]["tid"] == side.stream_id
    pageable = traced["Memcpy HtoD (Pageable -> Device)"]
    assert (pageable["pid"], pageable["tid"]) == (0, 0)
    spans = timeline(prof)  # the explorer's rows tell copies from kernels, and its figure draws them apart
    assert {span.kind for span in spans if span.name in copies} == {"copy"}
    assert {span.kind for span in spans if span.name == "aten::_copy_from"} == {"operator"}
    from pu1_explorer.widgets.figures import profile_timeline_figure
    figure = profile_timeline_figure(spans)
    drawn = {trace.name: set(trace.text) for trace in figure.data}
    assert drawn["device copy"] == set(copies) and "aten::_copy_from" in drawn["host operator"]
    length = max(span.end_us for span in spans) - min(span.start_us for span in spans)
    assert all(width >= length / 120 for trace in figure.data for width in trace.x), "a short copy would not show"


def test_copies_outside_the_profiled_region_are_not_recorded():
    host = torch.randn(64, 64)
    with profile(activities=SIM_ACTIVITIES) as prof:
        torch.sim.synchronize()
    host.to("sim").cpu()
    assert [event.name for event in sim_kernels(prof)] == []


def test_chrome_trace_shows_sim_work_on_a_track_of_its_own(tmp_path):
    a, _ = matmul_and_relu()
    with profile(activities=SIM_ACTIVITIES) as prof:
        a @ a
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    kernel = next(event for event in events if event.get("name") == "sim::mm")
    operator = next(event for event in events if event.get("name") == "aten::mm")
    assert kernel["cat"] == "kernel" and kernel["dur"] >= 0
    assert kernel["pid"] != operator["pid"]
    names = {event["pid"]: event["args"]["name"] for event in events
             if event.get("ph") == "M" and event.get("name") == "process_name"}
    assert names[kernel["pid"]] == "sim 0"
    threads = {(event["pid"], event["tid"]): event["args"]["name"] for event in events
               if event.get("ph") == "M" and event.get("name") == "thread_name"}
    assert threads[(kernel["pid"], kernel["tid"])] == "sim 0 stream 0"
    assert kernel["args"]["External id"] == operator["args"]["External id"]
    assert operator["ts"] <= kernel["ts"], "a kernel starts after the operator that launched it began"


def test_kernels_on_another_device_and_stream_get_their_own_trace_rows(tmp_path):
    a = torch.randn(64, 64, device="sim:1")
    side = torch.sim.Stream(device="sim:1")
    side.wait_stream(torch.sim.current_stream(1))
    with profile(activities=SIM_ACTIVITIES) as prof:
        with torch.sim.stream(side):
            a @ a
    kernel = next(event for event in sim_kernels(prof) if event.name == "sim::mm")
    assert kernel.device_index == 1
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    traced = next(event for event in events if event.get("name") == "sim::mm")
    assert (traced["pid"], traced["tid"]) == (1, side.stream_id)
    threads = {(event["pid"], event["tid"]): event["args"]["name"] for event in events
               if event.get("ph") == "M" and event.get("name") == "thread_name"}
    assert threads[(1, side.stream_id)] == f"sim 1 stream {side.stream_id}"


def test_only_the_profiled_region_is_recorded():
    a, _ = matmul_and_relu()
    with profile(activities=[ProfilerActivity.CPU]) as host_only:
        a @ a
    assert sim_kernels(host_only) == []
    a @ a  # between two profiles: recorded by neither
    with profile(activities=SIM_ACTIVITIES) as prof:
        torch.relu(a)
    assert [kernel.name for kernel in sim_kernels(prof)] == ["sim::clamp_min"]


def test_the_legacy_profiler_reports_sim_time_through_the_stubs():
    a, _ = matmul_and_relu()
    with torch.autograd.profiler.profile(use_device="sim", use_kineto=False) as prof:
        a @ a
    mm = next(row for row in prof.key_averages() if row.key == "aten::mm")
    assert mm.device_time_total > 0


# The members of sim's profiler classes that torch 2.13 calls on a profile, kineto's and the legacy one, with a user's
# range inside. The others (`name`, `availableActivities`, `session.errors` and the stubs' `enabled`, `mark`,
# `rangePush`, `rangePop`, `onEachDevice`, `synchronize`) exist because the headers declare them pure virtual; guide
# page 12 lists them apart from its tables.
CALLED = {"configure", "session.start", "session.stop", "session.pushCorrelationId", "session.popCorrelationId",
          "session.processTrace", "session.getTraceBuffer", "session.getDeviceInfo", "session.getResourceInfos",
          "stubs.record", "stubs.elapsed"}


def test_kineto_and_the_legacy_profiler_call_exactly_the_members_page_12_tables():
    a, _ = matmul_and_relu()
    torch.sim.start_interface_trace()
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as kineto:
            with torch.profiler.record_function("a user's range"):
                a @ a
        kineto.key_averages()
        with torch.autograd.profiler.profile(use_device="sim", use_kineto=False) as legacy:
            with torch.profiler.record_function("a user's range"):
                a @ a
        legacy.key_averages().table()
    finally:
        calls = torch.sim.stop_interface_trace()
    called = {call["method"] for call in calls if call["interface"] == "profiler"}
    assert called == CALLED


def test_profiling_sim_prints_no_warnings_or_internal_asserts():
    program = textwrap.dedent("""
        import warnings
        warnings.simplefilter("error")
        import torch
        from torch.profiler import ProfilerActivity, profile
        a = torch.randn(32, 32, device="sim")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
            for _ in range(3):
                torch.relu(a @ a)
        prof.key_averages().table()
        with torch.autograd.profiler.profile(use_device="sim", use_kineto=False):
            a @ a
        print("ok")
        """)
    completed = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert completed.stdout.strip() == "ok"
    problems = [line for line in completed.stderr.splitlines()
                if "Warning" in line or "INTERNAL ASSERT" in line or "not enabled" in line]
    assert problems == []


def test_a_profile_on_sim_prints_nothing_to_stderr_unless_the_user_asks_kineto_for_its_logs():
    # kineto prints "USDT: ... SyncActivityProfilerHandler.cpp:52] profiler_start" and "profiler_stop" at every
    # profile unless its level is above every severity; sim sets that level when it loads, keeping the user's own
    program = textwrap.dedent("""
        import torch
        from torch.profiler import ProfilerActivity, profile
        a = torch.randn(32, 32, device="sim")
        for _ in range(2):
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
                a @ a
        print(len([event for event in prof.events() if event.name == "sim::mm"]))
        """)
    environment = {name: value for name, value in os.environ.items() if name != "KINETO_LOG_LEVEL"}
    quiet = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300,
                           env=environment)
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "1\n", "")
    verbose = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300,
                             env=dict(environment, KINETO_LOG_LEVEL="4"))
    assert verbose.returncode == 0 and verbose.stderr.count("profiler_start") == 2, verbose.stderr[-2000:]


def test_backward_kernels_are_linked_to_the_operators_autograd_runs():
    weight = torch.randn(16, 16, device="sim", requires_grad=True)
    with profile(activities=SIM_ACTIVITIES) as prof:
        (weight @ weight).sum().backward()
    assert all(kernel.linked_correlation_id > 0 for kernel in sim_kernels(prof))
    spans = [span for span in timeline(prof) if span.name == "sim::mm"]
    assert [span.launched_by for span in spans] == ["aten::mm"] * 3  # one forward, two for the gradient
    assert all(span.end_us >= span.start_us for span in spans)


def test_device_activity_alone_records_the_kernels_without_host_operators():
    a, _ = matmul_and_relu()
    with profile(activities=[ProfilerActivity.PrivateUse1]) as prof:
        a @ a
    assert [kernel.name for kernel in sim_kernels(prof)] == ["sim::mm"]
    assert [event for event in prof.events() if event.device_type == DeviceType.CPU and event.name == "aten::mm"] == []


def test_timeline_puts_operators_of_other_threads_on_tracks_of_their_own():
    a = torch.randn(64, 64, device="sim", requires_grad=True)
    with profile(activities=SIM_ACTIVITIES) as prof:
        (a @ a).sum().backward()
    tracks = {span.name: span.track for span in timeline(prof) if span.depth == 0}
    assert tracks["aten::matmul"] == "host"  # the thread that profiles
    # autograd runs the backward of sim tensors on a thread of its own for the device
    assert tracks["autograd::engine::evaluate_function: MmBackward0"].startswith("host thread ")
