"""The compiled C++ runtime core, `torch_sim._C`, built when the package is installed.

Every step module reaches the core through `load_runtime()`. Nothing here compiles:
a missing or broken library is one clear error naming the file and how to rebuild it.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

REBUILD = "rebuild it from the project folder with `make setup` or `pip install --no-build-isolation -e .`"


class RuntimeMissingError(ImportError):
    """The compiled core is missing or cannot be loaded."""


def load_compiled(package: str, name: str) -> ModuleType:
    """Import the compiled module `package.name`; if it is absent or broken, say which file and how to rebuild."""
    try:
        return importlib.import_module(f"{package}.{name}")
    except ImportError as error:
        folder = Path(importlib.import_module(package).__file__).parent
        present = sorted(path.name for path in folder.glob(f"{name}.*.so"))
        problem = f"cannot be loaded ({error})" if present else "is missing"
        raise RuntimeMissingError(
            f"{package}: the compiled library {folder / (present[0] if present else name + '.<abi>.so')} "
            f"{problem}; {REBUILD}"
        ) from None


def load_runtime() -> ModuleType:
    """Return sim's C++ runtime core."""
    return load_compiled("torch_sim", "_C")
