"""Attention: sim answers PyTorch's per-device attention choice with OVERRIDEABLE and implements
`_scaled_dot_product_fused_attention_overrideable` and its backward on the host's flash kernel, so
`scaled_dot_product_attention` is bit-identical to the CPU, forward and backward. Asked for the gradient of the
mask, the overrideable backward gives the one the CPU computes on its math path."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
VARIANTS = ["plain", "causal", "mask", "boolean mask"]


def arguments(variant: str, dtype: torch.dtype) -> dict:
    if variant == "causal":
        return {"is_causal": True}
    if variant == "mask":
        return {"attn_mask": torch.randn(8, 8, dtype=dtype)}
    if variant == "boolean mask":
        return {"attn_mask": torch.rand(8, 8) > 0.3}
    return {}


def on(device: str, values: dict) -> dict:
    return {name: value.to(device) if isinstance(value, torch.Tensor) else value for name, value in values.items()}


def test_the_choice_for_sim_is_the_overrideable_backend():
    q = torch.randn(2, 4, 8, 16, device="sim")
    assert torch._fused_sdp_choice(q, q, q) == SDPBackend.OVERRIDEABLE.value
    assert torch._C._dispatch_has_kernel_for_dispatch_key(
        "aten::_scaled_dot_product_fused_attention_overrideable", "PrivateUse1")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_forward_and_backward_are_bit_identical_to_cpu(dtype, variant):
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 8, 16, dtype=dtype, generator=generator) for _ in range(3))
    extra = arguments(variant, dtype)
    results = {}
    for device in ("cpu", "sim"):
        leaves = [t.detach().clone().to(device).requires_grad_() for t in (q, k, v)]
        out = F.scaled_dot_product_attention(*leaves, **on(device, extra))
        out.backward(torch.ones_like(out))
        results[device] = [out.detach().cpu()] + [leaf.grad.cpu() for leaf in leaves]
    for cpu, sim in zip(results["cpu"], results["sim"]):
        assert torch.equal(cpu, sim)


@pytest.mark.parametrize("mask_shape", [(8, 8), (2, 4, 8, 8)], ids=["broadcast mask", "full mask"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_a_mask_that_requires_grad_gets_the_cpus_gradient(dtype, mask_shape):
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 8, 16, dtype=dtype, generator=generator) for _ in range(3))
    mask = torch.randn(mask_shape, dtype=dtype, generator=generator)
    gradients = {}
    for device in ("cpu", "sim"):
        leaves = [t.detach().clone().to(device).requires_grad_() for t in (q, k, v, mask)]
        F.scaled_dot_product_attention(*leaves[:3], attn_mask=leaves[3]).sum().backward()
        gradients[device] = [leaf.grad.cpu() for leaf in leaves]
    for cpu, sim in zip(gradients["cpu"], gradients["sim"]):
        assert torch.equal(cpu, sim)


MASK_SHAPES = [(8, 8), (1, 1, 8, 8), (2, 1, 8, 8), (2, 4, 8, 8)]
OVERRIDEABLE = torch.ops.aten._scaled_dot_product_fused_attention_overrideable
OVERRIDEABLE_BACKWARD = torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward


def attention_inputs(dtype: torch.dtype, mask_shape: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    """query, key, value (2 batches, 4 heads, 8 positions, 16 features), an additive mask and an output gradient."""
    generator = torch.Generator().manual_seed(0)
    q, k, v, grad_out = (torch.randn(2, 4, 8, 16, dtype=dtype, generator=generator) for _ in range(4))
    return q, k, v, torch.randn(mask_shape, dtype=dtype, generator=generator), grad_out


def cpu_mask_gradient(q, k, v, mask, grad_out) -> torch.Tensor:
    """The mask's gradient the CPU computes: scaled_dot_product_attention with every input requiring grad."""
    leaves = [t.clone().requires_grad_() for t in (q, k, v, mask)]
    F.scaled_dot_product_attention(*leaves[:3], attn_mask=leaves[3]).backward(grad_out)
    return leaves[3].grad


