"""A fresh process for a probe or a check: a new interpreter importing torch (and sim) against a child
forked from the explorer's template (`pu1_explorer.forkserver`), and a whole sim scorecard. Then a fresh
Jupyter kernel for a notebook, as the docs build starts one per page: launched as usual against forked
(`pu1_docs.forked_kernel`, the docs build's tooling).

Run: `make benchmark` (or `python benchmarks/fresh_process_speed.py` in the project's virtualenv).
Each pair is timed by the one method of timing.py (`interleaved`, one call per round: both warmed up, rounds
taking turns, the median of the round medians with their spread).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import nbformat
from nbclient import NotebookClient
from timing import interleaved
from pu1_explorer import forkserver
from pu1_explorer.conformance import scorecard

from pu1_docs.forked_kernel import KERNEL_NAME, ForkedKernelManager, local_sockets

PROGRAM = "import torch; torch.ones(2, device='sim')"
NOTEBOOK_CELL = "import torch\nfrom pu1_explorer.widgets import setup_notebook\nsetup_notebook()\ntorch.ones(2, device='sim')"


def execute_notebook(env: dict[str, str], forked: bool) -> None:
    """A one-cell notebook (the first cell of the site's pages) executed in a fresh kernel."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(NOTEBOOK_CELL)])
    options = {"kernel_name": KERNEL_NAME, "kernel_manager_class": ForkedKernelManager} if forked else \
        {"kernel_name": "python3"}
    with local_sockets() as config:  # as the docs build: local sockets, not TCP
        NotebookClient(notebook, timeout=120, config=config, **options).execute(env=env)


def main() -> int:
    env = dict(os.environ, SIM_FALLBACK="silent")
    forkserver.run(["-c", "pass"], env, timeout=120)  # the template starts once
    processes = interleaved({
        "executed": lambda: subprocess.run([sys.executable, "-c", PROGRAM], env=env, check=True),
        "forked": lambda: forkserver.run(["-c", PROGRAM], env, timeout=120)}, rounds=5, calls=1, warm_up_calls=1)
    executed, forked = processes["executed"], processes["forked"]
    print(f"a fresh process that imports torch and makes a sim tensor: {executed.median:.3f} s "
          f"({executed.low:.3f}-{executed.high:.3f}) as a new interpreter, {forked.median:.3f} s "
          f"({forked.low:.3f}-{forked.high:.3f}) forked from the template ({executed.ratio_to(forked):.1f}x)")
    started = time.perf_counter()
    card = scorecard("sim", jobs=2, opinfo="quick")
    print(f"sim's scorecard ({len(card.probes)} probes, quick OpInfo sweeps, 2 jobs): "
          f"{time.perf_counter() - started:.1f} s, {card.summary()['passed']} passed")
    execute_notebook(env, forked=True)  # the kernels' template starts once
    kernels = interleaved({"launched": lambda: execute_notebook(env, forked=False),
                           "forked": lambda: execute_notebook(env, forked=True)}, rounds=3, calls=1, warm_up_calls=0)
    launched, forked_kernel = kernels["launched"], kernels["forked"]
    print(f"a notebook whose cell imports torch and the widgets and makes a sim tensor, in a fresh kernel: "
          f"{launched.median:.3f} s ({launched.low:.3f}-{launched.high:.3f}) launched as usual, "
          f"{forked_kernel.median:.3f} s ({forked_kernel.low:.3f}-{forked_kernel.high:.3f}) forked "
          f"({launched.ratio_to(forked_kernel):.1f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
