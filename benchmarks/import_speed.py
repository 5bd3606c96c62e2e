"""`import torch` with sim autoloaded versus plain, right after a fresh install of the wheel.

Builds the wheel (or takes one with --wheel), installs it into a fresh environment that
sees torch but not this checkout, then times `import torch` there: the first import after
the install, then the median of interleaved runs. Target: at most 0.1 s more than plain.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.environments import build_wheel, fresh_environment, install_into, project_sources  # noqa: E402

REPEATS = 15
AUTOLOAD_ONLY = """
import os, time
import torch
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "1"
started = time.perf_counter()
torch._import_device_backends()
print(time.perf_counter() - started)
"""


def import_seconds(python: Path, autoload: bool) -> float:
    environment = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "1" if autoload else "0", "SIM_FALLBACK": "silent",
                   "PATH": "/usr/bin:/bin"}
    started = time.perf_counter()
    subprocess.run([str(python), "-c", "import torch; torch.ones(1)"], check=True, env=environment)
    return time.perf_counter() - started


def autoload_seconds(python: Path) -> float:
    """What the autoload step costs by itself: torch's entry-point scan plus sim's bring-up, timed inside one process."""
    environment = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "SIM_FALLBACK": "silent", "PATH": "/usr/bin:/bin"}
    completed = subprocess.run([str(python), "-c", AUTOLOAD_ONLY], check=True, env=environment, capture_output=True,
                               text=True)
    return float(completed.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", type=Path, help="a wheel built earlier (default: build one now, ~3 min)")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        wheel = arguments.wheel or build_wheel(project_sources(root / "source"), root / "dist")
        python = fresh_environment(root, install_into(root / "site", wheel))
        first_plain = import_seconds(python, autoload=False)
        first_sim = import_seconds(python, autoload=True)
        plain, loaded, autoload = [], [], []
        for _ in range(REPEATS):
            plain.append(import_seconds(python, autoload=False))
            loaded.append(import_seconds(python, autoload=True))
            autoload.append(autoload_seconds(python))
    median_plain, median_sim = statistics.median(plain), statistics.median(loaded)
    print(f"first import after the install: {first_plain:.3f} s plain, {first_sim:.3f} s with sim "
          f"(+{first_sim - first_plain:.3f} s)")
    print(f"median of {REPEATS} interleaved runs: {median_plain:.3f} s plain, {median_sim:.3f} s with sim "
          f"(+{median_sim - median_plain:.3f} s; target <= +0.1 s)")
    print(f"the autoload step alone, timed inside the process (median of {REPEATS}): "
          f"{statistics.median(autoload):.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
