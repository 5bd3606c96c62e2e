"""Builds toy (examples/toy), the second C++ PrivateUse1 backend, for tests that prove the explorer is not tied to sim.

`make setup` installs toy into build/toy-backend with pip; the tests reuse that folder while it is newer than
every source of toy, and rebuild it there (the same pip command) when it is not.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOY_SOURCE = ROOT / "examples" / "toy"
TOY_BUILD = ROOT / "build" / "toy-backend"


class ToyBuildError(RuntimeError):
    """toy's C++ did not compile or install."""


def first_error(output: str) -> str:
    """The most telling line of a failed build: the compiler's first error, else the last line of output."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for pattern in (r"\.(cpp|h):\d+:\d+: (fatal )?error:", r"\berror:"):
        for line in lines:
            if re.search(pattern, line) and not line.startswith(("FAILED:", "ninja: build stopped")):
                return line
    return lines[-1] if lines else "no output"


def toy_environment(target: Path) -> dict[str, str]:
    """The environment under which a fresh interpreter can `import torch_toy` from `target` (and sim stays unloaded)."""
    return {"PYTHONPATH": str(target), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}


def toy_library(target: Path) -> Path | None:
    """toy's compiled runtime inside `target`, or None when it is not installed there."""
    return next(iter(sorted((Path(target) / "torch_toy").glob("_C.*.so"))), None)


def newest_mtime(files: Iterable[Path]) -> float:
    """The modification time of the newest of `files`: a build older than it is stale."""
    return max(path.stat().st_mtime for path in files)


def _newest_source(source: Path) -> float:
    return newest_mtime(path for path in Path(source).rglob("*")
                        if path.is_file() and path.suffix in (".py", ".cpp", ".h", ".toml")
                        and path.relative_to(source).parts[0] not in ("build", "torch_toy.egg-info"))


def build_toy_backend(target: Path = TOY_BUILD, source: Path = TOY_SOURCE) -> dict[str, str]:
    """Install toy from `source` into `target` unless it is newer than every source file; return its environment."""
    library = toy_library(target)
    if library is None or library.stat().st_mtime < _newest_source(source):
        command = [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                   "--upgrade", "--target", str(target), str(source)]
        env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1200)
        if result.returncode != 0 or toy_library(target) is None:
            raise ToyBuildError(f"toy failed to build: {first_error(result.stdout + result.stderr)}")
    return toy_environment(target)
