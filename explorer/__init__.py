"""The explorer engine: dispatch tables, traces, coverage and fallback reports for any PrivateUse1 backend.

Every function returns plain data (dataclasses, lists, dicts) that the widgets,
the command line and the tests all consume.
"""
from pu1_explorer.coverage import CoverageChange, CoverageRow, CoverageSnapshot, coverage, diff
from pu1_explorer.dispatch_table import (
    DEFAULT_KEYS, KERNEL_KINDS, KernelEntry, UnknownOperatorError, all_operators, computed_table, dispatch_table,
    resolve_operator,
)
from pu1_explorer.keyset import KeySetPicture, key_set
from pu1_explorer.profile import TimelineSpan, timeline
from pu1_explorer.scorecard import OpResult, Probe, ProbeResult, Scorecard, scorecard
from pu1_explorer.tracer import Hop, Trace, trace

__all__ = [
    "CoverageChange", "CoverageRow", "CoverageSnapshot", "coverage", "diff", "DEFAULT_KEYS", "KERNEL_KINDS",
    "KernelEntry", "UnknownOperatorError", "all_operators", "computed_table", "dispatch_table", "resolve_operator",
    "Hop", "Trace", "trace", "TimelineSpan", "timeline", "KeySetPicture", "key_set", "OpResult", "Probe",
    "ProbeResult", "Scorecard", "scorecard",
]
