"""Step 1 and 2: torch.sim as the device module, and torch.accelerator answering for sim."""
import pytest
import torch


def test_backend_is_renamed_and_registered():
    assert torch._C._get_privateuse1_backend_name() == "sim"
    assert torch.sim.is_available()
    assert torch.sim.device_count() == 2


def test_accelerator_api_answers_for_sim():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("sim")
    assert torch.accelerator.device_count() == torch.sim.device_count()
    torch.accelerator.synchronize()
    torch.sim.synchronize()
    torch.sim.synchronize(1)


def test_generated_tensor_and_module_methods():
    tensor = torch.ones(3).sim()
    assert tensor.is_sim and tensor.device == torch.device("sim:0")
    module = torch.nn.Linear(2, 2).sim(1)
    assert module.weight.device == torch.device("sim:1")


def test_device_names_and_index_helpers():
    assert torch.sim.get_device_name(1) == "Simulated accelerator 1"
    with torch.sim.device(1):
        assert torch.sim.current_device() == 1
    assert torch.sim.current_device() == 0


@pytest.mark.parametrize("device", [2, "sim:7", torch.device("sim", 5)])
def test_device_index_out_of_range_is_a_clear_error(device):
    with pytest.raises(RuntimeError, match="does not exist: this process has 2 sim device"):
        torch.sim.set_device(device)
    assert torch.sim.current_device() == 0


def test_tensor_on_a_missing_device_is_a_clear_error():
    with pytest.raises(RuntimeError, match="sim:9 does not exist"):
        torch.ones(2, device="sim:9")
    assert torch.ones(2, device="sim:1").sum().item() == 2


def test_a_cpu_device_is_refused_by_sim_helpers():
    with pytest.raises(ValueError, match="expected a sim device"):
        torch.sim.memory_allocated("cpu")
