"""Compiles C++ extension modules once, caches them, and loads them fast afterwards.

Used for the sim runtime core (`load_runtime()`) and for the explorer's small
native helpers (`load_extension()`).

The cache key is the source text, the torch version and the Python ABI, so a
changed source or a new torch rebuilds; an unchanged one loads the shared
library directly without touching the compiler.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

SOURCE = Path(__file__).parent / "csrc" / "sim_runtime.cpp"
MODULE_NAME = "sim_runtime"


class RuntimeBuildError(RuntimeError):
    """The C++ runtime core could not be compiled."""


def cache_directory() -> Path:
    """Where the compiled core lives: $SIM_BUILD_DIR, else ~/.cache/sim-backend."""
    configured = os.environ.get("SIM_BUILD_DIR")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sim-backend"


def _build_key(source: Path) -> str:
    import torch

    digest = hashlib.sha256(source.read_bytes())
    digest.update(torch.__version__.encode())
    digest.update(sys.version.encode())
    return digest.hexdigest()[:16]


def library_path(name: str = MODULE_NAME, source: Path = SOURCE) -> Path:
    return cache_directory() / _build_key(source) / f"{name}.so"


def _import_library(name: str, path: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, str(path), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _compile(name: str, source: Path, build_directory: Path) -> None:
    from torch.utils import cpp_extension

    build_directory.mkdir(parents=True, exist_ok=True)
    print(
        f"compiling the C++ module {name} into {build_directory} (up to a minute, once)...",
        file=sys.stderr,
        flush=True,
    )
    log = build_directory / "build.log"
    try:
        with open(log, "w") as log_file:
            saved_out, saved_err = os.dup(1), os.dup(2)
            os.dup2(log_file.fileno(), 1)
            os.dup2(log_file.fileno(), 2)
            try:
                cpp_extension.load(
                    name=name,
                    sources=[str(source)],
                    extra_cflags=["-O2"],
                    build_directory=str(build_directory),
                    verbose=True,
                )
            finally:
                os.dup2(saved_out, 1)
                os.dup2(saved_err, 2)
                os.close(saved_out)
                os.close(saved_err)
    except Exception as error:
        raise RuntimeBuildError(
            f"the C++ module {name} did not compile ({type(error).__name__}); "
            f"the compiler log is {log}"
        ) from None


def load_extension(name: str, source: Path) -> ModuleType:
    """Return the compiled module built from `source`, compiling it first if it is not cached."""
    if name in sys.modules:
        return sys.modules[name]
    path = library_path(name, source)
    if not path.exists():
        _compile(name, source, path.parent)
    module = _import_library(name, path)
    sys.modules[name] = module
    return module


def load_runtime() -> ModuleType:
    """Return the sim runtime core, compiling it first if it is not cached."""
    return load_extension(MODULE_NAME, SOURCE)
