"""The docs site built from scratch: every notebook executed, with an empty notebook cache and a cold
inductor cache, then rendered by `mkdocs build --strict`.

"From scratch" starts after `make setup`, which compiles sim, the explorer's native tracer and
the toy backend (the scorecard page reuses that build). Prints the total and each notebook's
time, as the build logs them, and the load average the build ran under. Target: at most 60 s.
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


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="pu1-site-build-") as folder:
        env = dict(os.environ, NO_MKDOCS_2_WARNING="1", DOCS_NOTEBOOK_CACHE=os.path.join(folder, "notebooks"),
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(folder, "inductor"))
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        completed = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                                    os.path.join(folder, "site")], cwd=ROOT, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - started
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


if __name__ == "__main__":
    main()
