"""Step 6: streams and events, with the torch.cuda names."""
import gc
import re
import time
from pathlib import Path

import pytest
import torch
import torch_sim

from tests.conftest import run_python


def pytorchs_sentence(header: str, start: str) -> str:
    """The whole string literal that begins with `start` in one of the C++ headers this torch wheel ships."""
    text = (Path(torch.__file__).parent / "include" / header).read_text()
    found = re.search(r'"(' + re.escape(start) + r'[^"]*)"', text)
    assert found, f"PyTorch changed its wording in {header}: no sentence starts with {start!r}"
    return found.group(1)


def test_default_and_new_streams():
    default = torch.sim.default_stream(1)
    assert default.device == torch.device("sim:1") and default.stream_id == 0
    assert torch.sim.current_stream(0).stream_id == 0
    stream = torch.sim.Stream(device=1)
    assert stream.device == torch.device("sim:1")
    assert stream.stream_id != 0
    assert stream.query()
    stream.synchronize()


def test_stream_context_sets_and_restores_the_current_stream():
    stream = torch.sim.Stream()
    with torch.sim.stream(stream):
        assert torch.sim.current_stream() == stream
        result = torch.ones(3, device="sim") * 2
    assert torch.sim.current_stream().stream_id == 0
    assert torch.equal(result.cpu(), torch.full((3,), 2.0))


def test_events_record_wait_query_and_time():
    """elapsed_time() is the host's monotonic time between the two recordings, in milliseconds: it lies between
    what the host clock measures inside and around them, however loaded the machine is."""
    stream = torch.sim.Stream()
    start = torch.sim.Event(enable_timing=True)
    end = torch.sim.Event(enable_timing=True)
    around_start = time.monotonic()
    start.record(stream)
    inside_start = time.monotonic()
    with torch.sim.stream(stream):
        result = torch.ones(3, device="sim") * 2
    inside_end = time.monotonic()
    end.record(stream)
    around_end = time.monotonic()
    end.wait(torch.sim.current_stream())
    assert end.query()
    end.synchronize()
    elapsed = start.elapsed_time(end)
    rounding = 1e-3  # milliseconds: the two clocks' readings go through different float conversions
    assert (inside_end - inside_start) * 1000 - rounding <= elapsed <= (around_end - around_start) * 1000 + rounding
    assert torch.equal(result.cpu(), torch.full((3,), 2.0))


def test_elapsed_time_of_an_unrecorded_event_is_a_clear_error():
    start = torch.sim.Event(enable_timing=True)
    end = torch.sim.Event(enable_timing=True)
    start.record()
    with pytest.raises((RuntimeError, ValueError), match="must be recorded"):
        start.elapsed_time(end)


def test_generic_torch_stream_and_event_work_on_sim():
    stream = torch.Stream(device="sim:1")
    event = torch.Event(device="sim:1")
    event.record(stream)
    stream.wait_event(event)
    assert event.query()


@pytest.mark.parametrize("make_pair", [
    lambda: (torch.sim.Event(), torch.sim.Event()),
    lambda: (torch.Event(device="sim", enable_timing=False), torch.Event(device="sim", enable_timing=False)),
    lambda: (torch.sim.Event(enable_timing=True), torch.sim.Event()),
], ids=["sim.Event-default", "torch.Event-no-timing", "one-timed"])
def test_elapsed_time_refuses_events_created_without_timing_in_cudas_words(make_pair):
    """As on CUDA: recording works on any event, but only two events created with enable_timing=True are timed."""
    start, end = make_pair()
    start.record()
    end.record()
    with pytest.raises(ValueError) as raised:
        start.elapsed_time(end)
    assert str(raised.value).startswith(pytorchs_sentence("c10/cuda/CUDAEvent.h", "Both events must be created")), \
        raised.value


def test_elapsed_time_of_an_unrecorded_event_says_cudas_sentence():
    start = torch.sim.Event(enable_timing=True)
    end = torch.sim.Event(enable_timing=True)
    start.record()
    with pytest.raises(ValueError) as raised:
        start.elapsed_time(end)
    assert str(raised.value).startswith(pytorchs_sentence("c10/cuda/CUDAEvent.h", "Both events must be recorded")), \
        raised.value


def test_before_the_step_streams_and_events_are_refused_in_pytorchs_words_then_sims():
    """Without the step, sim answers as PyTorch's guard interface does for a backend without streams, then says why."""
    program = ("import torch, torch_sim\n"
               "for make in (lambda: torch.Stream(device='sim'), lambda: torch.Event(device='sim').record()):\n"
               "    try:\n"
               "        make()\n"
               "    except RuntimeError as error:\n"
               "        print(str(error).splitlines()[0])\n")
    step_before = torch_sim.STEPS[torch_sim.STEPS.index("streams_events") - 1]
    result = run_python(program, SIM_BRINGUP_STEP=step_before)
    assert result.returncode == 0, result.stderr[-3000:]
    new_stream, record = result.stdout.strip().splitlines()
    interface = "c10/core/impl/DeviceGuardImplInterface.h"
    assert new_stream.startswith(pytorchs_sentence(interface, "Backend doesn't support create a new")), new_stream
    assert record.startswith(pytorchs_sentence(interface, "Backend doesn't support events")), record
    assert "the 'streams_events' step of the bring-up is not installed" in new_stream + record


def test_record_stream_tells_the_allocator_and_refuses_a_stream_of_another_device():
    tensor = torch.ones(4, device="sim")
    side = torch.Stream(device="sim")
    gc.collect()  # events that earlier tests left in reference cycles are destroyed now, not inside the trace
    gc.disable()
    torch.sim.start_interface_trace()
    try:
        tensor.record_stream(side)
    finally:
        calls = [(record["interface"], record["method"]) for record in torch.sim.stop_interface_trace()
                 if record["kind"] == "call"]
        gc.enable()
    assert calls == [("allocator", "recordStream")]
    with pytest.raises(RuntimeError, match=r"^record_stream expects a stream of the tensor's device \(sim:0\), got "
                                           r"one of cpu\. Pass a torch\.sim\.Stream"):
        tensor.record_stream(torch.Stream(device="cpu"))
    assert torch.equal(tensor.cpu(), torch.ones(4))
