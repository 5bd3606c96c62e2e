"""Step 6: streams and events, with the torch.cuda names."""
import gc
import re
import threading
import time
from pathlib import Path

import pytest
import torch
import torch_sim

from tests.backend.device_sleeps import LONG_MS, within
from tests.conftest import run_forked


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
    torch.sim.current_stream().wait_stream(stream)  # the result was computed on the other stream
    assert torch.equal(result.cpu(), torch.full((3,), 2.0))


def test_events_record_wait_query_and_time():
    """elapsed_time() is the device's clock between the two records, in milliseconds: at least the device_sleep()
    queued between them, and at most what the host clock measures from the first record to the synchronize."""
    stream = torch.sim.Stream()
    start = torch.sim.Event(enable_timing=True)
    end = torch.sim.Event(enable_timing=True)
    around_start = time.monotonic()
    start.record(stream)
    with torch.sim.stream(stream):
        torch.sim.device_sleep(30)
        result = torch.ones(3, device="sim") * 2
    end.record(stream)
    end.wait(torch.sim.current_stream())
    end.synchronize()
    around_end = time.monotonic()
    assert end.query() and start.query()
    elapsed = start.elapsed_time(end)
    assert 30 <= elapsed <= (around_end - around_start) * 1000
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
    event.synchronize()
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
    result = run_forked(["-c", program], SIM_BRINGUP_STEP=step_before)
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


# ------------------------------------------------------------------------------- an asynchronous device
# device_sleep() keeps a stream busy while the host goes on (tests.backend.device_sleeps), until the test wakes it.
WAKE_SECONDS = 0.1


def wake_soon(sleep) -> list[float]:
    """Wakes `sleep` from another thread after WAKE_SECONDS; the list gets the host's time just before the wake, so
    that a wait which returns finds it filled only if it waited for the sleep."""
    woken: list[float] = []

    def wake() -> None:
        time.sleep(WAKE_SECONDS)
        woken.append(time.monotonic())
        sleep.wake()

    threading.Thread(target=wake, daemon=True).start()
    return woken


def test_a_stream_with_queued_work_is_busy_until_the_device_ran_it():
    stream = torch.sim.Stream()
    done = torch.sim.Event()
    launched = time.monotonic()
    with torch.sim.stream(stream):
        sleep = torch.sim.device_sleep(LONG_MS)
    done.record(stream)
    pending = (stream.query(), done.query())
    assert within(launched, LONG_MS), "the host itself stalled for half the sleep; the test proves nothing this time"
    assert pending == (False, False)
    assert torch.sim.current_stream().query(), "another stream of the device is not held up by the host"
    woken = wake_soon(sleep)
    done.synchronize()
    assert woken, "the event's synchronize returned before the sleep recorded before it ended"
    assert stream.query() and done.query()


def test_a_non_blocking_copy_from_pinned_memory_returns_before_it_ran_and_a_blocking_one_after():
    source = torch.arange(1 << 16, dtype=torch.float32).pin_memory()
    target = torch.zeros(1 << 16, device="sim")
    launched = time.monotonic()
    sleep = torch.sim.device_sleep(LONG_MS)
    target.copy_(source, non_blocking=True)
    assert within(launched, LONG_MS)
    woken = wake_soon(sleep)
    assert torch.equal(target.cpu(), source), ".cpu() waits for the copy queued before it"
    assert woken, ".cpu() returned before the sleep queued ahead of the copy ended"
    launched = time.monotonic()
    torch.sim.device_sleep(200)
    target.copy_(torch.ones(1 << 16))  # pageable and blocking: the host waits
    assert (time.monotonic() - launched) * 1000 >= 200
    assert target.sum().item() == 1 << 16


def test_reading_on_another_stream_without_a_wait_races_and_with_the_wait_is_right():
    """The race a user writes: stream `writer` is still copying into x when stream `reader` reads it. Without a
    wait the reader sees the old values, a wrong answer as on hardware; with wait_stream it is right every time."""
    ones = torch.ones(1024).pin_memory()
    writer, reader = torch.sim.Stream(), torch.sim.Stream()
    x = torch.zeros(1024, device="sim")
    x * 1  # the first float32 multiply runs before its call returns (operators_direct.cpp: launch_direct); later ones do not
    writer.wait_stream(torch.sim.current_stream())  # x's zeros are written before either stream touches x
    reader.wait_stream(torch.sim.current_stream())
    launched = time.monotonic()
    with torch.sim.stream(writer):
        sleep = torch.sim.device_sleep(LONG_MS)
        x.copy_(ones, non_blocking=True)
    with torch.sim.stream(reader):
        raced = x * 1
    assert within(launched, LONG_MS)
    sleep.wake()
    torch.sim.synchronize()
    assert raced.sum().item() == 0, "the reader ran before the writer's copy: it saw the zeros"
    for _ in range(20):
        x.zero_()
        writer.wait_stream(torch.sim.current_stream())
        with torch.sim.stream(writer):
            torch.sim.device_sleep(5)
            x.copy_(ones, non_blocking=True)
        reader.wait_stream(writer)
        with torch.sim.stream(reader):
            waited = x * 1
        torch.sim.current_stream().wait_stream(reader)
        assert waited.sum().item() == 1024


