"""Staged bring-up: each step's check fails before the step and works after it, in a fresh process."""
import pytest

import torch_sim
from torch_sim import STEPS, bringup_checks
from tests.conftest import run_python


@pytest.mark.parametrize("step", STEPS)
def test_check_fails_before_and_works_after(step):
    before = bringup_checks.run_check(step, bringup_checks.step_before(step))
    after = bringup_checks.run_check(step, step)
    assert not before.succeeded, f"{step}: the check already worked before the step: {before.output}"
    assert before.error, f"{step}: no error message before the step"
    assert after.succeeded, f"{step}: the check failed after the step: {after.error}"


def test_bring_up_to_a_step_installs_exactly_the_steps_before_it():
    result = run_python("import torch_sim; print(','.join(torch_sim.bring_up('allocator')))",
                        TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "device_module,hooks,guard,allocator"


def test_step_from_the_environment_with_autoload():
    result = run_python("import torch, torch_sim; print(torch_sim.installed_steps()[-1])", SIM_BRINGUP_STEP="guard")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "guard"


def test_unknown_step_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown bring-up step 'kernels'; the steps are: device_module, hooks"):
        torch_sim.bring_up("kernels")


def test_a_feature_of_a_missing_step_names_the_step():
    result = run_python("import torch_sim; torch_sim.bring_up('hooks'); import torch; torch.sim.current_device()",
                        TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert result.returncode != 0
    assert "the 'guard' step of the bring-up is not installed" in result.stderr


def test_a_crash_is_reported_as_a_crash():
    assert "SIGSEGV" in bringup_checks.error_summary("", -11)
