"""Step 8: the reference models train on sim exactly as on the CPU; a custom AutogradPrivateUse1 kernel."""
import pytest
import torch

from pu1_explorer import workloads


# Bit for bit: sim's kernels do the CPU's arithmetic in the CPU's order (attention included: sim's fused
# attention for PrivateUse1 runs the CPU's flash kernel). Adam divides each gradient by its own running
# magnitude, so any rounding difference would show as a whole step.
@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_training_matches_cpu_bit_for_bit(name):
    cpu_losses, cpu_model = workloads.train(name, "cpu", steps=3, optimizer="adam")
    sim_losses, sim_model = workloads.train(name, "sim", steps=3, optimizer="adam")
    assert sim_losses == cpu_losses
    for (cpu_name, cpu_parameter), (sim_name, sim_parameter) in zip(cpu_model.named_parameters(),
                                                                    sim_model.named_parameters(), strict=True):
        assert sim_name == cpu_name and sim_parameter.device.type == "sim"
        assert torch.equal(sim_parameter.detach().cpu(), cpu_parameter.detach()), f"parameter {sim_name} differs"
        assert torch.equal(sim_parameter.grad.cpu(), cpu_parameter.grad), f"gradient of {sim_name} differs"


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
    from concurrent.futures import ThreadPoolExecutor

    from tests.conftest import run_python

    # exit races autograd's worker threads: four fresh processes (at once) give it four chances to show
    program = "import torch; x = torch.randn(4, device='sim', requires_grad=True); (x * 2).sum().backward()"
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: run_python(program), range(4)))
    for result in results:
        assert result.returncode == 0 and "terminate" not in result.stderr, result.stderr
