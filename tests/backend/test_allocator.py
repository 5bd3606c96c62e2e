"""Step 4: the allocator's statistics, its cache, its simulated capacity and out-of-memory errors."""
import gc

import pytest
import torch

from tests.conftest import run_forked, run_python

pytestmark = pytest.mark.usefixtures("settled_memory")


def test_allocated_follows_live_tensors():
    baseline = torch.sim.memory_allocated(0)
    x = torch.empty(1000, dtype=torch.float32, device="sim")
    assert torch.sim.memory_allocated(0) >= baseline + 4000
    assert torch.sim.memory_allocated(0) == torch.accelerator.memory_allocated(0)
    del x
    assert torch.sim.memory_allocated(0) == baseline


def test_peak_and_reset():
    torch.sim.reset_peak_memory_stats(0)
    baseline = torch.sim.memory_allocated(0)
    x = torch.empty(1 << 18, device="sim")
    del x
    assert torch.sim.max_memory_allocated(0) >= baseline + (1 << 20)
    torch.sim.reset_peak_memory_stats(0)
    assert torch.sim.max_memory_allocated(0) == torch.sim.memory_allocated(0)


def test_freed_blocks_stay_reserved_until_empty_cache():
    x = torch.empty(1 << 16, device="sim")
    del x
    reserved = torch.sim.memory_reserved(0)
    assert reserved >= torch.sim.memory_allocated(0) + (1 << 18)
    torch.sim.empty_cache()
    assert torch.sim.memory_reserved(0) < reserved
    stats = torch.sim.memory_stats(0)
    assert stats["num_device_free"] >= 1


def test_counts_and_accelerator_stats():
    torch.sim.reset_accumulated_memory_stats(0)
    tensors = [torch.empty(10, device="sim") for _ in range(5)]
    stats = torch.sim.memory_stats(0)
    assert stats["allocation.all.allocated"] >= 5
    accelerator_stats = torch.accelerator.memory_stats(0)
    assert accelerator_stats["allocated_bytes.all.current"] == torch.sim.memory_allocated(0)
    del tensors


def test_mem_get_info_reports_free_and_total():
    free, total = torch.sim.mem_get_info(0)
    assert total == torch.sim.get_memory_capacity(0)
    assert 0 <= free <= total


def test_out_of_memory_names_the_device_request_and_free_memory(small_device_one):
    baseline = torch.sim.memory_allocated(1)
    with pytest.raises(torch.OutOfMemoryError) as caught:
        torch.empty(1 << 20, device="sim:1")  # 4 MiB on a 1 MiB device
    message = str(caught.value)
    assert "sim:1 out of memory" in message
    assert "tried to allocate 4.00 MiB" in message
    assert "capacity of 1.00 MiB" in message and "is free" in message
    assert "set_memory_capacity" in message
    assert torch.sim.memory_allocated(1) == baseline
    assert torch.sim.memory_stats(1)["num_ooms"] >= 1
    assert torch.ones(1000, device="sim:1").sum().item() == 1000


def test_out_of_memory_inside_an_operator_leaks_nothing(small_device_one):
    x = torch.ones(200_000, device="sim:1")  # 800 kB
    baseline = torch.sim.memory_allocated(1)
    with pytest.raises(torch.OutOfMemoryError):
        x * 2  # a second 800 kB does not fit
    gc.collect()
    assert torch.sim.memory_allocated(1) == baseline
    assert torch.equal(x[:3].cpu(), torch.ones(3))


def test_cached_blocks_are_released_before_running_out(small_device_one):
    for _ in range(5):
        x = torch.empty(150_000, device="sim:1")  # 600 kB, twice would not fit
        del x
    y = torch.empty(200_000, device="sim:1")
    assert y.numel() == 200_000


@pytest.mark.parametrize("capacity", [0, -5, "lots", "12Q"])
def test_bad_capacity_is_refused(capacity):
    with pytest.raises(ValueError, match="capacity must be"):
        torch.sim.set_memory_capacity(capacity, device=0)


def test_capacity_from_the_environment():
    result = run_forked(["-c", "import torch; print(torch.sim.get_memory_capacity(0))"], SIM_MEMORY_CAPACITY="64M")
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) == 64 << 20


def test_bad_capacity_in_the_environment_is_a_clear_error():
    result = run_python("import torch", SIM_MEMORY_CAPACITY="a lot")
    assert result.returncode != 0
    assert "SIM_MEMORY_CAPACITY must be a number of bytes such as 1073741824, 512M or 2G" in result.stderr


def test_a_block_the_host_frees_behind_a_queued_kernel_is_not_taken_by_an_earlier_kernel():
    """A direct kernel's handles do not own its inputs' memory, so the host frees an input at once while the multiply
    that reads it is still queued. A host kernel queued before the multiply allocates as it runs, on the device (the
    foreach update's number becomes a 0-dim tensor there): it must not take that block, or it overwrites the
    multiply's input before the multiply has read it."""
    steps = [torch.zeros((), device="sim")]
    a_on_host, b = torch.randn(16), torch.randn(16, device="sim")
    a = a_on_host.to("sim")
    torch._foreach_add_(steps, 0), a * b  # their first launches, which run before the call returns
    torch.sim.synchronize()
    torch.sim.empty_cache()  # the freed input is the one block of its size the cache holds
    sleep = torch.sim.device_sleep(5_000)
    torch._foreach_add_(steps, 1)
    product = a * b
    del a
    assert not torch.sim.current_stream().query(), "the multiply ran before its input was freed; the test proves nothing"
    sleep.wake()
    assert torch.equal(product.cpu(), a_on_host * b.cpu())
    assert steps[0].item() == 1
