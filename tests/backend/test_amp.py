"""Step 9: autocast on sim, with the documented cast policy."""
import pytest
import torch

from torch_sim import amp


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_lower_precision_operators_run_in_the_autocast_dtype(dtype):
    a = torch.randn(8, 8, device="sim")
    linear = torch.nn.Linear(8, 4).sim()
    with torch.autocast("sim", dtype=dtype):
        assert torch.sim.is_autocast_enabled()
        assert torch.sim.get_autocast_dtype() == dtype
        product = a @ a
        projected = linear(a)
    assert product.dtype == dtype and projected.dtype == dtype
    torch.testing.assert_close(product.float().cpu(), (a.cpu().to(dtype) @ a.cpu().to(dtype)).float())


def test_float32_operators_are_cast_up():
    low = torch.randn(4, device="sim").to(torch.bfloat16)
    with torch.autocast("sim", dtype=torch.bfloat16):
        assert torch.exp(low).dtype == torch.float32
        assert torch.nn.functional.layer_norm(low, (4,)).dtype == torch.float32


def test_other_operators_keep_their_input_dtype():
    x = torch.randn(4, device="sim")
    with torch.autocast("sim", dtype=torch.bfloat16):
        assert (x + x).dtype == torch.float32
        assert torch.relu(x.to(torch.float16)).dtype == torch.float16


def test_training_step_under_autocast():
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).sim()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, target = torch.randn(8, 16, device="sim"), torch.randint(0, 2, (8,), device="sim")
    with torch.autocast("sim", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(x), target)
    loss.backward()
    optimizer.step()
    assert model[0].weight.grad.dtype == torch.float32


def test_cast_policy_is_read_from_the_dispatcher():
    policy = amp.cast_policy()
    assert policy["aten::mm"] == "lower_precision"
    assert policy["aten::exp"] == "float32"
    assert "aten::add.Tensor" not in policy
    assert torch.sim.get_amp_supported_dtype() == [torch.float16, torch.bfloat16, torch.float32]


def test_unsupported_autocast_dtype_is_refused():
    with pytest.raises(ValueError, match="sim autocast supports"):
        torch.sim.set_autocast_dtype(torch.int8)
