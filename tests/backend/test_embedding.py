"""Embedding lookups on sim against the CPU, bit for bit: forward and gradients, in every floating dtype.

sim runs the host's kernels, so `embedding` and `embedding_bag` must give the CPU's exact bits, including in
float16 and bfloat16. The cases take few and many indices (the CPU's embedding backward takes another route for
many), every bag mode, per-sample weights, padding and a weight that starts at an unaligned storage offset.
"""
from __future__ import annotations

from typing import Callable

import pytest
import torch
import torch.nn.functional as F

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
ROWS, WIDTH = 97, 33


def _lookups_on(device: str, dtype: torch.dtype, count: int, lookup: Callable, storage_offset: int = 0):
    """The output and the weight's gradient of `lookup(weight, indices, offsets)` on `device` for fixed data."""
    generator = torch.Generator().manual_seed(count)
    flat = torch.randn(ROWS * WIDTH + storage_offset, generator=generator).to(dtype)
    indices = torch.randint(0, ROWS, (count,), generator=generator)
    offsets = torch.sort(torch.randint(0, count, (max(1, count // 7),), generator=generator)).values
    offsets[0] = 0
    weight = flat.to(device)[storage_offset:].view(ROWS, WIDTH).detach().requires_grad_()
    output = lookup(weight, indices.to(device), offsets.to(device))
    output_grad = torch.randn(output.shape, generator=generator).to(dtype)
    output.backward(output_grad.to(device))
    return output.detach().cpu(), weight.grad.cpu()


def _assert_bitwise_equal_to_cpu(dtype: torch.dtype, count: int, lookup: Callable, storage_offset: int = 0) -> None:
    cpu_output, cpu_grad = _lookups_on("cpu", dtype, count, lookup, storage_offset)
    sim_output, sim_grad = _lookups_on("sim", dtype, count, lookup, storage_offset)
    assert sim_output.dtype == cpu_output.dtype == dtype
    torch.testing.assert_close(sim_output, cpu_output, rtol=0, atol=0)
    torch.testing.assert_close(sim_grad, cpu_grad, rtol=0, atol=0)


EMBEDDINGS = {
    "plain": lambda weight, indices, offsets: F.embedding(indices, weight),
    "padding_idx": lambda weight, indices, offsets: F.embedding(indices, weight, padding_idx=3),
    "scale_grad_by_freq": lambda weight, indices, offsets: F.embedding(indices, weight, scale_grad_by_freq=True),
    "two-dimensional indices": lambda weight, indices, offsets: F.embedding(indices[: indices.numel() // 4 * 4]
                                                                            .view(4, -1), weight),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("count", (40, 4000), ids=("few indices", "many indices"))
@pytest.mark.parametrize("variant", EMBEDDINGS)
def test_embedding_matches_the_cpu_bit_for_bit(dtype, count, variant):
    _assert_bitwise_equal_to_cpu(dtype, count, EMBEDDINGS[variant])


def _bag(mode: str, **options) -> Callable:
    return lambda weight, indices, offsets: F.embedding_bag(indices, weight, offsets, mode=mode, **options)


def _weighted_bag(weight, indices, offsets):
    weights = torch.linspace(0.1, 2.0, indices.numel(), dtype=weight.dtype).to(weight.device)
    return F.embedding_bag(indices, weight, offsets, mode="sum", per_sample_weights=weights)


def _bag_with_last_offset(weight, indices, offsets):
    """include_last_offset needs the last offset to be the number of indices (the end of the last bag)."""
    ends = torch.cat([offsets, torch.tensor([indices.numel()], device=offsets.device)])
    return F.embedding_bag(indices, weight, ends, mode="sum", include_last_offset=True)


BAGS = {
    "sum": _bag("sum"),
    "mean": _bag("mean"),
    "max": _bag("max"),
    "per_sample_weights": _weighted_bag,
    "padding_idx": _bag("mean", padding_idx=5),
    "include_last_offset": _bag_with_last_offset,
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("count", (40, 4000))
@pytest.mark.parametrize("variant", BAGS)
def test_embedding_bag_matches_the_cpu_bit_for_bit(dtype, count, variant):
    _assert_bitwise_equal_to_cpu(dtype, count, BAGS[variant])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_lookups_in_a_weight_at_an_unaligned_offset_match_the_cpu(dtype):
    _assert_bitwise_equal_to_cpu(dtype, 500, BAGS["sum"], storage_offset=3)
    _assert_bitwise_equal_to_cpu(dtype, 500, EMBEDDINGS["plain"], storage_offset=3)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16), ids=str)
def test_forward_only_embedding_bag_matches_the_cpu_bit_for_bit(dtype):
    """Without gradients embedding_bag takes another operator (_embedding_bag_forward_only)."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(ROWS, WIDTH, generator=generator).to(dtype)
    indices = torch.randint(0, ROWS, (300,), generator=generator)
    offsets = torch.arange(0, 300, 7)
    with torch.no_grad():
        on_cpu = F.embedding_bag(indices, weight, offsets, mode="mean")
        on_sim = F.embedding_bag(indices.to("sim"), weight.to("sim"), offsets.to("sim"), mode="mean")
    torch.testing.assert_close(on_sim.cpu(), on_cpu, rtol=0, atol=0)


def test_indices_out_of_range_are_the_devices_error_raised_by_the_next_synchronising_call():
    """The lookup reads its indices on the device, as CUDA's does: the CPU's reason comes with the next synchronising
    call, naming the kernel that failed."""
    weight = torch.randn(4, 2, device="sim")
    F.embedding(torch.tensor([4], device="sim"), weight)
    with pytest.raises(RuntimeError, match=r"the kernel 'sim::index_select' failed on sim:0 .*index out of range"):
        torch.sim.synchronize()
