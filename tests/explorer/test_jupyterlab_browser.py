"""A real JupyterLab on 127.0.0.1, a real Chromium: run a notebook with the visualizer and the stepper, click through."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

import nbformat
import pytest

from tests.browser import browser_page, free_port

CELLS = [
    "import torch\nfrom explorer.widgets import DispatchVisualizer, GuideStepper, setup_notebook\nsetup_notebook()",
    "visualizer = DispatchVisualizer('torch.ones(3, device=device).relu()', compare_with=None)\nvisualizer",
    "stepper = GuideStepper(start='generator')\nstepper",
]


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory):
    from explorer.tracer import _native

    _native()  # compile the explorer's helper here, not inside the kernel under test
    root = tmp_path_factory.mktemp("lab")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in CELLS])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, root / "widgets.ipynb")
    port, token = free_port(), "explorer-test"
    environment = dict(os.environ, SIM_FALLBACK="silent", JUPYTER_CONFIG_DIR=str(root / "config"),
                       JUPYTERLAB_SETTINGS_DIR=str(root / "settings"), JUPYTERLAB_WORKSPACES_DIR=str(root / "ws"))
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--allow-root",
         "--LabApp.extension_manager=readonly", "--LabApp.news_url=", "--ServerApp.quit_button=False"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environment, cwd=root)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            break
        except OSError:
            if server.poll() is not None:
                pytest.fail("JupyterLab exited: " + server.stdout.read().decode(errors="replace")[-2000:])
            time.sleep(0.5)
    else:
        server.kill()
        pytest.fail("JupyterLab did not start within 120 s")
    yield f"{base}/lab/tree/widgets.ipynb?token={token}"
    server.terminate()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()


def run_all_cells(page, attempts: int = 4) -> None:
    """Run every cell from the Run menu, again if the kernel was not ready to take the request."""
    for _ in range(attempts):
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        try:
            page.wait_for_function(
                "() => [...document.querySelectorAll('.jp-InputPrompt')].some("
                "p => /\\[(\\*|\\d+)\\]/.test(p.innerText))", timeout=45_000)
            return
        except Exception:
            page.keyboard.press("Escape")
    pytest.fail("JupyterLab did not start running the cells")


def test_visualizer_and_stepper_work_live(jupyterlab):
    with browser_page() as (page, errors):
        page.goto(jupyterlab)
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
        run_all_cells(page)
        trace_button = page.locator(".jupyter-widgets button", has_text="Trace")
        try:
            trace_button.wait_for(timeout=240_000)
        except Exception:
            page.screenshot(path=os.environ.get("EXPLORER_SCREENSHOT", "/tmp/jupyterlab-widgets.png"))
            raise
        page.wait_for_selector(".widget-output .js-plotly-plot", timeout=60_000)
        assert "hops on sim" in page.locator(".widget-html", has_text="hops on").first.inner_text()

        code = page.locator(".jupyter-widgets textarea").first
        code.fill("torch.special.erfcx(torch.ones(2, device=device))")
        trace_button.click()
        page.wait_for_function(
            "() => [...document.querySelectorAll('.widget-html')].some(e => e.innerText.includes('hops on sim'))"
            " && document.querySelector('.widget-output .js-plotly-plot')", timeout=60_000)
        page.wait_for_timeout(1500)
        plot_text = page.locator(".widget-output .js-plotly-plot").first.inner_text()
        assert "fallback" in plot_text  # the legend names the fallback kind now

        page.locator(".jupyter-widgets button", has_text="Run the check").click()
        page.wait_for_function("() => document.body.innerText.includes('after the step')", timeout=120_000)
        body = page.inner_text("body")
        assert "fails" in body and "works" in body and "not installed" in body
        page.locator(".jupyter-widgets button", has_text="Next").click()
        page.wait_for_function("() => document.body.innerText.includes('Step 8')", timeout=30_000)
        page.screenshot(path=os.environ.get("EXPLORER_SCREENSHOT", "/tmp/jupyterlab-widgets.png"), full_page=False)
    relevant = [error for error in errors if "favicon" not in error and "net::" not in error]
    assert relevant == [], relevant
