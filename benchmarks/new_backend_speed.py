"""A vendor's first minutes: `pu1-explorer new x`, `pip install --no-build-isolation ./x`, then the scorecard
with the quick OpInfo sweeps on the new device.

The install is timed twice: with the compiler cache off (CCACHE_DISABLE=1, what a vendor's first build
costs) and with it on after that build (what a rebuild of unchanged C++ costs). Each install goes into a
folder of its own (`--target`), so the venv's sim stays the only autoloaded backend. The targets are the
issue's: new + install within 180 s on 2 cores, the scorecard within 60 s.

Run: `make benchmark` (or `python benchmarks/new_backend_speed.py` in the project's virtualenv).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pu1_explorer.conformance import scorecard

DEVICE = "benchdev"
INSTALL_TARGET_SECONDS = 180.0
SCORECARD_TARGET_SECONDS = 60.0


def new_and_install(root: Path, *, cached: bool) -> float:
    """Seconds for `pu1-explorer new` and a pip install of the result into root/site."""
    source, site = root / "source", root / "site"
    shutil.rmtree(source, ignore_errors=True)
    shutil.rmtree(site, ignore_errors=True)
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
           "PATH": f"/usr/lib/ccache:{os.environ.get('PATH', '')}"}
    if not cached:
        env["CCACHE_DISABLE"] = "1"
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pu1_explorer", "new", DEVICE, "-o", str(source)], check=True, env=env)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps",
                    "--target", str(site), str(source)], check=True, env=env)
    return time.perf_counter() - started


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="new-backend-bench-") as folder:
        root = Path(folder)
        cold = new_and_install(root, cached=False)
        print(f"pu1-explorer new + pip install, compiler cache off: {cold:.1f} s "
              f"(target ≤ {INSTALL_TARGET_SECONDS:.0f} s: {'met' if cold <= INSTALL_TARGET_SECONDS else 'missed'})")
        if shutil.which("ccache"):
            new_and_install(root, cached=True)  # fills the cache
            warm = new_and_install(root, cached=True)
            print(f"pu1-explorer new + pip install, unchanged C++ from ccache: {warm:.1f} s")
        else:
            print("ccache is not installed: no cached-rebuild figure")
        # as the vendor's CI runs it: `import torch` loads the new backend through its entry point (sim steps aside)
        env = {"PYTHONPATH": str(root / "site"), "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"}
        started = time.perf_counter()
        card = scorecard(DEVICE, env=env, jobs=2, opinfo="quick")
        seconds = time.perf_counter() - started
        summary = card.summary()
        not_passed = [probe.name for probe in card.probes if probe.status != "passed"]
        print(f"scorecard of {DEVICE} ({len(card.probes)} probes, quick OpInfo sweeps, 2 jobs): {seconds:.1f} s, "
              f"{summary['passed']} passed{f' (not: {not_passed})' if not_passed else ''} "
              f"(target ≤ {SCORECARD_TARGET_SECONDS:.0f} s: {'met' if seconds <= SCORECARD_TARGET_SECONDS else 'missed'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
