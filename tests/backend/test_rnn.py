"""RNNs: nn.LSTM, nn.GRU, nn.RNN and their cells take the CPU's own route on sim (whole-sequence kernels on the
host, backend/torch_sim/csrc/operators_rnn.cpp), so forward, backward and AdamW training are bit-identical to the CPU, with
no fallback call. The fused cells PyTorch sends other devices to are sim kernels too, for direct calls."""
from __future__ import annotations

import copy

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

KINDS = {
    "LSTM": lambda **options: torch.nn.LSTM(6, 8, **options),
    "GRU": lambda **options: torch.nn.GRU(6, 8, **options),
    "RNN tanh": lambda **options: torch.nn.RNN(6, 8, **options),
    "RNN relu": lambda **options: torch.nn.RNN(6, 8, nonlinearity="relu", **options),
}
SHAPES = {  # options of the layer, and whether the batch is a packed sequence of different lengths
    "2 layers": ({"num_layers": 2}, False),
    "bidirectional batch_first": ({"num_layers": 2, "bidirectional": True, "batch_first": True}, False),
    "3 layers with dropout": ({"num_layers": 3, "dropout": 0.3}, False),
    "packed bidirectional": ({"num_layers": 2, "bidirectional": True}, True),
    "without bias": ({"bias": False}, False),
}
LENGTHS = torch.tensor([5, 2, 4])


def run_steps(model: torch.nn.Module, batches, packed: bool, batch_first: bool, device: str) -> list:
    """Three AdamW steps; everything the CPU and sim must agree on, on the CPU: outputs, hidden state, gradients."""
    torch.manual_seed(3)  # seeds the CPU's generator and sim's alike: the same dropout masks
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    seen = []
    for x in batches:
        x = x.to(device)
        optimizer.zero_grad()
        if packed:
            output, hidden = model(pack_padded_sequence(x, LENGTHS, batch_first=batch_first, enforce_sorted=False))
            output = pad_packed_sequence(output, batch_first=batch_first)[0]
        else:
            output, hidden = model(x)
        hidden = hidden if isinstance(hidden, tuple) else (hidden,)
        loss = (output * output).mean() + sum((h * h).sum() for h in hidden)
        loss.backward()
        optimizer.step()
        seen += [output, *hidden, *(p.grad for p in model.parameters())]
    seen += list(model.parameters())
    return [t.detach().cpu() for t in seen]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", KINDS)
def test_training_is_bit_identical_to_the_cpu_with_no_fallback(kind, shape):
    options, packed = SHAPES[shape]
    torch.manual_seed(0)
    model = KINDS[kind](**options)
    batch_first = options.get("batch_first", False)
    batches = [torch.randn((3, 5, 6) if batch_first else (5, 3, 6)) for _ in range(3)]
    expected = run_steps(copy.deepcopy(model), batches, packed, batch_first, "cpu")
    torch.sim.reset_fallback_counts()
    actual = run_steps(copy.deepcopy(model), batches, packed, batch_first, "sim")
    assert torch.sim.fallback_counts() == {}
    assert len(actual) == len(expected)
    for index, (a, e) in enumerate(zip(actual, expected)):
        assert torch.equal(a, e), f"tensor {index} differs by {(a - e).abs().max().item()}"


@pytest.mark.parametrize("cell", [torch.nn.LSTMCell, torch.nn.GRUCell, torch.nn.RNNCell])
def test_cells_match_the_cpu_bit_for_bit(cell):
    torch.manual_seed(0)
    cpu = cell(6, 8)
    sim = copy.deepcopy(cpu).to("sim")
    x = torch.randn(3, 6)
    results = {}
    for device, model in (("cpu", cpu), ("sim", sim)):
        xd = x.detach().to(device).requires_grad_()
        output = model(xd)
        output = output[0] if isinstance(output, tuple) else output
        (output * output).sum().backward()
        results[device] = [t.detach().cpu() for t in (output, xd.grad, *(p.grad for p in model.parameters()))]
    assert all(torch.equal(a, e) for a, e in zip(results["sim"], results["cpu"]))


def test_inference_mode_takes_the_cpu_route_too():
    torch.manual_seed(0)
    cpu = torch.nn.LSTM(6, 8, num_layers=3, dropout=0.5)
    sim = copy.deepcopy(cpu).to("sim")
    x = torch.randn(5, 3, 6)
    with torch.inference_mode():
        torch.manual_seed(7)
        expected = cpu(x)[0]
        torch.manual_seed(7)
        actual = sim(x.to("sim"))[0]
    assert actual.device.type == "sim" and torch.equal(actual.cpu(), expected)


def test_the_whole_sequence_operators_have_sim_kernels_on_both_keys():
    from torch_sim.operators import RECURRENT_OPERATORS

    for name in RECURRENT_OPERATORS:
        for key in ("PrivateUse1", "AutogradPrivateUse1"):
            assert torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", key), (name, key)
    output = torch.nn.GRU(4, 4).to("sim")(torch.randn(2, 1, 4, device="sim"))[0]
    assert output.grad_fn.name() == "SimGruBackward"


def test_backward_twice_and_in_place_changes_fail_as_on_the_cpu():
    model = torch.nn.LSTM(4, 4).to("sim")
    x = torch.randn(3, 2, 4, device="sim")
    loss = model(x)[0].sum()
    loss.backward(retain_graph=True)
    loss.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()
    output = model(x)[0]
    output.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        output.sum().backward()


def test_a_host_tensor_among_sim_tensors_is_a_clear_error():
    model = torch.nn.GRU(4, 4).to("sim")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device.*sim:0 and cpu"):
        model(torch.randn(3, 2, 4))


@pytest.mark.parametrize("kind", [torch.nn.GRU, torch.nn.LSTM])
def test_second_derivatives_match_the_cpu(kind):
    torch.manual_seed(0)
    cpu = kind(4, 6, num_layers=2)
    sim = copy.deepcopy(cpu).to("sim")
    x = torch.randn(5, 2, 4)
    results = {}
    for device, model in (("cpu", cpu), ("sim", sim)):
        xd = x.detach().to(device).requires_grad_()
        (grad,) = torch.autograd.grad(model(xd)[0].pow(2).sum(), xd, create_graph=True)
        grad.pow(2).sum().backward()
        results[device] = [xd.grad.cpu(), *(p.grad.cpu() for p in model.parameters())]
    # two host backward passes on sim, one on the CPU: the same sums, added in another order
    for actual, expected in zip(results["sim"], results["cpu"]):
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)


def test_the_fused_cells_are_sim_kernels_not_the_fallback():
    for operator in ("aten::_thnn_fused_lstm_cell", "aten::_thnn_fused_gru_cell",
                     "aten::_thnn_fused_lstm_cell_backward_impl", "aten::_thnn_fused_gru_cell_backward"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(operator, "PrivateUse1"), operator
    torch.sim.reset_fallback_counts()
    input_gates, hidden_gates = torch.randn(2, 16, device="sim"), torch.randn(2, 16, device="sim")
    hy, cy, _ = torch.ops.aten._thnn_fused_lstm_cell(input_gates, hidden_gates, torch.randn(2, 4, device="sim"))
    assert hy.shape == cy.shape == (2, 4)
    assert not [name for name in torch.sim.fallback_counts() if "thnn" in name]
