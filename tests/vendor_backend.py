"""Builds the backend that `pu1-explorer new mydev` generates, for the tests that grade the vendor template.

`make setup` generates it into build/mydev-source and installs it with pip into build/mydev-backend; the tests
reuse that build while it is newer than every file of the template (and the code that renders it). Otherwise
the backend is generated and installed (pip --target, through ccache when it is there) once per test run into the
run's temporary folder, the same two folders side by side. A fresh interpreter finds it with the installed
folder on PYTHONPATH, and `import torch` loads it (sim's own autoload is off).
"""
from __future__ import annotations

import shutil
from pathlib import Path

from tests.environments import pip
from tests.toy_backend import first_error, newest_mtime

DEVICE = "mydev"
ROOT = Path(__file__).resolve().parents[1]
SETUP_BUILD = ROOT / "build" / f"{DEVICE}-backend"  # where `make setup` installs it
# what the generated backend is made of: sim's driver and package, and the template's own files
TEMPLATE_INPUTS = (ROOT / "backend" / "simdriver", ROOT / "backend" / "torch_sim",
                   ROOT / "explorer" / "pu1_explorer" / "vendor_template",
                   ROOT / "explorer" / "pu1_explorer" / "new_backend.py")


class VendorBuildError(RuntimeError):
    """The generated backend did not compile or install."""


def vendor_library(target: Path) -> Path | None:
    """The generated backend's compiled library inside `target`, or None when it is not installed there."""
    return next(iter(sorted((Path(target) / f"torch_{DEVICE}").glob("_C.*.so"))), None)


def vendor_source(target: Path) -> Path:
    """The generated project (its sources and its own tests) that was installed into `target`: the folder beside it."""
    return Path(target).parent / f"{DEVICE}-source"


def vendor_environment(target: Path) -> dict[str, str]:
    """The environment under which `import torch` in a fresh interpreter loads mydev from `target` (sim, installed
    too, stays unloaded)."""
    return {"PYTHONPATH": str(target), "TORCH_DEVICE_BACKEND_AUTOLOAD": "1", "SIM_AUTOLOAD": "0"}


def newest_template_file() -> float:
    """The modification time of the newest file the generated backend is made from."""
    files = (path for folder in TEMPLATE_INPUTS for path in ([folder] if folder.is_file() else folder.rglob("*")))
    return newest_mtime(path for path in files if path.is_file() and "__pycache__" not in path.parts
                        and path.suffix != ".so")


def is_current(target: Path) -> bool:
    """True when `target` holds an installed backend, and its project beside it, newer than every template file."""
    library = vendor_library(target)
    return (library is not None and (vendor_source(target) / "tests").is_dir()
            and library.stat().st_mtime >= newest_template_file())


def build_vendor_backend(root: Path, reuse: Path = SETUP_BUILD) -> Path:
    """The installed mydev backend: `reuse` (make setup's build) while it is current, else root/mydev-backend,
    generated into root/mydev-source and installed there unless it already is; returns the installed folder."""
    if is_current(reuse):
        return reuse
    target = root / f"{DEVICE}-backend"
    source = vendor_source(target)
    if vendor_library(target) is not None:
        return target
    from pu1_explorer.new_backend import new_backend

    shutil.rmtree(source, ignore_errors=True)
    new_backend(DEVICE, source)
    result = pip("install", "--no-build-isolation", "--no-deps", "--upgrade", "--target", str(target), str(source),
                 timeout=1800, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    if result.returncode != 0 or vendor_library(target) is None:
        raise VendorBuildError(f"the generated backend failed to build: {first_error(result.stdout + result.stderr)}")
    return target
