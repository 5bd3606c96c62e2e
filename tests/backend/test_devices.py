"""Several devices: sim:1 is really device 1 for the guard, the allocator and copies."""
import pytest
import torch

from tests.conftest import run_forked, run_python


@pytest.mark.usefixtures("settled_memory")
def test_tensors_land_on_the_device_they_name():
    before = torch.sim.memory_allocated(1)
    x = torch.ones(1024, device="sim:1")
    assert x.device == torch.device("sim:1")
    assert torch.sim.memory_allocated(1) - before >= 4096
    del x
    assert torch.sim.memory_allocated(1) == before


def test_current_device_decides_where_plain_sim_goes():
    with torch.sim.device(1):
        assert torch.ones(1, device="sim").device.index == 1
        assert torch.accelerator.current_device_index() == 1
    assert torch.ones(1, device="sim").device.index == 0


def test_operations_keep_their_device():
    a = torch.randn(4, 4, device="sim:1")
    assert (a @ a).device.index == 1
    assert (a + 1).relu().sum().device.index == 1


def test_copies_between_devices_and_host_are_exact():
    host = torch.randn(5, 7)
    on_zero = host.to("sim:0")
    on_one = on_zero.to("sim:1")
    assert on_one.device == torch.device("sim:1")
    assert torch.equal(on_one.cpu(), host)
    transposed = on_one.t().to("sim:0")
    assert torch.equal(transposed.cpu(), host.t())
    assert torch.equal(on_one.to(torch.float64).cpu(), host.double())


@pytest.mark.parametrize("other", ["sim:1", "cpu"])
def test_mixing_devices_is_a_clear_error(other):
    a = torch.ones(3, device="sim:0")
    b = torch.ones(3, device=other)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.atan2(a, b)
    assert torch.equal((a + 1).cpu(), torch.full((3,), 2.0))


def test_cpu_scalar_tensors_mix_with_device_tensors_like_cuda():
    a = torch.ones(3, device="sim")
    assert torch.equal((a * torch.tensor(3.0)).cpu(), torch.full((3,), 3.0))


def test_device_count_comes_from_the_environment():
    result = run_forked(["-c", "import torch; print(torch.sim.device_count(), torch.ones(1, device='sim:3').device)"],
                        SIM_DEVICE_COUNT="4")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["4", "sim:3"]


def test_bad_device_count_is_a_one_line_error():
    result = run_python("import torch", SIM_DEVICE_COUNT="many")
    assert result.returncode != 0
    assert "SIM_DEVICE_COUNT must be a whole number from 1 to 64, got 'many'" in result.stderr


def test_host_index_tensors_are_accepted_like_cuda():
    x = torch.arange(25.0).reshape(5, 5)
    on_sim = x.to("sim")
    rows = torch.tensor([0, 3])
    assert torch.equal(on_sim[rows].cpu(), x[rows])
    mask = torch.tensor([True, False, True, False, False])
    on_sim[mask] = torch.zeros(5, device="sim")
    x[mask] = 0
    assert torch.equal(on_sim.cpu(), x)


def test_results_stay_on_the_device_of_their_inputs_when_another_is_current():
    empty = torch.empty(0, device="sim:1")
    assert torch.exp(empty).device == torch.device("sim:1")
    assert torch.special.erfcx(torch.ones(3, device="sim:1")).device == torch.device("sim:1")
