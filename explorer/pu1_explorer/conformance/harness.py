"""What a probe or sweep process uses: its helpers (`compare`, `skip`, `report`) and its messages to the parent.

A child process writes each message as one line on its standard output, after `MARK`, so that whatever else
the program prints cannot be taken for one. Nothing here imports torch at import time: the parent imports
this module for `MARK` and to parse the lines.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import traceback
from typing import Any, Callable, Sequence, TypeVar

MARK = "@@pu1-scorecard@@"
_MAX_LINE = 300
_Probe = TypeVar("_Probe", bound=Callable[..., Any])

# The device name the process checks (`setup` sets it): `compare` insists that device results stay on it.
_state: dict[str, Any] = {"device": None, "report": None}


def emit(kind: str, **data: Any) -> None:
    """Send the parent one message (a JSON object with `kind`), on the process's real standard output."""
    sys.__stdout__.write(MARK + json.dumps({"kind": kind, **data}) + "\n")
    sys.__stdout__.flush()


def parse_message(line: str) -> dict | None:
    """The message on one line of a child's output, or None for a line the program printed itself."""
    return json.loads(line[len(MARK):]) if line.startswith(MARK) else None


# What the OpInfo sweeps import beyond torch and the package's own dependencies: torch.testing's OpInfo database
# (common_utils) imports expecttest, which torch does not require. Module name -> what pip installs.
SWEEP_REQUIREMENTS = {"expecttest": "expecttest"}


def missing_requirements() -> list[str]:
    """The modules of `SWEEP_REQUIREMENTS` that this Python cannot import."""
    missing = []
    for module in SWEEP_REQUIREMENTS:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    return missing


def install_advice(missing: Sequence[str]) -> str:
    """One line: what to install before the OpInfo sweeps can run (or how to run without them)."""
    packages = " ".join(SWEEP_REQUIREMENTS.get(module, module) for module in missing)
    return (f"the OpInfo sweeps need {', '.join(missing)}, which torch.testing's OpInfo database imports: "
            f"pip install {packages} (or leave the sweeps out: opinfo='none', --opinfo none)")


class Skipped(Exception):
    """Raised by `skip`: the probe does not apply to this device."""


def skip(reason: str) -> None:
    """End the probe as skipped, with `reason` as its detail."""
    raise Skipped(reason)


def hint(text: str) -> Callable[[_Probe], _Probe]:
    """Decorate a probe with what usually causes its failure, in one line (the scorecard shows it when it fails)."""
    if not text or "\n" in text:
        raise ValueError("a probe's hint is one line of text")

    def attach(probe: _Probe) -> _Probe:
        probe.hint = text
        return probe
    return attach


def hint_of(probe: Any) -> str:
    """The hint a probe carries (`hint`), or "" for a probe without one."""
    return str(getattr(probe, "hint", ""))


def report(detail: str, **counts: int) -> None:
    """Give the probe's one-line finding (and counts) for when it passes."""
    _state["report"] = (str(detail), dict(counts))


def take_report() -> tuple[str, dict[str, int]] | None:
    """The last `report` of the running probe, forgetting it (None when the probe reported nothing)."""
    found, _state["report"] = _state["report"], None
    return found


def first_line(error: object) -> str:
    """The first non-blank line of an error's message, cut at 300 characters."""
    text = str(error).strip()
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return (line[:_MAX_LINE] + "...") if len(line) > _MAX_LINE else line


def describe(error: BaseException) -> str:
    """An error in one line: its message, or for a bare `assert` the source line that failed."""
    message = first_line(error)
    if not message and error.__traceback__ is not None:
        frames = traceback.extract_tb(error.__traceback__)
        if frames and frames[-1].line:
            message = "failed: " + frames[-1].line.strip()
    if isinstance(error, AssertionError):
        return message or "assertion failed"
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def compare(actual: Any, expected: Any, what: str = "", rtol: float = 1e-3, atol: float = 1e-3) -> None:
    """Assert that a device result matches the CPU's within tolerance; the error names `what` differs.

    A device tensor compared with a CPU tensor must be on the device the process checks.
    """
    import torch

    if isinstance(actual, torch.Tensor):
        device = _state["device"]
        on_cpu = isinstance(expected, torch.Tensor) and expected.device.type == "cpu"
        if device is not None and actual.device.type != device and on_cpu:
            raise AssertionError(f"{what}: the result is on {actual.device}, not on {device}")
        actual = actual.detach().cpu()
    if isinstance(expected, torch.Tensor):
        expected = expected.detach().cpu()
    try:
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True, check_device=False)
    except AssertionError as error:
        raise AssertionError(f"{what}: {first_line(error)}" if what else first_line(error)) from None


def import_spec(spec: str) -> None:
    """Import a module by name, or a .py file by path (as a module named after the file)."""
    if spec.endswith(".py") or os.sep in spec or "/" in spec:
        path = os.path.abspath(spec)
        name = os.path.splitext(os.path.basename(path))[0]
        found = importlib.util.spec_from_file_location(name, path)
        if found is None or found.loader is None or not os.path.exists(path):
            raise ImportError(f"no such file: {spec}")
        module = importlib.util.module_from_spec(found)
        sys.modules[name] = module
        found.loader.exec_module(module)
    else:
        importlib.import_module(spec)


def setup(device: str, imports: Sequence[str], use_imports: bool = True) -> Any:
    """Import torch and then `imports` (unless `use_imports` is false), remember `device`; return torch."""
    import torch

    if use_imports:
        for spec in imports:
            try:
                import_spec(spec)
            except BaseException as error:
                raise RuntimeError(f"import {spec} failed: {describe(error)}") from None
    _state["device"] = device
    return torch


def resolve(target: str) -> Any:
    """The object a "module:name" or "path/file.py:name" reference names (imported now)."""
    where, _, name = target.rpartition(":")
    if not where or not name:
        raise ValueError(f"a probe is 'module:function' or 'file.py:function', not {target!r}")
    if where.endswith(".py"):
        import_spec(where)
        module = sys.modules[os.path.splitext(os.path.basename(where))[0]]
    else:
        module = importlib.import_module(where)
    return getattr(module, name)
