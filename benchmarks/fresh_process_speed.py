"""A fresh process for a probe or a check: a new interpreter importing torch (and sim) against a child
forked from the explorer's template (`pu1_explorer.forkserver`), and a whole sim scorecard.

Run: `make benchmark` (or `python benchmarks/fresh_process_speed.py` in the project's virtualenv).
Figures are medians of several repeats, measured in this run.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

from timing import median_seconds
from pu1_explorer import forkserver
from pu1_explorer.scorecard import scorecard

PROGRAM = "import torch; torch.ones(2, device='sim')"


def main() -> int:
    env = dict(os.environ, SIM_FALLBACK="silent")
    forkserver.run(["-c", "pass"], env, timeout=120)  # the template starts once
    executed = median_seconds(lambda: subprocess.run([sys.executable, "-c", PROGRAM], env=env, check=True))
    forked = median_seconds(lambda: forkserver.run(["-c", PROGRAM], env, timeout=120))
    print(f"a fresh process that imports torch and makes a sim tensor: {executed:.3f} s as a new interpreter, "
          f"{forked:.3f} s forked from the template ({executed / forked:.1f}x)")
    started = time.perf_counter()
    card = scorecard("sim", jobs=2, opinfo="quick")
    print(f"sim's scorecard ({len(card.probes)} probes, quick OpInfo sweeps, 2 jobs): "
          f"{time.perf_counter() - started:.1f} s, {card.summary()['passed']} passed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
