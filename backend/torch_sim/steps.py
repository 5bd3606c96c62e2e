"""The bring-up steps of sim, one record each: the single definition every other part reads.

A step's record names it once and derives most of the rest from the name: its module
(`backend/torch_sim/<name>.py`, whose docstring explains the step) and its check
(`backend/torch_sim/checks/<name>.py`, a program that fails before the step and works after it).
Its C++ files are listed (`cpp`, names in `backend/torch_sim/csrc/`), the step's own `<name>.cpp`
first: every C++ file of sim belongs to one step, or to `RUNTIME_CPP`, what all steps share.
`label` is the step's short name in the site's navigation; `probes` names the
scorecard probes that grade the step. A vendor starts from this very code: `pu1-explorer new`
generates a backend that is sim's driver and integration under the vendor's name.

The records are also what `pu1_explorer.guide` takes (the explorer imports nothing of
sim): hand it `torch_sim.GUIDE`. A fresh process is brought up to a step by calling
`BRING_UP.function` with `BRING_UP.variable` naming the step (sim's SIM_BRINGUP_STEP).
"""
from __future__ import annotations

import ast
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import ClassVar

_PACKAGE = Path(__file__).parent
CSRC = _PACKAGE / "csrc"
# The driver's C API: backend/simdriver beside the package in a checkout, torch_sim/simdriver in a wheel.
DRIVER_HEADER = next((folder / "include" / "simdriver.h" for folder in (_PACKAGE / "simdriver",
                                                                         _PACKAGE.parent / "simdriver")
                      if (folder / "include" / "simdriver.h").is_file()), None)


@functools.cache
def driver_functions() -> frozenset[str]:
    """The functions the driver's C API declares (simMalloc, simLaunchKernel, ...); empty without its header."""
    if DRIVER_HEADER is None:
        return frozenset()
    return frozenset(re.findall(r"^[\w* ]+?\b(sim[A-Z]\w*)\(", DRIVER_HEADER.read_text(), re.MULTILINE))

# The C++ every step builds on, so no step's own: the devices and the Python module (runtime.cpp),
# the declarations every step's file includes (sim.h), and the interface trace every step's methods
# report to (interface_trace.cpp and .h).
RUNTIME_CPP: tuple[str, ...] = ("runtime.cpp", "sim.h", "interface_trace.cpp", "interface_trace.h")


@dataclass(frozen=True)
class Source:
    """Code a guide page shows: what it is (`caption`), where it lives (`path`, None for an excerpt), its text."""

    caption: str
    path: str | None
    text: str
    language: str


@dataclass(frozen=True)
class BringUp:
    """How a fresh Python brings sim up to a step: set `variable` to the step's name, then call `function`."""

    device: str
    function: str  # "module:function", called with no arguments
    variable: str
    # more variables every check process gets (read-only)
    environment: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), hash=False)


BRING_UP = BringUp("sim", "torch_sim:bring_up", "SIM_BRINGUP_STEP", MappingProxyType({"SIM_FALLBACK": "silent"}))


