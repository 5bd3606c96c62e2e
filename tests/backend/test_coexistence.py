"""Only one backend can own PrivateUse1: beside another autoloading backend, sim steps aside with one
warning, in either entry-point order, and the explorer works on the other backend."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.environments import fresh_environment, install_into, run_in

pytestmark = pytest.mark.xdist_group("wheel")

RIVAL_MODULE = textwrap.dedent('''
    """A second PrivateUse1 backend, "rival", that autoloads like a vendor's."""
    import torch
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend


    def empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
        return torch._C._acc.create_empty_tensor(size, dtype or torch.float32)


    def initialize():
        _setup_privateuseone_for_python_backend("rival")
        global library
        library = torch.library.Library("aten", "IMPL")
        library.impl("empty.memory_format", empty, "PrivateUse1")
''')

USE_THE_RIVAL = textwrap.dedent("""
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import torch
    import pu1_explorer
    x = torch.empty(3, device="rival")
    table = {entry.key: entry.kind for entry in pu1_explorer.dispatch_table("empty.memory_format", ["rival"])}
    summary = pu1_explorer.coverage("rival").summary()
    with pu1_explorer.trace("rival") as recorded:
        torch.empty(2, device="rival")
    print("owner", torch.device("privateuseone").type, hasattr(torch, "sim"), x.device)
    print("warnings", len(caught), type(caught[0].message).__name__ if caught else "-")
    print("explorer", table["PrivateUse1"], summary["operators"] > 3000, any(not hop.skipped for hop in recorded.hops))
    print("message", caught[0].message if caught else "-")
""")


@pytest.fixture(scope="module")
def rival(tmp_path_factory) -> Path:
    project = tmp_path_factory.mktemp("rival-project")
    (project / "rival_backend.py").write_text(RIVAL_MODULE)
    (project / "pyproject.toml").write_text(textwrap.dedent("""
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "rival-backend"
        version = "1.0"
        [project.entry-points."torch.backends"]
        rival = "rival_backend:initialize"
        [tool.setuptools]
        py-modules = ["rival_backend"]
    """))
    return install_into(tmp_path_factory.mktemp("rival") / "site", project)


@pytest.mark.parametrize("order", ["sim first", "rival first"])
def test_sim_steps_aside_with_one_warning_in_either_order(installed_wheel, rival, tmp_path, order):
    entries = (installed_wheel, rival) if order == "sim first" else (rival, installed_wheel)
    result = run_in(fresh_environment(tmp_path, *entries), USE_THE_RIVAL)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in result.stdout.strip().splitlines())
    assert lines["owner"] == "rival False rival:0"
    assert lines["warnings"] == "1 SimStepsAsideWarning"
    assert lines["explorer"] == "kernel True True"
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in lines["message"] and "SIM_AUTOLOAD=0" in lines["message"]
    expected = "another PrivateUse1 backend is installed (rival = rival_backend:initialize)" \
        if order == "sim first" else "PrivateUse1 already belongs to 'rival'"
    assert expected in lines["message"]


def test_sim_autoload_0_silences_sim(installed_wheel, rival, tmp_path):
    result = run_in(fresh_environment(tmp_path, installed_wheel, rival), USE_THE_RIVAL, SIM_AUTOLOAD="0")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "warnings 0 -" in result.stdout


def test_choosing_sim_beside_the_rival(installed_wheel, rival, tmp_path):
    code = "import torch, torch_sim\ntorch_sim.bring_up()\nprint(torch.ones(1, device='sim:1').device)"
    result = run_in(fresh_environment(tmp_path, rival, installed_wheel), code, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "sim:1"


def test_bringing_sim_up_after_the_rival_is_one_clear_error(installed_wheel, rival, tmp_path):
    code = "import torch, torch_sim\ntorch_sim.bring_up()"
    result = run_in(fresh_environment(tmp_path, rival, installed_wheel), code, SIM_AUTOLOAD="0")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "RuntimeError: sim: PrivateUse1 already belongs to 'rival' in this process, and only one backend can own "
        "it; to use sim, start a fresh Python with TORCH_DEVICE_BACKEND_AUTOLOAD=0 and call torch_sim.bring_up()")


def test_a_bad_sim_autoload_value_is_named(installed_wheel, tmp_path):
    result = run_in(fresh_environment(tmp_path, installed_wheel), "import torch", SIM_AUTOLOAD="maybe")
    assert result.returncode != 0
    assert "SIM_AUTOLOAD must be one of auto, 1, 0, got 'maybe'" in result.stderr
