"""Step 8: the reference models train on sim exactly as on the CPU; a custom AutogradPrivateUse1 kernel."""
import pytest
import torch

from torch_sim import workloads


# Adam divides each gradient by its own running magnitude, so a parameter whose true
# gradient is zero (the key bias of attention: softmax ignores it) moves by +-lr on
# rounding noise alone. sim runs attention on the math path (no fused attention is
# registered for PrivateUse1) while the CPU runs its flash kernel: equal up to
# rounding, so the transformer is compared under SGD.
@pytest.mark.parametrize("name, optimizer", [("mlp", "adam"), ("cnn", "adam"), ("transformer", "sgd")])
def test_training_matches_cpu(name, optimizer):
    cpu_losses, cpu_model = workloads.train(name, "cpu", steps=3, optimizer=optimizer)
    sim_losses, sim_model = workloads.train(name, "sim", steps=3, optimizer=optimizer)
    torch.testing.assert_close(sim_losses, cpu_losses)
    for (cpu_name, cpu_parameter), (sim_name, sim_parameter) in zip(cpu_model.named_parameters(),
                                                                    sim_model.named_parameters()):
        assert sim_parameter.device.type == "sim"
        torch.testing.assert_close(sim_parameter.cpu(), cpu_parameter, msg=f"parameter {sim_name} differs")
        torch.testing.assert_close(sim_parameter.grad.cpu(), cpu_parameter.grad, msg=f"gradient of {sim_name}")


def test_training_on_the_second_device():
    losses, model = workloads.train("mlp", "sim:1", steps=2, optimizer="sgd")
    assert next(model.parameters()).device == torch.device("sim:1")
    assert losses[1] < losses[0]


def test_silu_has_a_sim_autograd_kernel():
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::silu", "AutogradPrivateUse1")
    table = torch._C._dispatch_dump_table("aten::silu")
    line = next(line for line in table.splitlines() if line.startswith("AutogradPrivateUse1:"))
    assert "autograd.py" in line


def test_custom_silu_gradient_matches_cpu():
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    x_sim = x.detach().to("sim").requires_grad_()
    weights = torch.randn(3, 5, dtype=torch.float64)
    (torch.nn.functional.silu(x) * weights).sum().backward()
    (torch.nn.functional.silu(x_sim) * weights.to("sim")).sum().backward()
    assert torch.equal(x_sim.grad.cpu(), x.grad)  # bit for bit: the device's fused kernels, the CPU's arithmetic
    assert torch.autograd.gradcheck(torch.nn.functional.silu, (x_sim,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_custom_silu_is_bit_identical_to_cpu(dtype):
    x = torch.randn(1000).to(dtype).requires_grad_()
    x_sim = x.detach().to("sim").requires_grad_()
    grad = torch.randn(1000).to(dtype)
    y, y_sim = torch.nn.functional.silu(x), torch.nn.functional.silu(x_sim)
    y.backward(grad)
    y_sim.backward(grad.to("sim"))
    assert torch.equal(y_sim.detach().cpu(), y.detach()) and torch.equal(x_sim.grad.cpu(), x.grad)


def test_backward_twice_without_retain_graph_is_the_usual_error():
    x = torch.randn(3, device="sim", requires_grad=True)
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()


def test_the_process_exits_cleanly_right_after_a_backward():
    from tests.conftest import run_python

    for _ in range(4):
        result = run_python("import torch; x = torch.randn(4, device='sim', requires_grad=True); (x * 2).sum().backward()")
        assert result.returncode == 0 and "terminate" not in result.stderr, result.stderr
