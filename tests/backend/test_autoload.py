"""Step 11: `import torch` loads sim through the torch.backends entry point, unless turned off."""
from importlib.metadata import entry_points

from tests.conftest import run_python
from torch_sim import STEPS


def test_entry_point_is_declared():
    names = {entry.name: entry.value for entry in entry_points(group="torch.backends")}
    assert names.get("sim") == "torch_sim.autoload:initialize"


def test_import_torch_alone_brings_sim_up():
    result = run_python("import sys, torch; print(torch.ones(2, device='sim:1')); print('torch_sim' in sys.modules)")
    assert result.returncode == 0, result.stderr
    assert "tensor([1., 1.], device='sim:1')" in result.stdout
    assert result.stdout.split()[-1] == "True"


def test_autoload_can_be_turned_off():
    result = run_python("import torch; print(hasattr(torch, 'sim'))", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_importing_backend_first_is_harmless():
    result = run_python("import torch_sim, torch; torch_sim.bring_up(); print(torch_sim.installed_steps()[-1])")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == STEPS[-1]


def test_importing_any_step_module_first_works():
    for step in ("torch_sim.amp", "torch_sim.operators", "torch_sim.serialization"):
        result = run_python(f"import {step}, torch; print(torch.ones(1, device='sim').device)")
        assert result.returncode == 0, f"import {step} first: {result.stderr[-2000:]}"
        assert result.stdout.strip() == "sim:0"
