"""A real JupyterLab on 127.0.0.1, a real Chromium: run a notebook with the visualizer and the stepper, click through."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

import nbformat
import pytest

from tests.browser import browser_page

CELLS = [
    "import torch\nfrom pu1_explorer.widgets import DispatchVisualizer, GuideStepper, setup_notebook\nsetup_notebook()",
    "visualizer = DispatchVisualizer('torch.ones(3, device=device).relu()', compare_with=None)\nvisualizer",
    "import torch_sim\nstepper = GuideStepper(torch_sim.GUIDE, start='generator')\nstepper",
]


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in CELLS])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, root / "widgets.ipynb")
    notification_settings = root / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notification_settings.parent.mkdir(parents=True)
    notification_settings.write_text('{"fetchNews": "false", "checkForUpdates": false}')  # no news toast
    token = "explorer-test"
    environment = dict(os.environ, SIM_FALLBACK="silent", JUPYTER_CONFIG_DIR=str(root / "config"),
                       JUPYTERLAB_SETTINGS_DIR=str(root / "settings"), JUPYTERLAB_WORKSPACES_DIR=str(root / "ws"),
                       JUPYTER_RUNTIME_DIR=str(root / "runtime"))
    # port 0: the server takes a free port from the system and writes it into its runtime file
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", "--port=0", "--ServerApp.port_retries=0",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--allow-root",
         "--LabApp.extension_manager=readonly", "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=", "--ServerApp.quit_button=False"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environment, cwd=root)
    runtime_file = root / "runtime" / f"jpserver-{server.pid}.json"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            base = f"http://127.0.0.1:{json.loads(runtime_file.read_text())['port']}"
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            break
        except (OSError, ValueError, KeyError):  # no runtime file yet, a file being written, or not serving yet
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


SCREENSHOT = os.environ.get("EXPLORER_SCREENSHOT", "/tmp/jupyterlab-widgets.png")


def fail_with_screen(page, what: str) -> None:
    """Fail naming what was expected, any dialog on screen (its text), and a screenshot of the page."""
    dialogs = page.locator(".jp-Dialog")
    shown = " | ".join(dialogs.nth(index).inner_text().replace("\n", " ") for index in range(dialogs.count()))
    page.screenshot(path=SCREENSHOT)
    pytest.fail(f"{what}; dialog on screen: {shown or 'none'}; screenshot: {SCREENSHOT}")


def wait_for(page, what: str, script: str, timeout_ms: int) -> None:
    """Wait for a condition of the page; a dialog on screen or a timeout fails at once with what is there."""
    try:
        page.wait_for_function(f"() => document.querySelector('.jp-Dialog') || ({script})", timeout=timeout_ms)
    except Exception:
        fail_with_screen(page, f"timed out waiting for {what}")
    if page.locator(".jp-Dialog").count():
        fail_with_screen(page, f"a dialog appeared while waiting for {what}")


def run_all_cells(page) -> None:
    """Run every cell through JupyterLab's command registry once the kernel is ready: no menu a dialog can cover."""
    wait_for(page, "the notebook to open", "window.jupyterapp && window.jupyterapp.shell.currentWidget"
             " && window.jupyterapp.shell.currentWidget.sessionContext", 120_000)
    page.evaluate("""async () => {
        const notebook = window.jupyterapp.shell.currentWidget;
        await notebook.context.ready;
        await notebook.sessionContext.ready;
        await window.jupyterapp.commands.execute('notebook:run-all-cells');
    }""")


def click_widget_button(page, label: str) -> None:
    if page.locator(".jp-Dialog").count():
        fail_with_screen(page, f"a dialog covers the {label!r} button")
    page.locator(".jupyter-widgets button", has_text=label).first.click(timeout=30_000)


def test_visualizer_and_stepper_work_live(jupyterlab):
    with browser_page() as (page, errors):
        page.goto(jupyterlab)
        run_all_cells(page)
        wait_for(page, "the visualizer's Trace button", "[...document.querySelectorAll('.jupyter-widgets button')]"
                 ".some(b => b.innerText.includes('Trace'))", 240_000)
        wait_for(page, "the first trace figure", "document.querySelector('.widget-output .js-plotly-plot')", 60_000)
        assert "hops on sim" in page.locator(".widget-html", has_text="hops on").first.inner_text()

        page.locator(".jupyter-widgets textarea").first.fill("torch.special.erfcx(torch.ones(2, device=device))")
        click_widget_button(page, "Trace")
        wait_for(page, "the second trace", "[...document.querySelectorAll('.js-plotly-plot')]"
                 ".some(p => p.innerText.includes('fallback'))", 60_000)
        plot_text = page.locator(".widget-output .js-plotly-plot").first.inner_text()
        assert "fallback" in plot_text  # the legend names the fallback kind now

        click_widget_button(page, "Run the check")
        wait_for(page, "the step's check", "document.body.innerText.includes('after the step')", 120_000)
        body = page.inner_text("body")
        # before the step, PyTorch's own error for hooks that do not implement getNewGenerator
        assert "fails" in body and "works" in body and "getNewGenerator" in body, body[-3000:]
        click_widget_button(page, "Next")
        wait_for(page, "step 8", "document.body.innerText.includes('Step 8')", 30_000)
        page.screenshot(path=SCREENSHOT, full_page=False)
    relevant = [error for error in errors if "favicon" not in error and "net::" not in error]
    assert relevant == [], relevant