@pytest.mark.parametrize("mask_shape", MASK_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_overrideable_backward_gives_the_masks_gradient_bit_identical_to_the_cpu(dtype, mask_shape):
    """Called directly, as PyTorch's reference backend's test calls it: a mask broadcast over batch or heads gets
    its gradient summed to its own shape, as the CPU's autograd sums it."""
    q, k, v, mask, grad_out = attention_inputs(dtype, mask_shape)
    on_sim = [t.to("sim") for t in (q, k, v, mask)]
    out, logsumexp, cum_q, cum_k, max_q, max_k, seed, offset, _ = OVERRIDEABLE(*on_sim[:3], attn_bias=on_sim[3])
    gradients = OVERRIDEABLE_BACKWARD(grad_out.to("sim"), *on_sim, [True] * 4, out, logsumexp, cum_q, cum_k, max_q,
                                      max_k, 0.0, False, seed, offset)
    assert gradients[3].device.type == "sim"
    torch.testing.assert_close(gradients[3].cpu(), cpu_mask_gradient(q, k, v, mask, grad_out), rtol=0, atol=0)


@pytest.mark.parametrize("mask_shape", MASK_SHAPES, ids=str)
def test_autograd_through_the_overrideable_attention_gives_the_mask_the_cpus_gradient(mask_shape):
    q, k, v, mask, grad_out = attention_inputs(torch.bfloat16, mask_shape)
    leaves = [t.to("sim").requires_grad_() for t in (q, k, v, mask)]
    OVERRIDEABLE(*leaves[:3], attn_bias=leaves[3])[0].backward(grad_out.to("sim"))
    torch.testing.assert_close(leaves[3].grad.cpu(), cpu_mask_gradient(q, k, v, mask, grad_out), rtol=0, atol=0)


@pytest.mark.parametrize("case", ["boolean mask", "dropout"])
def test_a_mask_gradient_sim_cannot_give_is_refused_in_one_line(case):
    q, k, v, mask, grad_out = (t.to("sim") for t in attention_inputs(torch.float32, (8, 8)))
    out, logsumexp, cum_q, cum_k, max_q, max_k, seed, offset, _ = OVERRIDEABLE(q, k, v, attn_bias=mask)
    mask, dropout_p, error, says = {
        "boolean mask": (mask > 0, 0.0, ValueError, "a torch.bool attention mask has no gradient; pass "
                                                    "grad_input_mask[3]=False"),
        "dropout": (mask, 0.5, NotImplementedError, "cannot give the mask's gradient with dropout_p > 0; call "
                                                    "scaled_dot_product_attention"),
    }[case]
    with pytest.raises(error) as raised:
        OVERRIDEABLE_BACKWARD(grad_out, q, k, v, mask, [True] * 4, out, logsumexp, cum_q, cum_k, max_q, max_k,
                              dropout_p, False, seed, offset)
    assert says in str(raised.value) and "\n" not in str(raised.value)


def test_dropout_draws_from_sims_generator_like_the_cpu_from_its_own():
    q, k, v = (torch.randn(2, 4, 8, 16) for _ in range(3))
    torch.manual_seed(7)
    cpu = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    torch.sim.manual_seed(7)
    sim = F.scaled_dot_product_attention(q.to("sim"), k.to("sim"), v.to("sim"), dropout_p=0.5)
    torch.sim.manual_seed(8)
    other = F.scaled_dot_product_attention(q.to("sim"), k.to("sim"), v.to("sim"), dropout_p=0.5)
    assert torch.equal(cpu, sim.cpu())
    assert not torch.equal(sim, other)


def test_multihead_attention_trains_like_the_cpu_and_runs_its_fast_path():
    torch.manual_seed(0)
    cpu = torch.nn.MultiheadAttention(16, 4, batch_first=True)
    sim = copy.deepcopy(cpu).to("sim")
    x = torch.randn(3, 5, 16)
    for model, device in ((cpu, "cpu"), (sim, "sim")):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        on_device = x.to(device)  # one tensor for query, key and value: MultiheadAttention's packed path
        for _ in range(3):
            optimizer.zero_grad()
            out, _ = model(on_device, on_device, on_device)
            out.square().sum().backward()
            optimizer.step()
    for p_cpu, p_sim in zip(cpu.parameters(), sim.parameters()):
        assert torch.equal(p_cpu.detach(), p_sim.detach().cpu())
    cpu.eval(), sim.eval()
    x_sim = x.to("sim")
    with torch.inference_mode():
        fast_cpu, _ = cpu(x, x, x, need_weights=False)
        fast_sim, _ = sim(x_sim, x_sim, x_sim, need_weights=False)
    assert torch.equal(fast_cpu, fast_sim.cpu())


FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
FLASH_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


@pytest.mark.parametrize(("query_shape", "key_shape"), [((1, 2, 0, 4), (1, 2, 5, 4)), ((1, 2, 3, 4), (1, 2, 0, 4)),
                                                        ((1, 0, 3, 4), (1, 0, 5, 4))],
                         ids=["no query tokens", "no key tokens", "no heads"])
def test_flash_attention_without_heads_or_tokens_is_refused_where_the_cpus_kernel_stops_the_process(query_shape,
                                                                                                    key_shape):
    """The CPU's flash kernel divides by the numbers of heads and tokens, and such a call stops its process (SIGFPE),
    so this test cannot make it on the CPU. sim refuses it in one line, forward and backward, and goes on."""
    q, k = torch.randn(query_shape, device="sim"), torch.randn(key_shape, device="sim")
    with pytest.raises(ValueError, match="flash attention needs at least one head and one token") as raised:
        FLASH(q, k, k)
    assert "\n" not in str(raised.value)
    with pytest.raises(ValueError, match="flash attention needs at least one head and one token"):
        FLASH_BACKWARD(q, q, k, k, q, torch.empty(query_shape[:3], device="sim"), 0.0, False)
    q, k = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4)
    assert torch.equal(FLASH(q.to("sim"), k.to("sim"), k.to("sim"))[0].cpu(), FLASH(q, k, k)[0])


