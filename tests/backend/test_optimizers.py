"""Optimizers as users pick them: foreach and fused AdamW, Adam and SGD steps on sim, bit for bit the CPU's, each
through sim's own kernels (none reaches the fallback)."""
from __future__ import annotations

import time
from typing import Callable

import pytest
import torch

import torch_sim.operators

OPTIMIZERS = {
    "AdamW": (torch.optim.AdamW, {"lr": 0.1, "weight_decay": 0.01}),
    "Adam, amsgrad": (torch.optim.Adam, {"lr": 0.1, "amsgrad": True}),
    "SGD, momentum": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True}),
}


def trained(device: str, optimizer: str, implementation: str,
            last_step: Callable[[torch.optim.Optimizer], None] | None = None,
            learning_rate_as_tensor: bool = False) -> list[torch.Tensor]:
    """The parameters of a small MLP after three steps of `optimizer`, computed on `device` (`last_step` takes the
    third step itself)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(device)
    inputs = torch.randn(5, 8).to(device)
    kind, settings = OPTIMIZERS[optimizer]
    if learning_rate_as_tensor:
        settings = {**settings, "lr": torch.tensor(settings["lr"])}
    step = kind(model.parameters(), **settings, **{implementation: True})
    for number in range(3):
        step.zero_grad()
        model(inputs).square().sum().backward()
        if last_step is not None and number == 2:
            last_step(step)
        else:
            step.step()
    return [parameter.detach().cpu() for parameter in model.parameters()]


@pytest.mark.parametrize("implementation", ["foreach", "fused"])
@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_an_optimizer_step_on_sim_is_the_cpus_bit_for_bit_through_sims_kernels(optimizer, implementation):
    expected = trained("cpu", optimizer, implementation)
    torch.sim.reset_fallback_counts()
    on_sim = trained("sim", optimizer, implementation)
    assert torch.sim.fallback_counts() == {}
    assert all(torch.equal(got, want) for got, want in zip(on_sim, expected, strict=True))


FUSED_UPDATES = {"AdamW": "aten::_fused_adamw_", "Adam, amsgrad": "aten::_fused_adam_", "SGD, momentum": "aten::_fused_sgd_"}


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_a_fused_step_takes_its_direct_kernel(optimizer):
    """`fused=True` steps call sim's direct kernel of their fused update, which queues the CPU's kernel with no boxed
    stack and no host aliases; no call of it leaves for the boxed route."""
    name = FUSED_UPDATES[optimizer]
    assert name.removeprefix("aten::") in torch_sim.operators.direct_operators()
    torch.sim.reset_direct_route_exits()
    trained("sim", optimizer, "fused")
    assert torch.sim.direct_route_exits() == {}


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_a_fused_step_with_its_learning_rate_as_a_tensor_is_the_cpus_bit_for_bit_without_the_fallback(optimizer):
    """A learning rate given as a tensor calls the fused update's `tensor_lr` overload, which sim serves on its boxed
    route (its queued updates), not through the fallback."""
    assert FUSED_UPDATES[optimizer].removeprefix("aten::") + ".tensor_lr" in torch_sim.operators.NATIVE_OPERATORS
    expected = trained("cpu", optimizer, "fused", learning_rate_as_tensor=True)
    torch.sim.reset_fallback_counts()
    on_sim = trained("sim", optimizer, "fused", learning_rate_as_tensor=True)
    assert torch.sim.fallback_counts() == {}
    assert all(torch.equal(got, want) for got, want in zip(on_sim, expected, strict=True))


def fused_adamw_lists(device: str, length: int = 3) -> list[list[torch.Tensor]]:
    """Parameters, gradients, first and second moments, no maximum, and steps of a fused AdamW update."""
    generator = torch.Generator().manual_seed(0)
    tensors = [[torch.randn(4, 5, generator=generator).to(device) for _ in range(length)] for _ in range(4)]
    tensors[3] = [t.abs() for t in tensors[3]]
    return [*tensors, [], [torch.tensor(3.0).to(device) for _ in range(length)]]


@pytest.mark.parametrize("found_inf", [0.0, 1.0])
def test_a_fused_update_with_a_gradient_scale_is_the_cpus_bit_for_bit_on_its_direct_kernel(found_inf):
    """A gradient scaler's fused step passes its scale and its flag of infinities as device tensors: the kernel reads
    both on the device, unscaling the gradients or, with the flag set, leaving every tensor as it was."""
    results = {}
    torch.sim.reset_direct_route_exits()
    for device in ("cpu", "sim"):
        lists = fused_adamw_lists(device)
        torch._fused_adamw_(*lists, lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0.01, eps=1e-8, amsgrad=False,
                            maximize=False, grad_scale=torch.tensor(4.0).to(device),
                            found_inf=torch.tensor(found_inf).to(device))
        results[device] = [t for list_ in lists for t in list_]
    assert torch.sim.direct_route_exits() == {}
    assert all(torch.equal(got.cpu(), want) for got, want in zip(results["sim"], results["cpu"], strict=True))


def test_a_fused_update_the_cpu_refuses_leaves_its_direct_kernel_and_raises_the_cpus_error_at_the_call():
    """Lists of two lengths take the boxed route, counted against the operator, where the CPU's kernel raises."""
    def update(device: str) -> None:
        lists = fused_adamw_lists(device)
        lists[1] = lists[1][:2]
        torch._fused_adamw_(*lists, lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0.0, eps=1e-8, amsgrad=False,
                            maximize=False)

    with pytest.raises(RuntimeError) as on_cpu:
        update("cpu")
    torch.sim.reset_direct_route_exits()
    with pytest.raises(RuntimeError) as on_sim:
        update("sim")
    assert str(on_sim.value).splitlines()[0] == str(on_cpu.value).splitlines()[0]
    assert torch.sim.direct_route_exits() == {"aten::_fused_adamw_": 1}
    torch.sim.synchronize()


