"""Step 5: the fallback policy (warn once, silent, error) and its per-operator counters."""
import warnings

import pytest
import torch

from tests.conftest import run_forked, run_python

FALLBACK_OPERATOR = "aten::special_erfcx.out"  # the functional form is composite over .out


def erfcx_on_sim():
    return torch.special.erfcx(torch.ones(3, device="sim"))


def test_counters_count_fallback_calls_by_operator():
    torch.sim.reset_fallback_counts()
    for _ in range(3):
        erfcx_on_sim()
    counts = torch.sim.fallback_counts()
    assert counts[FALLBACK_OPERATOR] == 3
    torch.sim.reset_fallback_counts()
    assert torch.sim.fallback_counts() == {}


def test_native_kernels_do_not_count_as_fallback():
    torch.sim.reset_fallback_counts()
    x = torch.ones(3, device="sim")
    (x * 2 + x).relu().sum()
    assert torch.sim.fallback_counts() == {}


def test_warn_policy_warns_once_per_operator_and_names_it():
    torch.sim.set_fallback_policy("warn")
    torch.sim.reset_fallback_counts()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        erfcx_on_sim()
        erfcx_on_sim()
    messages = [str(w.message) for w in caught if FALLBACK_OPERATOR in str(w.message)]
    assert len(messages) == 1
    assert "falls back" in messages[0] and "SIM_FALLBACK" in messages[0]


def test_silent_policy_does_not_warn():
    torch.sim.set_fallback_policy("silent")
    torch.sim.reset_fallback_counts()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        erfcx_on_sim()
    assert not [w for w in caught if "falls back" in str(w.message)]
    assert torch.sim.fallback_counts()[FALLBACK_OPERATOR] == 1


def test_error_policy_names_the_operator_and_the_variable():
    torch.sim.set_fallback_policy("error")
    with pytest.raises(NotImplementedError, match=r"aten::special_erfcx.out.*SIM_FALLBACK=error"):
        erfcx_on_sim()
    torch.sim.set_fallback_policy("silent")
    assert erfcx_on_sim().shape == (3,)


def test_observer_sees_every_fallback_call():
    seen = []
    torch.sim.set_fallback_observer(seen.append)
    try:
        erfcx_on_sim()
    finally:
        torch.sim.set_fallback_observer(None)
    erfcx_on_sim()
    assert seen == [FALLBACK_OPERATOR]


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="fallback policy must be one of warn, silent, error"):
        torch.sim.set_fallback_policy("loud")


def test_policy_from_the_environment():
    result = run_forked(["-c", "import torch; torch.special.erfcx(torch.ones(2, device='sim'))"], SIM_FALLBACK="error")
    assert result.returncode != 0
    assert "NotImplementedError" in result.stderr and "SIM_FALLBACK=error" in result.stderr


def test_bad_policy_in_the_environment_is_a_clear_error():
    result = run_python("import torch", SIM_FALLBACK="sometimes")
    assert result.returncode != 0
    assert "SIM_FALLBACK must be one of warn, silent, error, got 'sometimes'" in result.stderr


def test_an_operator_without_any_kernel_is_a_clear_error():
    with pytest.raises(NotImplementedError, match="no sim kernel and no host kernel"):
        torch.ops.aten._cudnn_rnn_flatten_weight(
            [torch.ones(2, device="sim")], 1, 2, 2, 2, 0, 1, False, False)