def test_a_pinned_block_is_not_handed_out_again_before_the_copy_that_reads_it_ran():
    source = torch.full((4096,), 7.0).pin_memory()
    address = source.data_ptr()
    target = torch.zeros(4096, device="sim")
    launched = time.monotonic()
    sleep = torch.sim.device_sleep(LONG_MS)
    target.copy_(source, non_blocking=True)
    del source
    reused = torch.empty(4096).pin_memory()
    assert within(launched, LONG_MS)
    assert reused.data_ptr() != address
    reused.fill_(-1.0)
    sleep.wake()
    assert torch.equal(target.cpu(), torch.full((4096,), 7.0))


def test_a_block_freed_with_work_pending_goes_to_its_own_stream_at_once_and_to_others_when_that_stream_is_idle():
    writer, other = torch.sim.Stream(), torch.sim.Stream()
    ones = torch.ones(1 << 14).pin_memory()
    launched = time.monotonic()
    with torch.sim.stream(writer):
        x = torch.empty(1 << 14, device="sim")
        address = x.data_ptr()
        sleep = torch.sim.device_sleep(LONG_MS)
        x.copy_(ones, non_blocking=True)
        del x
    with torch.sim.stream(other):
        elsewhere = torch.empty(1 << 14, device="sim")
    with torch.sim.stream(writer):
        same_stream = torch.empty(1 << 14, device="sim")
    assert within(launched, LONG_MS)
    assert elsewhere.data_ptr() != address, "another stream got a block the writer's copy still writes"
    assert same_stream.data_ptr() == address, "the writer's own later work runs after its copy: the block is safe"
    del same_stream
    sleep.wake()
    writer.synchronize()
    with torch.sim.stream(other):
        assert torch.empty(1 << 14, device="sim").data_ptr() == address


def test_record_stream_keeps_a_block_from_the_allocating_stream_while_the_recorded_stream_still_uses_it():
    user = torch.sim.Stream()
    ones = torch.ones(1 << 14).pin_memory()
    for record in (False, True):
        x = torch.empty(1 << 14, device="sim")
        address = x.data_ptr()
        launched = time.monotonic()
        with torch.sim.stream(user):
            sleep = torch.sim.device_sleep(LONG_MS)
            x.copy_(ones, non_blocking=True)
        if record:
            x.record_stream(user)
        del x
        following = torch.empty(1 << 14, device="sim")
        assert within(launched, LONG_MS)
        # without record_stream the allocator cannot know: the block goes back to its stream while `user` still
        # writes into it, the hazard record_stream exists for
        assert (following.data_ptr() == address) is not record
        del following
        sleep.wake()
        user.synchronize()


def test_a_sleep_ends_when_the_host_wakes_it_and_at_once_if_woken_before_it_started():
    stream = torch.sim.Stream()
    with torch.sim.stream(stream):
        first = torch.sim.device_sleep(LONG_MS)
        second = torch.sim.device_sleep(LONG_MS)
    second.wake()
    launched = time.monotonic()
    woken = wake_soon(first)
    stream.synchronize()
    assert woken, "the stream was idle before its first sleep was woken"
    assert within(launched, LONG_MS), "a woken sleep, or the one woken before it started, slept on"
    first.wake()  # an ended sleep: nothing happens
    assert stream.query()


def test_device_sleep_refuses_a_duration_out_of_range_in_one_line():
    with pytest.raises(ValueError, match="takes 0 to 60000 milliseconds, got -1"):
        torch.sim.device_sleep(-1)


def test_with_sim_launch_blocking_a_launch_returns_after_its_kernel_ran():
    program = ("import time, torch, torch_sim\n"
               "launched = time.monotonic()\n"
               "torch.sim.device_sleep(300)\n"
               "print(round((time.monotonic() - launched) * 1000))\n")
    result = run_forked(["-c", program], SIM_LAUNCH_BLOCKING="1")
    assert result.returncode == 0, result.stderr
    waited_ms = int(result.stdout.strip().splitlines()[-1])
    assert waited_ms >= 300


def test_a_stream_id_sim_never_gave_out_is_refused_in_one_line():
    made_up = torch.Stream(stream_id=987654321, device_index=0, device_type=20)  # 20: PrivateUse1
    with pytest.raises(RuntimeError, match="sim:0 has no stream with id 987654321: use a stream that torch.sim.Stream"):
        torch.accelerator.set_stream(made_up)
    assert torch.sim.current_stream().stream_id == 0