# A bound only: each test wakes its sleep once it has seen the work pending, and the host's own steps take a small
# part of it.
SLEEP_MS = 20_000


@pytest.mark.parametrize("implementation", ["foreach", "fused"])
@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_an_optimizer_step_returns_before_the_device_ran_it(optimizer, implementation):
    """Its foreach and fused kernels are launched without waiting, as CUDA's are (the in-place updates, and the
    foreach calls that return new tensors, as AdamW's `_foreach_sqrt`): behind a sleeping device the step returns at
    once with its work still queued, and once synchronised the parameters are the CPU's."""
    seen = {}

    def behind_a_sleeping_device(step: torch.optim.Optimizer) -> None:
        sleep = torch.sim.device_sleep(SLEEP_MS)
        started = time.monotonic()
        step.step()
        seen["returned after"] = time.monotonic() - started
        seen["pending"] = not torch.sim.current_stream().query()
        sleep.wake()

    on_sim = trained("sim", optimizer, implementation, behind_a_sleeping_device)
    assert seen["returned after"] * 1000 < SLEEP_MS / 2, f"the step waited {seen['returned after']:.2f} s"
    assert seen["pending"], "the step's updates ran before the sleep queued ahead of them had ended"
    expected = trained("cpu", optimizer, implementation)
    assert all(torch.equal(got, want) for got, want in zip(on_sim, expected, strict=True))