def rows_not_contiguous(t: torch.Tensor) -> torch.Tensor:
    """`t`'s values, laid out with its last two dimensions swapped in memory: each row of features strided."""
    return t.transpose(2, 3).contiguous().transpose(2, 3)


def attention_by_its_definition(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, -1) @ v


@pytest.mark.parametrize("argument", ["query", "key", "value"])
def test_flash_attention_refuses_strided_rows_of_features_where_the_cpus_kernel_gives_a_wrong_result(argument):
    generator = torch.Generator().manual_seed(0)
    inputs = {"query": torch.randn(2, 3, 5, 4, dtype=torch.float64, generator=generator),
              "key": torch.randn(2, 3, 7, 4, dtype=torch.float64, generator=generator),
              "value": torch.randn(2, 3, 7, 4, dtype=torch.float64, generator=generator)}
    expected = attention_by_its_definition(*inputs.values())
    strided = dict(inputs, **{argument: rows_not_contiguous(inputs[argument])})
    assert not torch.allclose(FLASH(*strided.values())[0], expected), "the CPU's kernel computes such rows right now"
    with pytest.raises(ValueError, match=f"reads each row of features as contiguous, but {argument} has strides"):
        FLASH(*(t.to("sim") for t in strided.values()))
    as_the_error_says = FLASH(*(t.contiguous().to("sim") for t in strided.values()))[0]
    torch.testing.assert_close(as_the_error_says.cpu(), expected)


def test_flash_attention_backward_refuses_a_result_with_strided_rows_where_the_cpus_kernel_gives_a_wrong_result():
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4, dtype=torch.float64, generator=generator).requires_grad_() for _ in range(3))
    grad_out = torch.randn(2, 3, 5, 4, dtype=torch.float64, generator=generator)
    expected = torch.autograd.grad(attention_by_its_definition(q, k, v), (q, k, v), grad_out)
    out, logsumexp = FLASH(q.detach(), k.detach(), v.detach())
    strided = (grad_out, q.detach(), k.detach(), v.detach(), rows_not_contiguous(out), logsumexp, 0.0, False)
    assert not torch.allclose(FLASH_BACKWARD(*strided)[0], expected[0]), "the CPU's kernel computes it right now"
    on_sim = [t.to("sim") if isinstance(t, torch.Tensor) else t for t in strided]
    with pytest.raises(ValueError, match="reads each row of features as contiguous, but out has strides"):
        FLASH_BACKWARD(*on_sim)
    on_sim[4] = on_sim[4].contiguous()
    for gradient, wanted in zip(FLASH_BACKWARD(*on_sim), expected):
        torch.testing.assert_close(gradient.cpu(), wanted)
