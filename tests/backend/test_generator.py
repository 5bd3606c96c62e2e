"""Step 7: device generators, seeds and RNG state."""
import pytest
import torch


def test_same_seed_same_numbers():
    a = torch.randn(5, device="sim", generator=torch.Generator(device="sim").manual_seed(7))
    b = torch.randn(5, device="sim", generator=torch.Generator(device="sim").manual_seed(7))
    c = torch.randn(5, device="sim", generator=torch.Generator(device="sim").manual_seed(8))
    assert torch.equal(a.cpu(), b.cpu())
    assert not torch.equal(a.cpu(), c.cpu())


def test_generator_lives_on_its_device():
    generator = torch.Generator(device="sim:1")
    assert generator.device == torch.device("sim:1")


def test_default_generator_drives_random_ops():
    torch.sim.manual_seed(123)
    first = torch.rand(4, device="sim")
    torch.rand(100)  # the host generator is a different one
    torch.sim.manual_seed(123)
    second = torch.rand(4, device="sim")
    assert torch.equal(first.cpu(), second.cpu())


def test_random_ops_draw_from_the_device_not_the_host_generator():
    host_state = torch.get_rng_state()
    torch.sim.manual_seed(5)
    x = torch.empty(6, device="sim").uniform_()
    dropped = torch.nn.functional.dropout(torch.ones(50, device="sim"), 0.5)
    assert torch.equal(torch.get_rng_state(), host_state)  # the host generator was not used
    torch.sim.manual_seed(5)
    torch.rand(10)  # drawing on the host in between changes nothing on the device
    y = torch.empty(6, device="sim").uniform_()
    assert torch.equal(x.cpu(), y.cpu())
    assert torch.equal(torch.nn.functional.dropout(torch.ones(50, device="sim"), 0.5).cpu(), dropped.cpu())


def test_torch_manual_seed_reaches_sim():
    torch.manual_seed(42)
    x = torch.randn(3, device="sim:1")
    torch.manual_seed(42)
    y = torch.randn(3, device="sim:1")
    assert torch.equal(x.cpu(), y.cpu())


def test_rng_state_round_trip():
    torch.sim.manual_seed(3)
    state = torch.sim.get_rng_state()
    x = torch.randn(8, device="sim")
    torch.sim.set_rng_state(state)
    y = torch.randn(8, device="sim")
    assert torch.equal(x.cpu(), y.cpu())
    assert torch.sim.initial_seed() == 3


def test_dropout_is_reproducible_under_the_device_seed():
    x = torch.ones(1000, device="sim")
    torch.sim.manual_seed(11)
    a = torch.nn.functional.dropout(x, 0.5)
    torch.sim.manual_seed(11)
    b = torch.nn.functional.dropout(x, 0.5)
    assert torch.equal(a.cpu(), b.cpu())
    assert 300 < (a == 0).sum().item() < 700


def test_rng_state_of_the_wrong_size_is_refused():
    good = torch.sim.get_rng_state()
    with pytest.raises(RuntimeError, match="an RNG state is 5056 bytes"):
        torch.sim.set_rng_state(torch.zeros(10, dtype=torch.uint8))
    torch.sim.set_rng_state(good)


def test_rng_state_of_the_wrong_type_is_refused():
    with pytest.raises(TypeError, match="uint8"):
        torch.sim.set_rng_state(torch.zeros(10))