def ones(size: int, device: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.ones(size, dtype=dtype, device=device)


REFUSED_UPDATES = {
    "lists of two lengths": lambda device: torch._foreach_add_([ones(2, device), ones(2, device)], [ones(2, device)]),
    "tensors of two shapes": lambda device: torch._foreach_add_([ones(2, device)], [ones(3, device)]),
    "tensors of two dtypes": lambda device: torch._foreach_lerp_([ones(2, device)],
                                                                 [ones(2, device, torch.float64)], 0.5),
    "a complex scalar": lambda device: torch._foreach_add_([ones(2, device)], 1j),
    "scalars for another length": lambda device: torch._foreach_add_([ones(2, device)], [1.0, 2.0]),
    "new tensors of two shapes": lambda device: torch._foreach_add([ones(2, device)], [ones(3, device)]),
    "an empty first list": lambda device: torch._foreach_add_([], [ones(2, device)]),
    "new tensors from an empty list": lambda device: torch._foreach_add([], [ones(2, device)]),
}


@pytest.mark.parametrize("update", list(REFUSED_UPDATES))
def test_a_foreach_call_the_cpu_refuses_raises_at_the_call_with_the_cpus_message(update):
    """A foreach or fused call takes the route without waiting only where the CPU's kernel will take its arguments;
    any other call waits, so that the CPU's error is raised by the call itself, not by the next synchronising
    call. In inference mode, so that no check of the autograd layer above sim refuses the call first."""
    with torch.inference_mode(), pytest.raises(Exception) as on_cpu:
        REFUSED_UPDATES[update]("cpu")
    with torch.inference_mode(), pytest.raises(type(on_cpu.value)) as on_sim:
        REFUSED_UPDATES[update]("sim")
    assert str(on_sim.value).splitlines()[0] == str(on_cpu.value).splitlines()[0]
    torch.sim.synchronize()  # nothing was left queued to fail later


def test_a_foreach_call_that_returns_new_tensors_returns_them_before_the_device_ran_it():
    """`_foreach_sqrt` and `_foreach_add.List` allocate their new tensors and return them at once; the kernel fills
    them with the CPU's bits (NaNs where the CPU has them) and leaves its arguments as they were."""
    generator = torch.Generator().manual_seed(0)
    xs = [torch.randn(5, 3, generator=generator) for _ in range(4)]
    ys = [torch.randn(5, 3, generator=generator) for _ in range(4)]
    on_sim_x, on_sim_y = [x.to("sim") for x in xs], [y.to("sim") for y in ys]
    sleep = torch.sim.device_sleep(SLEEP_MS)
    started = time.monotonic()
    roots, sums = torch._foreach_sqrt(on_sim_x), torch._foreach_add(on_sim_x, on_sim_y, alpha=0.5)
    returned_after = time.monotonic() - started
    assert not torch.sim.current_stream().query() and returned_after * 1000 < SLEEP_MS / 2, returned_after
    sleep.wake()
    for got, want in zip([*roots, *sums], [*torch._foreach_sqrt(xs), *torch._foreach_add(xs, ys, alpha=0.5)]):
        assert got.device.type == "sim" and got.stride() == want.stride()
        assert torch.equal(got.cpu().isnan(), want.isnan()) and torch.equal(got.cpu().nan_to_num(), want.nan_to_num())
    assert all(torch.equal(got.cpu(), want) for got, want in zip(on_sim_x, xs))
    assert {t.untyped_storage().data_ptr() for t in roots}.isdisjoint(t.untyped_storage().data_ptr() for t in on_sim_x)


def long_lists(device: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """A 40×3 matrix and a list of 100 tensors, as a model's parameters are many: its 40 rows (views of one
    storage), 40 tensors of their own and 20 of those again, each passed a second time."""
    generator = torch.Generator().manual_seed(0)
    matrix = torch.randn(40, 3, generator=generator).to(device)
    own = [torch.randn(3, generator=generator).to(device) for _ in range(40)]
    return matrix, [*matrix.unbind(0), *own, *own[::2]]


def test_a_foreach_call_over_long_lists_of_repeated_and_shared_tensors_is_the_cpus_bit_for_bit():
    """Each tensor of a call has one alias on the host, however long its lists: a tensor passed twice is one tensor
    to the kernel and views of one storage share it, on the route without waiting (an in-place update, which also
    reaches the matrix the views share) and on the waiting one (`_foreach_norm`'s new tensors)."""
    results = {}
    for device in ("cpu", "sim"):
        matrix, tensors = long_lists(device)
        torch._foreach_addcmul_(tensors, tensors, tensors[::-1], value=0.5)  # later tensors read earlier updates
        norms = torch._foreach_norm(tensors)
        results[device] = [matrix, *tensors, *norms]
    assert all(got.device.type == "sim" for got in results["sim"])
    assert all(torch.equal(got.cpu(), want) for got, want in zip(results["sim"], results["cpu"], strict=True))
    matrix, tensors = long_lists("sim")
    torch._foreach_mul_(tensors, 2.0)
    assert tensors[0].data_ptr() == matrix.data_ptr() and torch.equal(matrix.cpu(), long_lists("cpu")[0] * 2.0)
