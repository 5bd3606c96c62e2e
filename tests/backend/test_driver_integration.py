"""sim over its driver (backend/simdriver): device memory, pinned memory and copies are the driver's, and the
driver's configuration reaches users as one clear error."""
import time

import pytest
import torch

from tests.conftest import run_python


def pointer_attributes(tensor: torch.Tensor) -> tuple[str, int]:
    from torch_sim.runtime import load_runtime

    return tuple(load_runtime().pointer_attributes(tensor.data_ptr()))


def test_each_devices_tensors_live_in_that_devices_memory_of_the_driver():
    for index in range(torch.sim.device_count()):
        created = torch.arange(10.0, device=f"sim:{index}")
        computed = created @ created.reshape(10, 1).expand(10, 3)  # a host kernel's fresh output
        assert pointer_attributes(created) == ("device", index)
        assert pointer_attributes(created[7:]) == ("device", index)
        assert pointer_attributes(computed) == ("device", index)
    assert pointer_attributes(torch.ones(3)) == ("host", -1)


def test_pinned_tensors_live_in_the_drivers_pinned_host_memory():
    pinned = torch.arange(8.0).pin_memory()
    assert pinned.is_pinned()
    assert pointer_attributes(pinned) == ("pinned", -1)
    assert pointer_attributes(pinned[5:]) == ("pinned", -1)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "sliced", "transposed"])
def test_copies_through_the_driver_keep_every_bit_and_stride(layout):
    source = torch.randn(2, 3, 4, 5, dtype=torch.float64)
    source = {"contiguous": source, "channels_last": source.to(memory_format=torch.channels_last),
              "sliced": source[:, 1:], "transposed": source.transpose(1, 3)}[layout]
    for device in ("sim:0", "sim:1"):
        there = source.to(device)
        back = there.cpu()
        assert torch.equal(back, source) and back.stride() == there.stride()
        other = there.to("sim:1" if device == "sim:0" else "sim:0")
        assert torch.equal(other.cpu(), source)
    pinned = source.contiguous().pin_memory()
    assert torch.equal(pinned.to("sim", non_blocking=True).cpu(), pinned)


def test_item_reads_the_element_it_names():
    values = torch.arange(20, dtype=torch.int64, device="sim").reshape(4, 5)
    assert [values[row, 4 - row].item() for row in range(4)] == [4, 8, 12, 16]
    complex_values = torch.tensor([1 + 2j, 3 - 4j], device="sim")
    assert complex_values.conj()[1].item() == 3 + 4j
    assert (-complex_values)[0].item() == -1 - 2j


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("SIM_MEMORY", "shared", "SIM_MEMORY must be 'unified' or 'discrete', got 'shared'; correct or unset the variable"),
    ("SIM_LAUNCH_BLOCKING", "yes", "SIM_LAUNCH_BLOCKING must be '0' or '1', got 'yes'"),
])
def test_a_driver_setting_sim_cannot_use_is_refused_in_one_line(variable, value, message):
    result = run_python("import torch", **{variable: value})
    assert result.returncode != 0
    assert [line for line in result.stderr.splitlines() if message in line], result.stderr


def test_a_capacity_beyond_the_drivers_address_range_is_refused_and_the_old_one_kept():
    torch.ones(1, device="sim:1")  # the device's address range is reserved when it starts
    before = torch.sim.get_memory_capacity(1)
    with pytest.raises(RuntimeError, match=r"the limit can be at most that.*set SIM_MEMORY_CAPACITY for a larger range"):
        torch.sim.set_memory_capacity(1 << 50, device=1)
    assert torch.sim.get_memory_capacity(1) == before
    assert torch.ones(4, device="sim:1").sum().item() == 4


def test_a_process_exits_promptly_with_work_still_queued_on_a_stream():
    """At exit the driver discards queued work that has not started and gives a running kernel a few seconds."""
    program = ("import torch, torch_sim\n"
               "x, y = torch.ones(4).pin_memory(), torch.zeros(4, device='sim')\n"
               "torch.sim.device_sleep(500)\n"
               "torch.sim.device_sleep(60000)\n"
               "y.copy_(x, non_blocking=True)\n"
               "print('queued')\n")
    started = time.monotonic()
    result = run_python(program, timeout=60)
    assert result.returncode == 0 and "queued" in result.stdout, result.stderr
    assert time.monotonic() - started < 30, "exit waited for the queued minute of work"


def test_a_child_forked_with_work_queued_gets_pytorchs_error_and_the_parent_goes_on():
    program = ("import os, torch, torch_sim\n"
               "x = torch.ones(4, device='sim')\n"
               "torch.sim.device_sleep(300)\n"
               "pid = os.fork()\n"
               "if pid == 0:\n"
               "    try:\n"
               "        torch.ones(2, device='sim') + 1\n"
               "        os._exit(3)\n"
               "    except RuntimeError as error:\n"
               "        print('child:', error, flush=True)\n"
               "        os._exit(0)\n"
               "_, status = os.waitpid(pid, 0)\n"
               "torch.sim.synchronize()\n"
               "print('child exit', os.waitstatus_to_exitcode(status), 'parent', (x + 1).sum().item())\n")
    result = run_python(program, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "child exit 0 parent 8.0" in result.stdout, result.stdout
    assert "child: " in result.stdout and "forked subprocess" in result.stdout, result.stdout
