"""Shared parameters stay shared: `model.to("sim")` keeps tied weights one Parameter, as on CUDA,
because sim declares its tensors shallow-copy compatible with CPU tensors."""
from __future__ import annotations

import torch


class TiedLanguageModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(20, 8)
        self.head = torch.nn.Linear(8, 20, bias=False)
        self.head.weight = self.embedding.weight


def test_tied_weights_stay_one_parameter_there_and_back():
    model = TiedLanguageModel()
    parameter = model.embedding.weight
    model.to("sim:1")
    assert model.head.weight is model.embedding.weight is parameter
    assert parameter.device == torch.device("sim:1")
    assert len(list(model.parameters())) == 1
    model.to("cpu")
    assert model.head.weight is model.embedding.weight is parameter and parameter.device.type == "cpu"


def test_a_tied_weight_gets_both_gradients():
    model = TiedLanguageModel().to("sim")
    tokens = torch.tensor([[1, 2, 3]], device="sim")
    model.head(model.embedding(tokens)).sum().backward()
    reference = TiedLanguageModel()
    reference.load_state_dict({name: value.cpu() for name, value in model.state_dict().items()})
    reference.head(reference.embedding(tokens.cpu())).sum().backward()
    assert torch.equal(model.embedding.weight.grad.cpu(), reference.embedding.weight.grad)


def test_assigning_data_across_cpu_and_sim_works_both_ways():
    parameter = torch.nn.Parameter(torch.zeros(3))
    parameter.data = torch.ones(3, device="sim")
    assert parameter.device.type == "sim" and parameter.requires_grad
    parameter.data = torch.full((3,), 2.0)
    assert parameter.device.type == "cpu" and parameter.tolist() == [2.0, 2.0, 2.0]


def test_the_rule_is_a_sim_kernel_for_the_composite_operator():
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::_has_compatible_shallow_copy_type", "PrivateUse1")
    assert torch._has_compatible_shallow_copy_type(torch.ones(1), torch.ones(1, device="sim"))
    assert not torch._has_compatible_shallow_copy_type(torch.ones(1, device="sim"), torch.ones(1, device="meta"))
