"""The simulated accelerator `sim`: a complete PrivateUse1 backend that computes on the host.

The backend is assembled from named steps, in the order of the integration guide.
`bring_up()` installs them all (or up to a named step); each step lives in the
module of the same name, so every step of the guide points at exactly one file.
"""
from __future__ import annotations

import importlib
import os

STEPS: tuple[str, ...] = (
    "device_module",
    "hooks",
    "guard",
    "allocator",
    "operators",
    "streams_events",
    "generator",
    "autograd",
    "amp",
    "serialization",
    "autoload",
)

_installed: list[str] = []


def installed_steps() -> list[str]:
    """The steps this process has installed so far, in order."""
    return list(_installed)


def bring_up(until: str | None = None) -> list[str]:
    """Install the steps of the guide in order, up to and including `until` (default: all).

    `until` also comes from the SIM_BRINGUP_STEP environment variable. Steps already
    installed are skipped, so calling it twice is harmless.
    """
    target = until or os.environ.get("SIM_BRINGUP_STEP") or STEPS[-1]
    if target not in STEPS:
        raise ValueError(f"unknown bring-up step {target!r}; the steps are: {', '.join(STEPS)}")
    for step in STEPS[: STEPS.index(target) + 1]:
        if step not in _installed:
            importlib.import_module(f"backend.{step}").install()
            _installed.append(step)
    return installed_steps()


def require(step: str) -> None:
    """Raise a clear error when a step that a feature needs is not installed."""
    if step not in _installed:
        raise RuntimeError(
            f"sim: the '{step}' step of the bring-up is not installed in this process "
            f"(installed: {', '.join(_installed) or 'none'}); call backend.bring_up('{step}')"
        )
