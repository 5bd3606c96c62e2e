"""The notebooks: committed without outputs, and each one runs top to bottom in a fresh kernel, logging nothing."""
import re
import subprocess
import sys
import time
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


# Run in a kernel launched as JupyterLab launches one, which starts a fork-server template of its own for the guide's
# checks and must leave nothing behind when it is killed: the first notebook users open, and the page whose subject
# is what `import torch` does. The others run in kernels forked as the docs build forks them, all from one template.
LAUNCHED = ("01_quickstart", "guide_11_autoload")

# Lines a page must print, where a wrong answer would otherwise pass for output: a pattern a line, per notebook. Only
# answers that do not depend on timing (the value a race reads does).
PRINTED = {
    "guide_06_streams_events": [r"with wait_stream: 1024\.0$", r"^stream sanitizer on sim: 1 race\(s\) ",
                                r"^answer: 2048\.0\s*$", r"^stream sanitizer on sim: 0 race\(s\) "],
}


def printed_text(notebook: nbformat.NotebookNode) -> str:
    """What the notebook's code cells printed (their stream outputs), in order."""
    return "".join(output.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                   for output in cell.get("outputs", []) if output.get("output_type") == "stream")


@pytest.fixture(scope="module")
def forked_scratch(tmp_path_factory) -> Path:
    """One temporary folder for the forked kernels: the template they fork from is chosen by their environment."""
    return tmp_path_factory.mktemp("forked-kernels")


@pytest.mark.xdist_group("site")  # before the site's build, on its worker (tests/notebooks/test_site.py)
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.stem)
def test_notebook_runs_top_to_bottom(notebook, tmp_path, forked_scratch, monkeypatch):
    """Every cell runs without an error, within 300 s a cell, in a fresh kernel, in the docs build's environment: its
    widgets are built as in JupyterLab and display their static HTML. The kernel is forked as `make docs` forks it,
    or launched as JupyterLab launches one (LAUNCHED). The run shows no undeclared warning, no line a C++ library
    logged and nothing a page cannot show. It goes into the docs build's cache of executed notebooks, so the site
    that test_site.py builds on this worker renders these runs instead of executing every notebook again. The kernel
    leaves no temporary file behind."""
    from tests.notebooks.test_site import left_behind, load_hook, scratch_environment

    launched = notebook.stem in LAUNCHED
    scratch = tmp_path if launched else forked_scratch
    for name, value in scratch_environment(scratch).items():
        monkeypatch.setenv(name, value)
    hook = load_hook("notebooks")
    name, _, problems = hook.execute(notebook, launched_kernel=launched, reuse=False)
    assert problems == []
    # the kernel was killed after its last cell; the fork server that a launched kernel started looks for it every
    # second, then goes
    deadline = time.monotonic() + 30
    while left_behind(scratch) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left_behind(scratch) == []
    executed = nbformat.read(hook.EXECUTED / name, as_version=4)
    assert all(cell.get("execution_count") for cell in executed.cells if cell.cell_type == "code")
    assert hook.NOTEBOOKS.lookup(notebook) is not None
    printed = printed_text(executed)
    for pattern in PRINTED.get(notebook.stem, []):
        assert re.search(pattern, printed, re.MULTILINE), f"{notebook.stem} printed no line matching {pattern!r}"


def test_every_page_with_printed_answers_is_a_notebook():
    assert set(PRINTED) <= {path.stem for path in NOTEBOOKS}


def test_the_launched_notebooks_are_notebooks():
    assert set(LAUNCHED) <= {path.stem for path in NOTEBOOKS}
