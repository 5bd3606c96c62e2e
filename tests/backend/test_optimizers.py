"""Optimizers as users pick them: foreach and fused AdamW, Adam and SGD steps on sim, bit for bit the CPU's, each
through sim's own kernels (none reaches the fallback)."""
from __future__ import annotations

import time
from typing import Callable

import pytest
import torch

OPTIMIZERS = {
    "AdamW": (torch.optim.AdamW, {"lr": 0.1, "weight_decay": 0.01}),
    "Adam, amsgrad": (torch.optim.Adam, {"lr": 0.1, "amsgrad": True}),
    "SGD, momentum": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True}),
}


def trained(device: str, optimizer: str, implementation: str,
            last_step: Callable[[torch.optim.Optimizer], None] | None = None) -> list[torch.Tensor]:
    """The parameters of a small MLP after three steps of `optimizer`, computed on `device` (`last_step` takes the
    third step itself)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(device)
    inputs = torch.randn(5, 8).to(device)
    kind, settings = OPTIMIZERS[optimizer]
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



# Steps made only of updates that return nothing (foreach and fused kernels of in-place updates). AdamW's and
# Adam's foreach steps also call `_foreach_sqrt`, whose new tensors the host waits for.
WITHOUT_WAITING = [("AdamW", "fused"), ("Adam, amsgrad", "fused"), ("SGD, momentum", "fused"),
                   ("SGD, momentum", "foreach")]
SLEEP_MS = 1500  # long enough that the host's own steps take a small part of it


@pytest.mark.parametrize(("optimizer", "implementation"), WITHOUT_WAITING)
def test_a_step_of_in_place_updates_returns_before_the_device_ran_it(optimizer, implementation):
    """Its updates are launched without waiting, as CUDA's foreach and fused kernels are: behind a sleeping device
    the step returns at once with its work still queued, and once synchronised the parameters are the CPU's."""
    seen = {}

    def behind_a_sleeping_device(step: torch.optim.Optimizer) -> None:
        torch.sim.device_sleep(SLEEP_MS)
        started = time.monotonic()
        step.step()
        seen["returned after"] = time.monotonic() - started
        seen["pending"] = not torch.sim.current_stream().query()

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
}


@pytest.mark.parametrize("update", list(REFUSED_UPDATES))
def test_an_update_the_cpu_refuses_raises_at_its_call_with_the_cpus_message(update):
    """A call of an update that returns nothing takes the route without waiting only where the CPU's kernel will
    take its arguments; any other call waits, so that the CPU's error is raised by the call itself, not by the
    next synchronising call."""
    with pytest.raises(Exception) as on_cpu:
        REFUSED_UPDATES[update]("cpu")
    with pytest.raises(type(on_cpu.value)) as on_sim:
        REFUSED_UPDATES[update]("sim")
    assert str(on_sim.value).splitlines()[0] == str(on_cpu.value).splitlines()[0]
    torch.sim.synchronize()  # nothing was left queued to fail later
