"""Quantization on sim (step 5, operators): quantized tensors are refused, the decomposed operators work.

sim registers no QuantizedPrivateUse1 kernels, so a quantized tensor on sim could not be dequantized, printed or
copied: every call that would create one fails in one line that says what to do instead. The operators that PT2E
quantization emits (`torch.ops.quantized_decomposed.*`) take and return ordinary tensors and compute on sim bit for
bit as on the CPU.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (defines torch.ops.quantized_decomposed, as PT2E does)

decomposed = torch.ops.quantized_decomposed
QUANTIZED_DTYPES = (torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4)


def scales(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel scales and zero points of a (2, 3) tensor quantized along dimension 0."""
    return torch.tensor([0.1, 0.2], device=device, dtype=torch.double), torch.tensor([0, 1], device=device)


CREATING_CALLS: dict[str, tuple[str, Callable[[], torch.Tensor]]] = {
    "quantize_per_tensor": ("QInt8", lambda: torch.quantize_per_tensor(torch.randn(4, device="sim"), 0.1, 0,
                                                                       torch.qint8)),
    "quantize_per_channel": ("QInt8", lambda: torch.quantize_per_channel(torch.randn(2, 3, device="sim"),
                                                                         *scales("sim"), 0, torch.qint8)),
    "quantize_per_tensor_dynamic": ("QUInt8", lambda: torch.quantize_per_tensor_dynamic(
        torch.randn(4, device="sim"), torch.quint8, False)),
    "_empty_affine_quantized": ("QUInt8", lambda: torch._empty_affine_quantized([3], scale=0.1, zero_point=0,
                                                                                dtype=torch.quint8, device="sim")),
    "_empty_per_channel_affine_quantized": ("QInt8", lambda: torch._empty_per_channel_affine_quantized(
        [2, 3], scales=torch.tensor([0.1, 0.2]), zero_points=torch.tensor([0, 0]), axis=0, dtype=torch.qint8,
        device="sim")),
    "empty_quantized": ("QInt32", lambda: torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint32).to("sim")),
    "empty.memory_format": ("QInt8", lambda: torch.empty(2, dtype=torch.qint8, device="sim")),
}


@pytest.mark.parametrize("operator", CREATING_CALLS)
def test_every_call_that_would_create_a_quantized_sim_tensor_is_refused_in_one_line(operator):
    dtype, create = CREATING_CALLS[operator]
    with warnings.catch_warnings(), pytest.raises(NotImplementedError) as raised:
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*deprecated")
        create()
    message = str(raised.value).split("\n\n")[0]  # the dispatcher's C++ stack trace, when asked for, follows
    assert "\n" not in message
    assert message.startswith(f'"aten::{operator}" not implemented for \'{dtype}\' on sim: sim holds no quantized '
                              "tensors. Quantize on the CPU, or use the operators PT2E quantization emits"), message


def test_the_capability_that_leaves_quantized_dtypes_out_matches_what_sim_refuses():
    supported = set(torch.accelerator.get_device_capability("sim:0")["supported_dtypes"])
    assert not supported & set(QUANTIZED_DTYPES)
    for dtype in QUANTIZED_DTYPES:
        with pytest.raises(NotImplementedError, match="sim holds no quantized tensors"):
            torch.empty(2, dtype=dtype, device="sim")


def test_a_tensor_quantized_on_the_cpu_still_works_there():
    """The advice the refusal gives works: quantize on the CPU, move the dequantized values to sim."""
    x = torch.randn(8)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*deprecated")
        quantized = torch.quantize_per_tensor(x, 0.05, 3, torch.quint8)
    on_sim = quantized.dequantize().to("sim")
    assert on_sim.device.type == "sim" and torch.equal(on_sim.cpu(), quantized.dequantize())


def per_tensor_flow(x: torch.Tensor) -> list[torch.Tensor]:
    """PT2E's static per-tensor pattern: observe, quantize to int8 and back, with tensor and float parameters."""
    scale, zero_point = decomposed.choose_qparams.tensor(x, -128, 127, torch.finfo(torch.float32).eps, torch.int8)
    q = decomposed.quantize_per_tensor.tensor(x, scale, zero_point, -128, 127, torch.int8)
    q_float = decomposed.quantize_per_tensor(x, 0.02, 5, -128, 127, torch.int8)
    return [scale, zero_point, q, decomposed.dequantize_per_tensor.tensor(q, scale, zero_point, -128, 127, torch.int8),
            q_float, decomposed.dequantize_per_tensor(q_float, 0.02, 5, -128, 127, torch.int8)]


def per_channel_flow(x: torch.Tensor) -> list[torch.Tensor]:
    """Per-channel weights, along dimension 0, as PT2E quantizes a linear layer's weight."""
    channel_scales = x.abs().amax(dim=1) / 127
    zero_points = torch.zeros(x.size(0), dtype=torch.int64, device=x.device)
    q = decomposed.quantize_per_channel(x, channel_scales, zero_points, 0, -128, 127, torch.int8)
    return [q, decomposed.dequantize_per_channel(q, channel_scales, zero_points, 0, -128, 127, torch.int8)]


def per_token_flow(x: torch.Tensor) -> list[torch.Tensor]:
    """Dynamic per-token activations, as PT2E quantizes a transformer's inputs."""
    scale, zero_point = decomposed.choose_qparams_per_token_asymmetric(x, torch.int8)
    q = decomposed.quantize_per_token(x, scale, zero_point, -128, 127, torch.int8)
    return [scale, zero_point, q,
            decomposed.dequantize_per_token(q, scale, zero_point, -128, 127, torch.int8, torch.float32)]


def per_group_flow(x: torch.Tensor) -> list[torch.Tensor]:
    """Groups of 4 channels per scale, as weight-only int4 quantization emits them (int8 storage, range -8..7)."""
    grouped = x.reshape(-1, 4)
    group_scales = (grouped.abs().amax(dim=1) / 7).reshape(x.size(0), -1)
    zero_points = torch.zeros_like(group_scales, dtype=torch.int64)
    q = decomposed.quantize_per_channel_group(x, group_scales, zero_points, -8, 7, torch.int8, 4)
    return [q, decomposed.dequantize_per_channel_group(q, group_scales, zero_points, -8, 7, torch.int8, 4,
                                                       torch.float32)]


def fake_quant_flow(x: torch.Tensor) -> list[torch.Tensor]:
    """Quantization-aware training's fake quantization, forward and its straight-through gradient."""
    leaf = x.detach().clone().requires_grad_()
    channel_scales = torch.full((x.size(0),), 0.03, device=x.device)
    zero_points = torch.zeros(x.size(0), dtype=torch.int32, device=x.device)
    out = decomposed.fake_quant_per_channel(leaf, channel_scales, zero_points, 0, -128, 127)
    out.square().sum().backward()
    return [out.detach(), leaf.grad]


@pytest.mark.parametrize("flow", [per_tensor_flow, per_channel_flow, per_token_flow, per_group_flow,
                                  fake_quant_flow], ids=lambda flow: flow.__name__)
def test_the_decomposed_operators_pt2e_emits_match_the_cpu_bit_for_bit(flow):
    x = torch.randn(6, 16, generator=torch.Generator().manual_seed(0)) * 3
    on_cpu, on_sim = flow(x), flow(x.to("sim"))
    assert len(on_cpu) == len(on_sim)
    for cpu, sim in zip(on_cpu, on_sim):
        assert sim.device.type == "sim" and not sim.is_quantized
        torch.testing.assert_close(sim.cpu(), cpu, rtol=0, atol=0)