@dataclass(frozen=True)
class Step:
    """One bring-up step: its number, its name (the label, spelled only here), its title and its scorecard probes."""

    number: int
    name: str
    title: str
    label: str  # the page's name in the site's navigation, e.g. "Device guard"
    probes: tuple[str, ...]
    # the step's C++ files in backend/torch_sim/csrc/, its own `<name>.cpp` first; () for a step in Python only
    cpp: tuple[str, ...] = ()
    # the check is about `import torch` loading the backend: before the step it runs with autoloading off
    # and nothing brought up, after it with autoloading on
    checks_autoload: bool = False
    bring_up: ClassVar[BringUp] = BRING_UP

    @property
    def module(self) -> str:
        """The module that installs the step."""
        return f"torch_sim.{self.name}"

    @property
    def module_path(self) -> Path:
        return _PACKAGE / f"{self.name}.py"

    @property
    def cpp_paths(self) -> tuple[Path, ...]:
        """The step's C++ files, its own `<name>.cpp` first; empty for a step that needs no C++ of its own."""
        return tuple(CSRC / name for name in self.cpp)

    @property
    def check_program(self) -> Path:
        """The check: a program that fails before the step and works after it."""
        return _PACKAGE / "checks" / f"{self.name}.py"

    @property
    def explanation(self) -> str:
        """The module's docstring without its 'Step N, name:' headline, one paragraph per line (little markdown)."""
        text = ast.get_docstring(ast.parse(self.module_path.read_text())) or ""
        headline, _, rest = text.partition("\n")
        body = rest if ":" in headline else text
        summary = headline.split(":", 1)[1].strip() if ":" in headline else ""
        summary = summary[:1].upper() + summary[1:]
        paragraphs = [_join_paragraph(part) for part in body.strip().split("\n\n") if part.strip()]
        return "\n\n".join(([summary] if summary else []) + paragraphs)

    @property
    def driver_calls(self) -> tuple[str, ...] | None:
        """The driver functions the step's C++ calls, in the order they first appear: what the step asks of the
        device (a step in Python only, or one whose C++ calls no driver function, asks nothing of it directly).
        None where the driver's header is not beside the package (an installed generated backend): unknown."""
        if DRIVER_HEADER is None:
            return None
        calls = (re.findall(r"\b(sim[A-Z]\w*)\s*\(", path.read_text()) for path in self.cpp_paths)
        return tuple(name for name in dict.fromkeys(name for found in calls for name in found)
                     if name in driver_functions())

    @property
    def sources(self) -> tuple[Source, ...]:
        """What the step's page shows of sim: its Python module, then each of its C++ files."""
        shown = [Source("sim's Python module", f"backend/torch_sim/{self.module_path.name}",
                        self.module_path.read_text(), "python")]
        shown += [Source("sim's C++ file", f"backend/torch_sim/csrc/{path.name}", path.read_text(), "cpp")
                  for path in self.cpp_paths]
        return tuple(shown)


def _join_paragraph(text: str) -> str:
    """Unwrap a docstring paragraph, keeping list items ('- ...') on lines of their own."""
    items: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("- ") or not items:
            items.append(stripped)
        else:
            items[-1] += " " + stripped
    return "\n".join(items)


GUIDE: tuple[Step, ...] = (
    Step(1, "device_module", "Name the device and register its Python module", "Device module", ("device module",)),
    Step(2, "hooks", "Register the PrivateUse1 hooks", "Hooks", ("torch.accelerator", "pinned memory"),
         cpp=("hooks.cpp",)),
    Step(3, "guard", "Implement the device guard", "Device guard", ("devices and guard",), cpp=("guard.cpp",)),
    Step(4, "allocator", "Provide a device allocator", "Allocator", ("allocator statistics",), cpp=("allocator.cpp",)),
    Step(5, "operators", "Register operators and a fallback", "Operators and fallback",
         ("operators", "attention", "RNNs", "opinfo differential", "opinfo bad inputs"),
         cpp=("operators.cpp", "operators_launch.cpp", "operators_direct.cpp", "operators_direct.h", "operators_rnn.cpp",
              "operators_rnn.h")),
    Step(6, "streams_events", "Support streams and events", "Streams and events",
         ("streams and events", "stream-ordering traces"),
         cpp=("streams_events.cpp",)),
    Step(7, "generator", "Provide random number generators", "Generator", ("generator",), cpp=("generator.cpp",)),
    Step(8, "autograd", "Customise autograd where the device needs it", "Autograd", ("autograd on layers",)),
    Step(9, "amp", "Enable automatic mixed precision", "AMP", ("autocast (AMP)",), cpp=("amp.cpp",)),
    Step(10, "serialization", "Make tensors save and load", "Serialization", ("serialization",),
         cpp=("serialization.cpp",)),
    Step(11, "autoload", "Load the backend with `import torch`", "Autoload", ("autoload",), checks_autoload=True),
    Step(12, "profiler", "Report device time to the profiler", "Profiler", ("profiler",), cpp=("profiler.cpp",)),
    Step(13, "compile", "Compile for the device with torch.compile", "Compile", ("torch.compile",)),
    Step(14, "distributed", "Run torch.distributed on the device", "Distributed", ("distributed",),
         cpp=("distributed.cpp",)),
    Step(15, "graphs", "Capture and replay graphs", "Graphs", ("graph capture",),
         cpp=("graphs.cpp", "graphs_capture.cpp", "graphs.h")),
)
