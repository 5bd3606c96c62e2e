"""The notebooks: committed without outputs, and each one runs top to bottom in a fresh kernel."""
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def test_there_is_a_notebook_per_guide_step_and_the_tutorials():
    from torch_sim import STEPS

    names = {path.name for path in NOTEBOOKS}
    for number, step in enumerate(STEPS, start=1):
        assert f"guide_{number:02d}_{step}.ipynb" in names
    assert {"01_quickstart.ipynb", "02_dispatcher.ipynb", "03_device_generic_tests.ipynb",
            "04_hunting_fallbacks.ipynb"} <= names


def test_notebooks_are_committed_without_outputs():
    result = subprocess.run([sys.executable, "-m", "nbstripout", "--verify", *map(str, NOTEBOOKS)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    for path in NOTEBOOKS:
        assert "widgets" not in nbformat.read(path, as_version=4).metadata


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.stem)
def test_notebook_runs_top_to_bottom(notebook, tmp_path):
    """nbmake executes the notebook in a fresh kernel with a time limit per cell."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbmake", "--nbmake-timeout=300",
         str(notebook)], capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:]
