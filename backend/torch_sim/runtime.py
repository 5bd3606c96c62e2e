"""The compiled C++ runtime core, `torch_sim._C`, built when the package is installed.

Every step module reaches the core through `load_runtime()`. Nothing here compiles:
a missing or broken library is one clear error naming the file and how to rebuild it.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType


class RuntimeMissingError(ImportError):
    """The compiled core is missing or cannot be loaded."""


def load_runtime() -> ModuleType:
    """Return sim's C++ runtime core; if it is absent or broken, say which file and how to rebuild it."""
    try:
        return importlib.import_module("torch_sim._C")
    except ImportError as error:
        folder = Path(__file__).parent
        present = sorted(folder.glob("_C.*.so"))
        problem = f"cannot be loaded ({error})" if present else "is missing"
        raise RuntimeMissingError(
            f"torch_sim: the compiled library {present[0] if present else folder / '_C.<abi>.so'} {problem}; "
            "rebuild it from the project folder with `make setup` or `pip install --no-build-isolation -e .`"
        ) from None
