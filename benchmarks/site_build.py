"""The docs site built from scratch, then rebuilt after one notebook changed.

From scratch: every notebook executed, with an empty notebook cache (executed notebooks and rendered pages), a cold
inductor cache and an empty temporary folder (where inductor keeps its precompiled header), then rendered by
`mkdocs build --strict`. "From scratch" starts after `make setup`, which compiles sim, the explorer's native tracer
and the toy backend (the scorecard page reuses that build). The rebuild then adds a markdown cell to one notebook
(restored afterwards) and builds again with the same caches: that notebook runs again, the others are reused.

Prints each build's total, each executed notebook's time as the build logs it, the load average and the CPU time the
whole machine spent meanwhile (all its processes, the forked Jupyter kernels included).
Targets on 2 cores: at most 90 s from scratch, at most 20 s for the rebuild.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHANGED = ROOT / "notebooks" / "02_dispatcher.ipynb"  # the notebook the rebuild changes
TARGETS = {"from scratch": 90.0, "after one notebook changed": 20.0}


def machine_cpu_seconds() -> float:
    """CPU time spent so far by every process of the machine (user, nice, system, interrupts), from /proc/stat."""
    with open("/proc/stat") as stat:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, stat.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def build(what: str, env: dict[str, str], site: str) -> None:
    """One strict build into `site`; prints what it took against its target, or exits with the build's error."""
    load_before, cpu_before, started = os.getloadavg()[0], machine_cpu_seconds(), time.perf_counter()
    completed = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", site], cwd=ROOT,
                               env=env, capture_output=True, text=True)
    seconds, cpu_seconds = time.perf_counter() - started, machine_cpu_seconds() - cpu_before
    if completed.returncode != 0:
        error = completed.stderr[completed.stderr.rfind("Error"):].strip() or completed.stderr.strip()[-2000:]
        sys.exit(f"the site did not build ({what}): {error}")
    notebooks = re.findall(r"executed (\S+\.ipynb) in ([\d.]+) s", completed.stderr)
    reused = len(re.findall(r"reused the earlier run of", completed.stderr))
    print(f"{what}:")
    for name, taken in sorted(notebooks, key=lambda found: -float(found[1])):
        print(f"  {name:34s} {float(taken):6.1f} s")
    ready = re.search(r"the notebooks were ready after ([\d.]+) s", completed.stderr)
    print(f"  notebooks executed: {len(notebooks)} ({sum(float(t) for _, t in notebooks):.0f} s in all on "
          f"{os.environ.get('DOCS_WORKERS', '2')} workers), reused: {reused}; all ready after "
          f"{float(ready[1]) if ready else 0:.1f} s")
    print(f"  site built {what} in {seconds:.1f} s (target: {TARGETS[what]:.0f} s); load average before: "
          f"{load_before:.2f}, after: {os.getloadavg()[0]:.2f}, on {os.cpu_count()} cores; CPU time the machine "
          f"spent meanwhile: {cpu_seconds:.0f} s")


def main() -> None:
    """Build from scratch, change one notebook, build again; the notebook is restored whatever happens."""
    original = CHANGED.read_bytes()
    notebook = json.loads(original)
    cell = {"cell_type": "markdown", "metadata": {}, "source": ["A change for the benchmark."]}
    if (notebook["nbformat"], notebook["nbformat_minor"]) >= (4, 5):
        cell["id"] = "benchmark-change"  # cells have ids since format 4.5
    notebook["cells"].append(cell)
    changed = (json.dumps(notebook, indent=1, ensure_ascii=False) + "\n").encode()
    with tempfile.TemporaryDirectory(prefix="pu1-site-build-") as folder:
        os.mkdir(os.path.join(folder, "tmp"))
        env = dict(os.environ, NO_MKDOCS_2_WARNING="1", DOCS_NOTEBOOK_CACHE=os.path.join(folder, "notebooks"),
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(folder, "inductor"), TMPDIR=os.path.join(folder, "tmp"))
        site = os.path.join(folder, "site")
        build("from scratch", env, site)
        CHANGED.write_bytes(changed)
        try:
            build("after one notebook changed", env, site)
        finally:
            if CHANGED.read_bytes() == changed:  # unless someone edited it meanwhile
                CHANGED.write_bytes(original)


if __name__ == "__main__":
    main()
