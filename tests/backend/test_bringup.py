"""Staged bring-up: each step's record, and its check failing before the step and working after it."""
import ast
from pathlib import Path

import pytest

import torch_sim
from pu1_explorer.guide import error_summary, find_step, forked_check, run_check, step_before
from torch_sim.steps import GUIDE
from tests.conftest import run_python

BACKEND = Path(torch_sim.__file__).parent


# What the "before" of a check shows: PyTorch's own error, whole, or, where PyTorch raises nothing without
# the step, the check saying so.
BEFORE = {
    "streams_events": "Backend doesn't support create a new Stream.",
    "generator": "implement `getNewGenerator` at the same time for PrivateUse1",
    "amp": "the module must have these funcs:\n`get_amp_supported_dtype() -> List[torch.dtype]`.\n"
           "But the func `get_amp_supported_dtype` is missing.",
    "autograd": "PyTorch raises nothing here",
    "serialization": "PyTorch raises nothing here",
    "profiler": "torch.profiler raised nothing",
}


@pytest.mark.parametrize("step", torch_sim.STEPS)
def test_check_fails_before_and_works_after(step):
    """As the guide's page runs the check (forked_check: a fresh process forked from a template, or a new interpreter
    for a check of autoloading); tests/explorer/test_forkserver.py shows a forked check says what a new one says."""
    record = find_step(GUIDE, step)
    before = forked_check(record, step_before(GUIDE, step))
    after = forked_check(record, step)
    assert not before.succeeded, f"{step}: the check already worked before the step: {before.output}"
    assert before.error, f"{step}: no error message before the step"
    assert BEFORE.get(step, "") in before.summary, f"{step}: the page would show {before.summary!r}"
    assert after.succeeded, f"{step}: the check failed after the step: {after.error}"


def test_an_error_of_several_lines_is_shown_whole():
    stderr = "Traceback (most recent call last):\n  File \"check.py\", line 1\nAssertionError: first\nsecond line\n"
    assert error_summary(stderr, 1) == "AssertionError: first\nsecond line"


def test_the_records_number_the_steps_and_name_each_once():
    assert [step.number for step in GUIDE] == list(range(1, len(GUIDE) + 1)) and len(GUIDE) == 15
    assert torch_sim.STEPS == tuple(step.name for step in GUIDE) and len(set(torch_sim.STEPS)) == len(GUIDE)
    assert torch_sim.GUIDE is GUIDE


def test_every_step_has_its_module_and_check_and_the_cpp_files_are_the_steps():
    for step in GUIDE:
        assert step.module_path == BACKEND / f"{step.name}.py" and step.module_path.is_file()
        assert f"Step {step.number}, " in ast.get_docstring(ast.parse(step.module_path.read_text()))
        ast.parse(step.check_program.read_text())  # a program of its own, not text in a string
        assert step.title and step.explanation and not step.explanation.startswith("Step ")
        assert [source.path for source in step.sources] == [f"backend/torch_sim/{step.name}.py"] + [
            f"backend/torch_sim/csrc/{name}" for name in step.cpp]  # sim's code only
        assert not step.cpp or step.cpp[0] == f"{step.name}.cpp"  # the step's own file first
    assert {"device_module", "autograd", "autoload", "compile"} == {step.name for step in GUIDE if not step.cpp}


def test_every_scorecard_probe_grades_exactly_one_step():
    from pu1_explorer.conformance import PROBE_NAMES

    graded = [probe for step in GUIDE for probe in step.probes]
    assert sorted(graded) == sorted(PROBE_NAMES)
    assert find_step(GUIDE, "hooks").probes == ("torch.accelerator", "pinned memory")


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
    with pytest.raises(ValueError, match="unknown step 'kernels'; the steps are: device_module, hooks"):
        step_before(GUIDE, "kernels")


def test_a_feature_of_a_missing_step_names_the_step():
    result = run_python("import torch_sim; torch_sim.bring_up('hooks'); import torch; torch.sim.current_device()",
                        TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert result.returncode != 0
    assert "the 'guard' step of the bring-up is not installed" in result.stderr


def test_a_crash_is_reported_as_a_crash():
    assert "SIGSEGV" in error_summary("", -11)


def test_the_compile_check_after_a_full_bring_up_wrote_the_cache_still_works(tmp_path, monkeypatch):
    # The code inductor generates for sim refuses graph captures first once graphs (step 15) are installed; the
    # compile caches' key must tell the two apart, or a backend brought up to step 13 loads code that calls a
    # function it does not have.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    record = find_step(GUIDE, "compile")
    full = forked_check(record, torch_sim.STEPS[-1])
    assert full.succeeded, full.error
    assert any(tmp_path.rglob("*.py")), "the full bring-up cached no compiled code: the test proves nothing"
    partial = forked_check(record, "compile")
    assert partial.succeeded, partial.error
