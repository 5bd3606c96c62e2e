"""Installed like a vendor extension: the wheel holds the compiled core, `import torch` never compiles,
the import names cannot collide with a user's folders, and a damaged install says how to rebuild."""
from __future__ import annotations

import shutil
import zipfile

import pytest

from tests.conftest import run_python
from tests.environments import colliding_folder, fresh_environment, run_in

pytestmark = pytest.mark.xdist_group("wheel")  # one worker builds the wheel once

USE_SIM_AND_EXPLORER = (
    "import sys, torch\n"
    "x = torch.ones(1, device='sim:1')\n"
    "import pu1_explorer, pu1_explorer.widgets, torch_sim\n"
    "entry = pu1_explorer.dispatch_table('add.Tensor', ['sim'])[0]\n"
    "print(x.device, entry.key, 'torch.utils.cpp_extension' in sys.modules)\n"
    "print(torch_sim.__file__, pu1_explorer.__file__)\n"
)


def test_the_wheel_holds_both_compiled_parts_and_the_entry_points(project_wheel):
    with zipfile.ZipFile(project_wheel) as wheel:
        names = wheel.namelist()
        entry_points = next(wheel.read(name).decode() for name in names if name.endswith("entry_points.txt"))
    assert any(name.startswith("torch_sim/_C.") and name.endswith(".so") for name in names), names
    assert any(name.startswith("pu1_explorer/_native.") and name.endswith(".so") for name in names), names
    assert "torch_sim/csrc/operators.cpp" in names and "torch_sim/csrc/sim.h" in names and "pu1_explorer/trace_schema.json" in names
    assert "pu1_explorer/demand.json" in names  # next-kernels ranks by it
    # `pu1-explorer new` copies sim's driver and integration
    assert {"torch_sim/simdriver/include/simdriver.h", "torch_sim/simdriver/src/stream.cpp"} <= set(names)
    assert not any(name.startswith(("backend/", "explorer/")) for name in names)
    assert "sim = torch_sim.autoload:initialize" in entry_points
    assert "[torch_dynamo_backends]\nsim = torch_sim.compile:dynamo_backend" in entry_points
    assert "pu1-explorer = pu1_explorer.__main__:main" in entry_points


def test_import_torch_from_the_wheel_needs_no_compiler_and_ignores_the_users_folders(installed_wheel, tmp_path):
    python = fresh_environment(tmp_path, installed_wheel)
    folder = colliding_folder(tmp_path / "work")
    result = run_in(python, USE_SIM_AND_EXPLORER, cwd=folder, CXX="/nonexistent/c++", CC="/nonexistent/cc",
                    PATH="/nonexistent")
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = result.stdout.splitlines()
    assert first == "sim:1 PrivateUse1 False"  # nothing compiled, not even the compiler module loaded
    assert second.split() == [str(installed_wheel / "torch_sim" / "__init__.py"),
                              str(installed_wheel / "pu1_explorer" / "__init__.py")]
    assert result.stderr == ""


def test_the_editable_install_ignores_the_users_folders(tmp_path):
    result = run_python(USE_SIM_AND_EXPLORER, cwd=colliding_folder(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[0] == "sim:1 PrivateUse1 False"


def test_a_damaged_install_names_the_missing_file_and_how_to_rebuild(installed_wheel, tmp_path):
    damaged = tmp_path / "site"
    shutil.copytree(installed_wheel, damaged, symlinks=True)
    for library in (damaged / "torch_sim").glob("_C.*.so"):
        library.unlink()
    python = fresh_environment(tmp_path, damaged)
    result = run_in(python, "import torch")
    assert result.returncode != 0
    assert f"torch_sim: the compiled library {damaged / 'torch_sim' / '_C.<abi>.so'} is missing; rebuild it" \
        in result.stderr, result.stderr[-2000:]
    assert "Segmentation" not in result.stderr


def test_a_damaged_explorer_helper_is_named_too(installed_wheel, tmp_path):
    damaged = tmp_path / "site"
    shutil.copytree(installed_wheel, damaged, symlinks=True)
    for library in (damaged / "pu1_explorer").glob("_native.*.so"):
        library.write_bytes(b"not a shared library")
    python = fresh_environment(tmp_path, damaged)
    result = run_in(python, "import torch, pu1_explorer\nwith pu1_explorer.trace('sim'): torch.ones(2, device='sim') + 1")
    assert result.returncode != 0
    assert "pu1_explorer: the compiled helper pu1_explorer._native is missing or broken" in result.stderr
