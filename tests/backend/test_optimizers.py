"""Optimizers as users pick them: foreach and fused AdamW, Adam and SGD steps on sim, bit for bit the CPU's, each
through sim's own kernels (none reaches the fallback)."""
from __future__ import annotations

import copy

import pytest
import torch

OPTIMIZERS = {
    "AdamW": (torch.optim.AdamW, {"lr": 0.1, "weight_decay": 0.01}),
    "Adam, amsgrad": (torch.optim.Adam, {"lr": 0.1, "amsgrad": True}),
    "SGD, momentum": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True}),
}


def trained(device: str, optimizer: str, implementation: str) -> list[torch.Tensor]:
    """The parameters of a small MLP after three steps of `optimizer`, computed on `device`."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(device)
    inputs = torch.randn(5, 8).to(device)
    kind, settings = OPTIMIZERS[optimizer]
    step = kind(model.parameters(), **settings, **{implementation: True})
    for _ in range(3):
        step.zero_grad()
        model(inputs).square().sum().backward()
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

