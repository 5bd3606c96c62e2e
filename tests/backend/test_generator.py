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


# ------------------------------------------------------------------------------ draws queued on the device
# A dropout in training is a queued kernel that draws from the device's generator when it runs. Queued behind a
# sleeping device, it must still draw what the CPU draws in the program's order: the host waits for it before it reads
# or sets the generator's state, and before a draw made at the call or queued on another stream.
aten = torch.ops.aten
BUSY_MS = 300  # how long the device sleeps ahead of the draws when the host is expected to wait for them


def dropout_input() -> torch.Tensor:
    return torch.randn(64, 48, generator=torch.Generator().manual_seed(0))


def test_dropouts_queued_behind_a_busy_device_draw_the_cpus_masks_in_order():
    x = dropout_input()
    torch.manual_seed(11)
    expected = [aten.native_dropout(x, 0.3, True) for _ in range(3)]
    gradient = aten.native_dropout_backward(x, expected[-1][1], 1 / 0.7)
    on_sim = x.to("sim")
    torch.manual_seed(11)
    torch.sim.reset_direct_route_exits()
    sleep = torch.sim.device_sleep(20_000)
    got = [aten.native_dropout(on_sim, 0.3, True) for _ in range(3)]
    got_gradient = aten.native_dropout_backward(on_sim, got[-1][1], 1 / 0.7)
    pending = not torch.sim.current_stream().query()
    sleep.wake()
    assert pending, "the dropouts waited for the device instead of being queued"
    assert torch.sim.direct_route_exits() == {}
    for (output, mask), (expected_output, expected_mask) in zip(got, expected):
        assert torch.equal(mask.cpu(), expected_mask) and torch.equal(output.cpu(), expected_output)
    assert torch.equal(got_gradient.cpu(), gradient)


def test_the_state_read_after_a_queued_dropout_is_the_state_after_its_draw():
    x = dropout_input()
    torch.manual_seed(11)
    aten.native_dropout(x, 0.3, True)
    after_the_draw = torch.get_rng_state()
    on_sim = x.to("sim")
    torch.manual_seed(11)
    torch.sim.device_sleep(BUSY_MS)
    aten.native_dropout(on_sim, 0.3, True)
    assert not torch.sim.current_stream().query()
    assert torch.equal(torch.sim.get_rng_state(), after_the_draw)


def test_a_seed_set_after_a_queued_dropout_reaches_only_the_draws_after_it():
    x = dropout_input()
    torch.manual_seed(11)
    first = aten.native_dropout(x, 0.3, True)[1]
    torch.manual_seed(12)
    second = aten.native_dropout(x, 0.3, True)[1]
    on_sim = x.to("sim")
    torch.manual_seed(11)
    torch.sim.device_sleep(BUSY_MS)
    got_first = aten.native_dropout(on_sim, 0.3, True)[1]
    torch.manual_seed(12)
    got_second = aten.native_dropout(on_sim, 0.3, True)[1]
    assert torch.equal(got_first.cpu(), first) and torch.equal(got_second.cpu(), second)


@pytest.mark.parametrize("second_draw", ["dropout", "rand"])
def test_draws_on_two_streams_keep_the_programs_order(second_draw):
    """The second draw, on another stream, is made after the first, queued behind a sleep on its own stream."""
    x = dropout_input()
    draw = {"dropout": lambda t: aten.native_dropout(t, 0.5, True)[1],
            "rand": lambda t: torch.rand(100, device=t.device)}
    torch.manual_seed(11)
    first, second = aten.native_dropout(x, 0.3, True)[1], draw[second_draw](x)
    on_sim = x.to("sim")
    torch.sim.synchronize()
    torch.manual_seed(11)
    sleeping, other = torch.sim.Stream(), torch.sim.Stream()
    with torch.sim.stream(sleeping):
        torch.sim.device_sleep(BUSY_MS)
        got_first = aten.native_dropout(on_sim, 0.3, True)[1]
    with torch.sim.stream(other):
        got_second = draw[second_draw](on_sim)
    torch.sim.synchronize()
    assert torch.equal(got_first.cpu(), first) and torch.equal(got_second.cpu(), second)
