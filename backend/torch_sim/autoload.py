"""Step 11, autoload: `import torch` brings sim up by itself.

The package declares an entry point in the group `torch.backends`; at the end of
`import torch`, PyTorch calls `torch_sim.autoload:initialize` unless
TORCH_DEVICE_BACKEND_AUTOLOAD is set to anything but `1`. When `torch_sim.bring_up()` itself is what imports
torch, the entry point returns at once instead of starting a second bring-up
inside the first (torch_npu guards its own import the same way).

Only one backend can own PrivateUse1 in a process. When another PrivateUse1 backend
is installed (or has already claimed the key), sim steps aside with one warning
instead of fighting over the key: a vendor's own backend always wins.
SIM_AUTOLOAD chooses: `auto` (the default), `1` (claim PrivateUse1 unless it is
already taken) or `0` (never autoload sim).
"""
from __future__ import annotations

import os
import warnings

ENTRY_POINT_GROUP = "torch.backends"
OWN_ENTRY_POINT = "torch_sim.autoload:initialize"
AUTOLOAD_CHOICES = ("auto", "1", "0")


class SimStepsAsideWarning(UserWarning):
    """Another backend owns PrivateUse1, so sim did not load."""


def autoload_choice() -> str:
    """SIM_AUTOLOAD, checked: 'auto', '1' or '0'."""
    raw = os.environ.get("SIM_AUTOLOAD", "auto").strip().lower()
    if raw not in AUTOLOAD_CHOICES:
        raise ValueError(f"SIM_AUTOLOAD must be one of {', '.join(AUTOLOAD_CHOICES)}, got {raw!r}")
    return raw


def other_backends() -> list[str]:
    """The other autoloading backends installed beside sim, as 'name = module:function'."""
    from importlib.metadata import entry_points

    return sorted({f"{entry.name} = {entry.value}" for entry in entry_points(group=ENTRY_POINT_GROUP)
                   if entry.value != OWN_ENTRY_POINT})


def initialize() -> None:
    """The entry point: bring the whole backend up (or up to SIM_BRINGUP_STEP), unless another backend owns PrivateUse1."""
    import torch_sim

    choice = autoload_choice()
    if choice == "0" or torch_sim.bring_up_in_progress():
        return
    owner = torch_sim.privateuse1_owner()
    rivals = [] if choice == "1" else other_backends()
    if owner or rivals:
        holder = f"PrivateUse1 already belongs to '{owner}'" if owner else \
            f"another PrivateUse1 backend is installed ({'; '.join(rivals)})"
        warnings.warn(
            f"sim steps aside: {holder}. To use sim instead, start Python with TORCH_DEVICE_BACKEND_AUTOLOAD=0 "
            "and call torch_sim.bring_up(); SIM_AUTOLOAD=0 silences this warning.",
            SimStepsAsideWarning, stacklevel=2)
        return
    torch_sim.bring_up()


def install() -> None:
    """Nothing to register at run time: the entry point lives in pyproject.toml."""
