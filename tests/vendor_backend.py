"""Builds the backend that `pu1-explorer new mydev` generates, for the tests that grade the vendor template.

The backend is generated and installed with pip (--target, through ccache when it is there) once per test
run into the run's temporary folder; a fresh interpreter imports it with that folder on PYTHONPATH.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from tests.environments import pip
from tests.toy_backend import first_error

DEVICE = "mydev"


class VendorBuildError(RuntimeError):
    """The generated backend did not compile or install."""


def vendor_library(target: Path) -> Path | None:
    """The generated backend's compiled library inside `target`, or None when it is not installed there."""
    return next(iter(sorted((Path(target) / f"torch_{DEVICE}").glob("_C.*.so"))), None)


def vendor_environment(target: Path) -> dict[str, str]:
    """The environment under which a fresh interpreter can `import torch_mydev` from `target` (sim stays unloaded)."""
    return {"PYTHONPATH": str(target), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}


def build_vendor_backend(root: Path) -> Path:
    """Generate the mydev backend into root/source and install it into root/site unless it is there; return site."""
    from pu1_explorer.new_backend import new_backend

    source, target = root / "source", root / "site"
    if vendor_library(target) is not None:
        return target
    shutil.rmtree(source, ignore_errors=True)
    new_backend(DEVICE, source)
    result = pip("install", "--no-build-isolation", "--no-deps", "--upgrade", "--target", str(target), str(source),
                 timeout=1800, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    if result.returncode != 0 or vendor_library(target) is None:
        raise VendorBuildError(f"the generated backend failed to build: {first_error(result.stdout + result.stderr)}")
    return target
