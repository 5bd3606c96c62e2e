"""Step 11, autoload: `import torch` brings sim up by itself.

The package declares an entry point in the group `torch.backends`; at the end of
`import torch`, PyTorch calls `backend.autoload:initialize` unless
TORCH_DEVICE_BACKEND_AUTOLOAD=0. While this package imports torch itself, the
guard below keeps that call from running twice (the trick torch_npu uses too).
"""
from __future__ import annotations

ENTRY_POINT_GROUP = "torch.backends"


def initialize() -> None:
    """The entry point: bring the whole backend up (or up to SIM_BRINGUP_STEP)."""
    import backend

    backend.bring_up()


def install() -> None:
    """Nothing to register at run time: the entry point lives in pyproject.toml."""
