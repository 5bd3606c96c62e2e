"""RNNs: PyTorch sends every non-CPU device to fused cell kernels (`_thnn_fused_*_cell`), which sim
implements; forward, backward and training match the CPU."""
from __future__ import annotations

import copy

import pytest
import torch

MODULES = {
    "LSTM": lambda: torch.nn.LSTM(8, 16, num_layers=2),
    "GRU": lambda: torch.nn.GRU(8, 16, num_layers=2, bidirectional=True),
    "LSTMCell": lambda: torch.nn.LSTMCell(8, 16),
    "GRUCell": lambda: torch.nn.GRUCell(8, 16),
    "LSTM without bias": lambda: torch.nn.LSTM(8, 16, bias=False, batch_first=True),
}


def inputs(name: str) -> torch.Tensor:
    shape = (3, 8) if name.endswith("Cell") else (3, 5, 8) if name == "LSTM without bias" else (5, 3, 8)
    return torch.randn(*shape, generator=torch.Generator().manual_seed(1))


def first_output(result):
    return result[0] if isinstance(result, tuple) else result


@pytest.mark.parametrize("name", MODULES)
def test_forward_and_backward_match_the_cpu(name):
    torch.manual_seed(0)
    cpu = MODULES[name]()
    sim = copy.deepcopy(cpu).to("sim")
    x = inputs(name)
    out_cpu, out_sim = first_output(cpu(x)), first_output(sim(x.to("sim")))
    assert out_sim.device.type == "sim"
    torch.testing.assert_close(out_sim.cpu(), out_cpu, rtol=1e-5, atol=1e-6)
    (out_cpu * out_cpu).sum().backward()
    (out_sim * out_sim).sum().backward()
    for (parameter, p_cpu), p_sim in zip(cpu.named_parameters(), sim.parameters()):
        torch.testing.assert_close(p_sim.grad.cpu(), p_cpu.grad, rtol=1e-5, atol=1e-6, msg=parameter)


def test_training_an_lstm_matches_the_cpu():
    torch.manual_seed(0)
    models = {"cpu": torch.nn.LSTM(8, 16, num_layers=2)}
    models["sim"] = copy.deepcopy(models["cpu"]).to("sim")
    data = [(torch.randn(6, 4, 8), torch.randn(6, 4, 16)) for _ in range(5)]
    losses = {}
    for device, model in models.items():
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        for x, y in data:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x.to(device))[0], y.to(device))
            loss.backward()
            optimizer.step()
        losses[device] = loss.item()
    assert losses["sim"] == pytest.approx(losses["cpu"], rel=1e-4)
    for p_cpu, p_sim in zip(models["cpu"].parameters(), models["sim"].parameters()):
        torch.testing.assert_close(p_sim.detach().cpu(), p_cpu.detach(), rtol=1e-4, atol=1e-5)


def test_the_fused_cells_are_sim_kernels_not_the_fallback():
    for operator in ("aten::_thnn_fused_lstm_cell", "aten::_thnn_fused_gru_cell",
                     "aten::_thnn_fused_lstm_cell_backward_impl", "aten::_thnn_fused_gru_cell_backward"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(operator, "PrivateUse1"), operator
    torch.sim.reset_fallback_counts()
    model = torch.nn.GRU(4, 4).to("sim")
    model(torch.randn(2, 1, 4, device="sim"))[0].sum().backward()
    assert not [name for name in torch.sim.fallback_counts() if "thnn" in name]
