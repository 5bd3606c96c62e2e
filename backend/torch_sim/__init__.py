"""The simulated accelerator `sim`: a complete PrivateUse1 backend that computes on the host.

The backend is assembled from named steps, in the order of the integration guide.
`bring_up()` installs them all (or up to a named step); each step lives in the
module of the same name, so every step of the guide points at exactly one file.
`GUIDE` holds one record per step (`torch_sim.steps`); `STEPS` is their names.
"""
from __future__ import annotations

import importlib
import os

from torch_sim.steps import GUIDE

STEPS: tuple[str, ...] = tuple(step.name for step in GUIDE)

_installed: list[str] = []
_in_progress = False


def installed_steps() -> list[str]:
    """The steps this process has installed so far, in order."""
    return list(_installed)


def bring_up(until: str | None = None) -> list[str]:
    """Install the steps of the guide in order, up to and including `until` (default: all).

    `until` also comes from the SIM_BRINGUP_STEP environment variable. Steps already
    installed are skipped, so calling it twice is harmless.
    """
    global _in_progress
    target = until or os.environ.get("SIM_BRINGUP_STEP") or STEPS[-1]
    if target not in STEPS:
        raise ValueError(f"unknown bring-up step {target!r}; the steps are: {', '.join(STEPS)}")
    if "device_module" not in _installed:
        _refuse_if_privateuse1_is_taken()
    _in_progress = True
    try:
        for step in STEPS[: STEPS.index(target) + 1]:
            if step not in _installed:
                importlib.import_module(f"torch_sim.{step}").install()
                _installed.append(step)
    finally:
        _in_progress = False
    return installed_steps()


def bring_up_in_progress() -> bool:
    """True while bring_up() runs: `import torch` inside it must not start a second one through autoload."""
    return _in_progress


def privateuse1_owner() -> str | None:
    """The name another backend gave PrivateUse1 in this process, if one did."""
    import torch

    name = torch.device("privateuseone").type
    return None if name in ("privateuseone", "sim") else name


def _refuse_if_privateuse1_is_taken() -> None:
    owner = privateuse1_owner()
    if owner:
        raise RuntimeError(
            f"sim: PrivateUse1 already belongs to '{owner}' in this process, and only one backend can own it; "
            "to use sim, start a fresh Python with TORCH_DEVICE_BACKEND_AUTOLOAD=0 and call torch_sim.bring_up()"
        )


def require(step: str) -> None:
    """Raise a clear error when a step that a feature needs is not installed."""
    if step not in _installed:
        raise RuntimeError(
            f"sim: the '{step}' step of the bring-up is not installed in this process "
            f"(installed: {', '.join(_installed) or 'none'}); call torch_sim.bring_up('{step}')"
        )


# Importing a step first (`import torch_sim.amp`) imports torch, whose autoload brings the
# backend up and imports that same step while it is still half-loaded. Importing torch here,
# once every name above exists, makes torch's autoload run before any step module loads.
import torch  # noqa: E402,F401
