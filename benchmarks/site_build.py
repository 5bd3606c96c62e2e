"""The docs site built from scratch: every notebook executed, with an empty notebook cache, a cold
inductor cache and an empty temporary folder (where inductor keeps its precompiled header), then
rendered by `mkdocs build --strict`.

"From scratch" starts after `make setup`, which compiles sim, the explorer's native tracer and
the toy backend (the scorecard page reuses that build). Prints the total and each notebook's
time, as the build logs them, the load average the build ran under and the CPU time the whole machine spent
during the build (all its processes, the forked Jupyter kernels included). Target: at most 60 s.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def machine_cpu_seconds() -> float:
    """CPU time spent so far by every process of the machine (user, nice, system, interrupts), from /proc/stat."""
    with open("/proc/stat") as stat:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, stat.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="pu1-site-build-") as folder:
        os.mkdir(os.path.join(folder, "tmp"))
        env = dict(os.environ, NO_MKDOCS_2_WARNING="1", DOCS_NOTEBOOK_CACHE=os.path.join(folder, "notebooks"),
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(folder, "inductor"), TMPDIR=os.path.join(folder, "tmp"))
        load_before = os.getloadavg()[0]
        cpu_before = machine_cpu_seconds()
        started = time.perf_counter()
        completed = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                                    os.path.join(folder, "site")], cwd=ROOT, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - started
        cpu_seconds = machine_cpu_seconds() - cpu_before
    if completed.returncode != 0:
        sys.exit(f"the site did not build: {completed.stderr.strip().splitlines()[-1]}")
    notebooks = re.findall(r"executed (\S+\.ipynb) in ([\d.]+) s", completed.stderr)
    for name, taken in sorted(notebooks, key=lambda found: -float(found[1])):
        print(f"  {name:34s} {float(taken):6.1f} s")
    ready = re.search(r"the notebooks were ready after ([\d.]+) s", completed.stderr)
    print(f"notebooks executed: {len(notebooks)}, {sum(float(t) for _, t in notebooks):.0f} s in all "
          f"on {os.environ.get('DOCS_WORKERS', '2')} workers, all ready after {float(ready[1]) if ready else 0:.1f} s")
    print(f"site built from scratch in {seconds:.1f} s (target: 60 s); load average before: {load_before:.2f}, "
          f"after: {os.getloadavg()[0]:.2f}, on {os.cpu_count()} cores")
    print(f"CPU time the machine spent meanwhile: {cpu_seconds:.0f} s (the 60 s target allows at most "
          f"{60 * (os.cpu_count() or 1)} s on {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
