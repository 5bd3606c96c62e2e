"""Every public function of torch.accelerator on sim, each in a fresh process after sim tensors exist (forked from a
template that has imported torch: tests.conftest.run_forked): it answers consistently with torch.sim's counterpart
or raises PyTorch's own error; a crash of the process is a failure.

The scenarios live in accelerator_calls.py; this module runs each one and checks that no public name of
torch.accelerator is left without a scenario. PyTorch's wording, compared with what PyTorch itself says, is checked
at the end (device index, autocast).
"""
from __future__ import annotations

import inspect
import re
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from tests.backend.accelerator_calls import OUT_OF_RANGE, SCENARIOS
from tests.conftest import run_forked

ROOT = Path(__file__).resolve().parents[2]


def public_names() -> set[str]:
    """The public functions and classes of torch.accelerator in this torch: __all__ plus whatever else it defines."""
    defined_here = {name for name, value in vars(torch.accelerator).items()
                    if not name.startswith("_") and (inspect.isfunction(value) or inspect.isclass(value))
                    and getattr(value, "__module__", "").startswith("torch.accelerator")}
    return set(torch.accelerator.__all__) | defined_here


def run_scenario(name: str, *module: str, environment: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run one scenario of accelerator_calls.py in a fresh process (importing `module` first when given)."""
    return run_forked(["-m", "tests.backend.accelerator_calls", name, *module], timeout=300, cwd=ROOT,
                      **(environment or {}))


def assert_passed(result: subprocess.CompletedProcess) -> None:
    """The scenario printed "ok" and exited normally; a signal (a crash) is named as such."""
    if result.returncode < 0:
        pytest.fail(f"the process crashed with {signal.Signals(-result.returncode).name}:\n{result.stderr[-3000:]}")
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


def test_every_public_name_of_torch_accelerator_has_a_scenario():
    missing = public_names() - set(SCENARIOS)
    assert not missing, f"torch.accelerator has new public names without a scenario in accelerator_calls.py: {missing}"
    assert set(SCENARIOS) <= public_names(), "a scenario is named after something torch.accelerator does not have"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_call_works_or_raises_pytorchs_error(name):
    assert_passed(run_scenario(name))


def test_empty_host_cache_before_any_sim_tensor():
    """PyTorch skips the host allocator until the device is in use; the call must work on either side of that."""
    program = "import torch; torch.accelerator.empty_host_cache(); torch.ones(1, device='sim'); " \
              "torch.accelerator.empty_host_cache(); print('ok')"
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert_passed(result)


@pytest.mark.parametrize("step", ["device_module", "hooks"])
def test_empty_host_cache_in_a_partial_bring_up(step):
    """Before the hooks step sim cannot start (as CUDA without a driver), so the device is never counted as started
    without the host allocator that empty_host_cache() calls."""
    assert_passed(run_scenario("empty_host_cache_after_failed_starts", environment={"SIM_BRINGUP_STEP": step}))


def test_host_memory_stats_follow_pinned_blocks():
    torch.ones(1, device="sim")  # torch.accelerator.empty_host_cache() reaches the allocator once sim is in use
    torch.sim.reset_accumulated_host_memory_stats()
    torch.accelerator.empty_host_cache()
    base = torch.sim.host_memory_stats()
    pinned = torch.ones(1000).pin_memory()  # 4000 bytes: a 4096-byte block
    during = torch.sim.host_memory_stats()
    assert during["active_requests.current"] == base["active_requests.current"] + 1
    assert during["active_bytes.current"] == base["active_bytes.current"] + 4096
    assert during["num_host_alloc"] == base["num_host_alloc"] + 1
    del pinned
    again = torch.zeros(1024).pin_memory()  # the same block size: the cached block is handed out again
    assert torch.sim.host_memory_stats()["num_host_alloc"] == during["num_host_alloc"]
    assert again.is_pinned() and again.sum().item() == 0
    del again
    torch.accelerator.empty_host_cache()
    after = torch.sim.host_memory_stats()
    assert after["allocated_bytes.current"] == base["allocated_bytes.current"]
    assert after["num_host_free"] == base["num_host_free"] + 1
    torch.sim.reset_peak_host_memory_stats()
    assert torch.sim.host_memory_stats()["active_bytes.peak"] == after["active_bytes.current"]


# ---------------------------------------------------------------- PyTorch's wording first


def pytorchs_out_of_range_sentence() -> str:
    """The sentence PyTorch's own device code uses for a bad index (XPU's, in the headers this wheel ships), up to
    the device count: "The device index is out of range. It must be in [0, "."""
    header = Path(torch.__file__).parent / "include" / "c10" / "xpu" / "XPUFunctions.h"
    assert header.is_file(), f"{header} is missing: this torch ships no XPU header to read PyTorch's wording from"
    found = re.search(r'"(' + re.escape(OUT_OF_RANGE) + r'[^"]*)"', header.read_text())
    assert found, f"PyTorch changed its wording for an invalid device index: no sentence in {header} starts with " \
                  f"{OUT_OF_RANGE!r}"
    return found.group(1)


@pytest.mark.parametrize("call", [
    lambda: torch.ones(1, device="sim:9"),
    lambda: torch.sim.set_device(9),
    lambda: torch.accelerator.set_device_index(9),
    lambda: torch.accelerator.memory_allocated(9),
    lambda: torch.sim.memory_allocated(9),
    lambda: torch.accelerator.get_device_capability("sim:9"),
], ids=["tensor", "sim.set_device", "set_device_index", "memory_allocated", "sim.memory_allocated", "capability"])
def test_an_invalid_device_index_starts_with_pytorchs_sentence_then_sims_advice(call):
    with pytest.raises(RuntimeError) as raised:
        call()
    message = str(raised.value)
    assert message.startswith(pytorchs_out_of_range_sentence() + "2), but got 9."), message
    assert "sim:9 does not exist: this process has 2 sim device(s)" in message and "SIM_DEVICE_COUNT" in message


def pytorchs_binary_cross_entropy_refusal(probabilities: torch.Tensor, targets: torch.Tensor) -> str:
    """What PyTorch's own autocast kernel for CUDA says about binary_cross_entropy (it needs no CUDA to refuse)."""
    kernel = torch.library.get_kernel("aten::binary_cross_entropy", "AutocastCUDA")
    with pytest.raises(RuntimeError) as raised:
        kernel.call_boxed(torch.DispatchKeySet(torch.DispatchKey.AutocastCUDA), probabilities, targets)
    return str(raised.value)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_binary_cross_entropy_under_autocast_raises_pytorchs_message_first(dtype):
    probabilities, targets = torch.rand(8), torch.rand(8)
    expected = pytorchs_binary_cross_entropy_refusal(probabilities, targets)
    assert "unsafe to autocast" in expected
    with torch.autocast("sim", dtype=dtype), pytest.raises(RuntimeError) as raised:
        torch.nn.functional.binary_cross_entropy(probabilities.to("sim"), targets.to("sim"))
    message = str(raised.value)
    assert message.startswith(expected), message
    assert "sim refuses it under autocast as CUDA does" in message[len(expected):]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32])
def test_an_unsupported_autocast_dtype_warns_and_disables_as_on_the_cpu(dtype):
    x = torch.randn(4, 4)
    messages = {}
    for device in ("cpu", "sim"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch.autocast(device, dtype=dtype):
                assert not torch.is_autocast_enabled(device)
                assert (x.to(device) @ x.to(device)).dtype == torch.float32
        messages[device] = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    cpu_first_line = messages["cpu"][0].splitlines()[0]
    assert [m.splitlines()[0] for m in messages["sim"]] == [cpu_first_line.replace("CPU", "sim")]
    assert "sim Autocast only supports dtypes of torch.float16, torch.bfloat16 currently." in messages["sim"][0]
