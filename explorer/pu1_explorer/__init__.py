"""The explorer engine: dispatch tables, traces, coverage and fallback reports for any PrivateUse1 backend.

Every function returns plain data (dataclasses, lists, dicts) that the widgets,
the command line and the tests all consume.

The names below are imported on first use, so that a program that needs only a module without torch (the docs
build, which starts the fork server and the Jupyter kernels) does not import torch first.
"""
from __future__ import annotations

import importlib
import sys
from typing import Any

# public name -> the module that defines it
_EXPORTS = {
    **dict.fromkeys(("CoverageChange", "CoverageRow", "CoverageSnapshot", "coverage", "diff"), "op_coverage"),
    **dict.fromkeys(("AgainstReport", "Baseline", "against", "baseline"), "baselines"),
    **dict.fromkeys(("Demand", "KernelNeed", "NextKernels", "measure", "next_kernels"), "demand"),
    **dict.fromkeys(("DEFAULT_KEYS", "KERNEL_KINDS", "KernelEntry", "UnknownOperatorError", "all_operators",
                     "computed_table", "dispatch_table", "resolve_operator"), "dispatch_tables"),
    **dict.fromkeys(("GraphDump", "GraphDumpError", "compare_replay_with_eager", "read_graph_dump"), "graphs"),
    **dict.fromkeys(("KeySetPicture", "key_set"), "keyset"),
    **dict.fromkeys(("TimelineSpan", "timeline"), "profile"),
    **dict.fromkeys(("OpResult", "Probe", "ProbeResult", "Scorecard", "scorecard"), "conformance"),
    **dict.fromkeys(("Race", "SanitizerReport", "SanitizerUnavailable", "stream_sanitizer"), "sanitizer"),
    **dict.fromkeys(("Hop", "Trace", "trace"), "tracer"),
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    setattr(sys.modules[__name__], name, value)
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))

