"""A second C++ PrivateUse1 backend, "toy", built for tests that prove the explorer is not tied to sim."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Sequence

HERE = Path(__file__).resolve().parent
SOURCES = [HERE / "csrc" / "toy.cpp"]
EXTENSION = "torch_toy_C"

_BUILD = """
import sys
from torch.utils.cpp_extension import load
load(name={name!r}, sources={sources!r}, build_directory={build!r}, verbose=False, extra_cflags=["-O2"])
"""


class FixtureBuildError(RuntimeError):
    """The toy backend's C++ did not compile or load."""


def _first_error(output: str) -> str:
    """The most telling line of a failed build: the compiler's first error, else the last line of output."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if re.search(r"\berror\b", line) and ("toy.cpp" in line or "error:" in line):
            return line
    return lines[-1] if lines else "no output"


def fixture_environment(directory: Path) -> dict[str, str]:
    """The environment variables under which a fresh interpreter can `import torch_toy` from `directory`'s build."""
    build = Path(directory) / "build"
    path = os.pathsep.join([str(HERE), str(build)])
    return {"PYTHONPATH": path, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}


def build_fixture_backend(directory: Path, sources: Sequence[Path] = tuple(SOURCES)) -> dict[str, str]:
    """Compile the toy backend under `directory` (reusing an up-to-date build) and return the environment to use it."""
    build = Path(directory) / "build"
    build.mkdir(parents=True, exist_ok=True)
    library = build / f"{EXTENSION}.so"
    newest_source = max(Path(source).stat().st_mtime for source in sources)
    if not (library.exists() and library.stat().st_mtime >= newest_source):
        code = _BUILD.format(name=EXTENSION, sources=[str(source) for source in sources], build=str(build))
        env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=1200)
        if result.returncode != 0 or not library.exists():
            raise FixtureBuildError(f"the toy backend failed to build: {_first_error(result.stdout + result.stderr)}")
    return fixture_environment(directory)
