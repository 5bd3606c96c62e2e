"""The notebooks: committed without outputs, and each one runs top to bottom in a fresh kernel, logging nothing."""
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
def test_notebook_runs_top_to_bottom(notebook):
    """Every cell runs without an error in a fresh kernel launched as JupyterLab launches one (not the docs
    build's forked kernels), within 300 s a cell. The client is the docs build's rechecking one: pyzmq's asyncio
    wait can miss a reply's arrival, and a stock client then waits out the cell's whole time limit."""
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient
    from pu1_docs.forked_kernel import RecheckingKernelClient

    manager = AsyncKernelManager(kernel_name="python3", client_factory=RecheckingKernelClient)
    executed = nbformat.read(notebook, as_version=4)
    NotebookClient(executed, km=manager, timeout=300, allow_errors=False,
                   resources={"metadata": {"path": str(notebook.parent)}}).execute()
    assert all(cell.get("execution_count") for cell in executed.cells if cell.cell_type == "code")
    from tests.notebooks.test_site import load_hook

    stderr = "".join(output.get("text", "") for cell in executed.cells if cell.cell_type == "code"
                     for output in cell.get("outputs", []) if output.get("name") == "stderr")
    assert load_hook("notebooks").log_lines(stderr) == []  # JupyterLab shows a cell's stderr as the site does
