"""Step 9: autocast on sim, with the documented cast policy."""
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from torch_sim import amp


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_lower_precision_operators_run_in_the_autocast_dtype(dtype):
    a = torch.randn(8, 8, device="sim")
    linear = torch.nn.Linear(8, 4).sim()
    with torch.autocast("sim", dtype=dtype):
        assert torch.sim.is_autocast_enabled()
        assert torch.sim.get_autocast_dtype() == dtype
        product = a @ a
        projected = linear(a)
    assert product.dtype == dtype and projected.dtype == dtype
    torch.testing.assert_close(product.cpu(), a.cpu().to(dtype) @ a.cpu().to(dtype), rtol=0, atol=0)


def test_float32_operators_are_cast_up():
    low = torch.randn(4, device="sim").to(torch.bfloat16)
    with torch.autocast("sim", dtype=torch.bfloat16):
        assert torch.exp(low).dtype == torch.float32
        assert torch.nn.functional.layer_norm(low, (4,)).dtype == torch.float32


def test_other_operators_keep_their_input_dtype():
    x = torch.randn(4, device="sim")
    with torch.autocast("sim", dtype=torch.bfloat16):
        assert (x + x).dtype == torch.float32
        assert torch.relu(x.to(torch.float16)).dtype == torch.float16


def test_training_step_under_autocast():
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).sim()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, target = torch.randn(8, 16, device="sim"), torch.randint(0, 2, (8,), device="sim")
    with torch.autocast("sim", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(x), target)
    loss.backward()
    optimizer.step()
    assert model[0].weight.grad.dtype == torch.float32


def test_cast_policy_is_read_from_the_dispatcher():
    policy = amp.cast_policy()
    assert policy["aten::mm"] == "lower_precision"
    assert policy["aten::exp"] == "float32"
    assert policy["aten::softmax.int"] == "float32_set_opt_dtype"
    assert policy["aten::norm.ScalarOpt_dim"] == "float32_append_dtype"
    assert policy["aten::index_put"] == "promote"
    assert "aten::add.Tensor" not in policy and "other" not in policy.values()
    assert torch.sim.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]


def test_unsupported_autocast_dtype_is_refused():
    with pytest.raises(ValueError, match="sim autocast supports"):
        torch.sim.set_autocast_dtype(torch.int8)


# cuDNN's own operators: they exist only on CUDA, so sim has nothing to cast for them.
CUDA_ONLY_OPERATORS = {"aten::cudnn_convolution", "aten::cudnn_convolution_transpose"}


def test_sims_policy_covers_cudas_operators_exactly():
    """This CPU build registers CUDA's autocast kernels too: the same operators must have a rule on sim."""
    cuda = set(amp.autocast_registrations("AutocastCUDA")) - CUDA_ONLY_OPERATORS
    sim = set(amp.autocast_registrations("AutocastPrivateUse1"))
    assert len(cuda) > 100
    assert not cuda - sim and not sim - cuda, f"CUDA only: {sorted(cuda - sim)}; sim only: {sorted(sim - cuda)}"


def test_every_category_of_cudas_policy_is_present_on_sim():
    counts = {}
    for category in amp.cast_policy().values():
        counts[category] = counts.get(category, 0) + 1
    assert set(counts) == set(amp.CATEGORY_EXAMPLES.values()), counts
    assert counts["float32_set_opt_dtype"] == 11 and counts["float32_append_dtype"] == 2 and counts["refused"] == 1


@pytest.mark.parametrize("operator, arguments", [
    ("softmax", lambda x: torch.softmax(x, 0)), ("log_softmax", lambda x: torch.log_softmax(x, 0)),
    ("sum", lambda x: x.sum()), ("cumsum", lambda x: torch.cumsum(x, 0)), ("prod", lambda x: x.prod()),
    ("norm", lambda x: x.norm()), ("vector_norm", lambda x: torch.linalg.vector_norm(x)),
])
def test_reductions_run_in_float32_as_on_cuda(operator, arguments):
    x = torch.randn(6, device="sim").to(torch.float16)
    with torch.autocast("sim", dtype=torch.float16):
        assert arguments(x).dtype == torch.float32, operator


def test_promote_casts_mixed_inputs_to_the_widest():
    half, full = torch.ones(3, device="sim", dtype=torch.float16), torch.ones(3, device="sim")
    with torch.autocast("sim", dtype=torch.float16):
        assert torch.addcmul(full, half, half).dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_binary_cross_entropy_is_refused_under_autocast(dtype):
    probabilities, targets = torch.rand(4, device="sim"), torch.rand(4, device="sim")
    with torch.autocast("sim", dtype=dtype):
        with pytest.raises(RuntimeError, match="(?s)^torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss "
                                               "are unsafe to autocast.*binary_cross_entropy_with_logits"):
            torch.nn.functional.binary_cross_entropy(probabilities, targets)
        assert torch.nn.functional.binary_cross_entropy_with_logits(probabilities, targets).dtype == torch.float32
    assert torch.nn.functional.binary_cross_entropy(probabilities, targets).dtype == torch.float32


def _autocast_regions() -> dict[str, object]:
    """The default autocast dtype and two matrix products under autocast, without and with `dtype=`, with warnings."""
    a = torch.randn(4, 4, device="sim")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        seen = {"default": torch.get_autocast_dtype("sim")}
        with torch.autocast("sim"):
            seen["without dtype"] = (a @ a).dtype
        with torch.autocast("sim", dtype=torch.bfloat16):
            seen["with dtype"] = (a @ a).dtype
    seen["warnings"] = [str(warning.message).splitlines()[0] for warning in caught]
    return seen


def test_an_autocast_dtype_set_at_load_holds_only_in_the_thread_that_set_it(monkeypatch):
    """Step 9's page: a bfloat16-only device that sets bfloat16 when it loads changes that thread only. A new thread
    starts at PrivateUse1's float16, so autocast without a dtype warns and runs in float32 there; an explicit dtype
    works in both threads."""
    monkeypatch.setattr(torch.sim, "get_amp_supported_dtype", lambda: [torch.bfloat16])
    default_before = torch.get_autocast_dtype("sim")
    torch.set_autocast_dtype("sim", torch.bfloat16)
    try:
        in_the_loading_thread = _autocast_regions()
        with ThreadPoolExecutor(max_workers=1) as pool:
            in_a_new_thread = pool.submit(_autocast_regions).result()
    finally:
        torch.set_autocast_dtype("sim", default_before)
    assert in_the_loading_thread == {"default": torch.bfloat16, "without dtype": torch.bfloat16,
                                     "with dtype": torch.bfloat16, "warnings": []}
    assert in_a_new_thread == {
        "default": torch.float16, "without dtype": torch.float32, "with dtype": torch.bfloat16,
        "warnings": ["In sim autocast, but the target dtype is not supported. Disabling autocast."]}
