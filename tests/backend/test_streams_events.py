"""Step 6: streams and events, with the torch.cuda names."""
import time

import pytest
import torch


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
