"""Coverage against another device's kernels: how far a backend is from CUDA (or the CPU, or MPS).

A baseline is the set of ATen overloads that a device of PyTorch's own registers a kernel for, read from the
`native_functions.yaml` shipped in the installed torch (torchgen's packaged copy), with torchgen's own parser:
- an overload counts when its `dispatch:` entry names the device's key (`CUDA`, `CPU`, `MPS`), alone or with
  others (`CPU, CUDA: add_out`), and, for the CPU and CUDA, when it gives a `ufunc_inner_loop` (torchgen writes
  both devices' kernels from it);
- a functional or in-place overload whose `structured_delegate` is such an overload counts too: torchgen
  generates its kernel for every key of its delegate, so the device registers it although the yaml lists no
  dispatch entry for it;
- CompositeImplicitAutograd and CompositeExplicitAutograd overloads do not count: their one kernel serves every
  device, and a backend needs none of its own.

`against(snapshot, "cuda")` then sorts each overload of the baseline by what the snapshot's backend does with it:
its own kernel, a composite that reaches kernels, the CPU fallback, or nothing.
"""
from __future__ import annotations

import csv
import functools
import io
import json
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from pu1_explorer.dispatch_tables import FALLBACK, KERNEL, MISSING
from pu1_explorer.op_coverage import COPIES, CoverageSnapshot, core_operators, operator_family

# the devices of PyTorch's own that a backend can be measured against, and their dispatch keys in the yaml
BASELINE_KEYS = {"cuda": "CUDA", "cpu": "CPU", "mps": "MPS"}

OWN_KERNEL = "own kernel"
THROUGH_COMPOSITE = "through a composite"
FALLS_BACK = "CPU fallback"
NOTHING = "nothing"
AGAINST_STATUSES = (OWN_KERNEL, THROUGH_COMPOSITE, FALLS_BACK, NOTHING)


class UnknownBaselineError(ValueError):
    """A device no baseline is kept for."""


@dataclass(frozen=True)
class Baseline:
    """The overloads a device of PyTorch's registers a kernel for, and where that list comes from."""

    device: str
    operators: frozenset[str]  # "aten::add.Tensor"
    listed: int  # with the device's key in their own dispatch entry
    delegated: int  # counted through their structured delegate
    source: str  # the yaml read, with the torch version

    def __len__(self) -> int:
        return len(self.operators)


def native_functions_yaml() -> Path:
    """The native_functions.yaml shipped with the installed torch (torchgen's packaged copy)."""
    import torchgen

    return Path(torchgen.__file__).parent / "packaged" / "ATen" / "native" / "native_functions.yaml"


@functools.lru_cache(maxsize=None)
def _parsed_yaml():
    from torchgen.gen import parse_native_yaml

    path = native_functions_yaml()
    return parse_native_yaml(str(path), str(path.with_name("tags.yaml")))


@functools.lru_cache(maxsize=None)
def baseline(device: str = "cuda") -> Baseline:
    """The overloads `device` ('cuda', 'cpu' or 'mps') has a kernel of its own for, in this torch."""
    if device not in BASELINE_KEYS:
        raise UnknownBaselineError(f"no baseline for {device!r}: measure against one of {', '.join(BASELINE_KEYS)}")
    from torchgen.model import DispatchKey

    parsed = _parsed_yaml()
    index = parsed.backend_indices[getattr(DispatchKey, BASELINE_KEYS[device])]
    listed = {str(function.func.name) for function in parsed.native_functions if index.has_kernel(function)}
    delegated = {str(function.func.name) for function in parsed.native_functions
                 if function.structured_delegate is not None and str(function.structured_delegate) in listed
                 and str(function.func.name) not in listed}
    return Baseline(device, frozenset(f"aten::{name}" for name in listed | delegated), len(listed), len(delegated),
                    f"{native_functions_yaml()} (torch {torch.__version__})")


def peers(device: str = "cuda") -> dict[str, int]:
    """How many of `device`'s kernels each other device of PyTorch's has too, by the same reading of the yaml."""
    reference = baseline(device)
    return {other: len(baseline(other).operators & reference.operators) for other in BASELINE_KEYS if other != device}


@dataclass(frozen=True)
class AgainstRow:
    """One overload of the baseline, and what the measured backend does with it."""

    operator: str
    family: str
    core: bool
    status: str  # one of AGAINST_STATUSES


@dataclass(frozen=True)
class FamilyTotals:
    """One operator family's overloads in the baseline, by what the backend does with them."""

    family: str
    total: int
    counts: dict[str, int]


@dataclass
class AgainstReport:
    """A backend's coverage of a baseline device's kernels."""

    label: str  # the measured backend
    baseline: Baseline
    rows: list[AgainstRow]

    def totals(self, core_only: bool = False) -> dict:
        """Counts and percentages of the baseline's overloads by status; `core_only`: the core-ATen ones."""
        rows = [row for row in self.rows if row.core] if core_only else self.rows
        counts = Counter(row.status for row in rows)
        total = len(rows)

        def percent(count: int) -> float:
            return round(100.0 * count / total, 1) if total else 0.0

        on_device = counts[OWN_KERNEL] + counts[THROUGH_COMPOSITE]
        return {"label": self.label, "baseline": self.baseline.device, "core_only": core_only, "overloads": total,
                "by_status": {status: {"count": counts[status], "percent": percent(counts[status])}
                              for status in AGAINST_STATUSES},
                "own_kernels": counts[OWN_KERNEL], "own_kernels_percent": percent(counts[OWN_KERNEL]),
                "on_device": on_device, "on_device_percent": percent(on_device)}

    def headline(self, core_only: bool = False) -> str:
        """'sim has its own kernel for 165 of CUDA's 1268 kernels (13.0%); ...': then what runs on the device."""
        totals = self.totals(core_only)
        scope = "core-ATen " if core_only else ""
        name = self.baseline.device.upper() if self.baseline.device != "cpu" else "the CPU"
        return (f"{self.label} has its own kernel for {totals['own_kernels']} of {name}'s {totals['overloads']} "
                f"{scope}kernels ({totals['own_kernels_percent']}%); {totals['on_device']} "
                f"({totals['on_device_percent']}%) run on the device, counting composites")

    def by_family(self) -> list[FamilyTotals]:
        """Per operator family, most overloads first, then by name."""
        families: dict[str, Counter] = {}
        for row in self.rows:
            families.setdefault(row.family, Counter())[row.status] += 1
        totals = [FamilyTotals(family, sum(counts.values()), {status: counts[status] for status in AGAINST_STATUSES})
                  for family, counts in families.items()]
        return sorted(totals, key=lambda item: (-item.total, item.family))

    def to_json(self) -> str:
        return json.dumps({"label": self.label, "baseline": {**asdict(self.baseline),
                                                             "operators": sorted(self.baseline.operators)},
                           "totals": self.totals(), "core_totals": self.totals(core_only=True),
                           "peers": peers(self.baseline.device),
                           "rows": [asdict(row) for row in self.rows]}, indent=1)

    def to_csv(self, core_only: bool = False) -> str:
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(["operator", "family", "core", "status"])
        for row in self.rows:
            if row.core or not core_only:
                writer.writerow([row.operator, row.family, row.core, row.status])
        return buffer.getvalue()

    def to_markdown(self, core_only: bool = False) -> str:
        totals = self.totals(core_only)
        baseline = self.baseline
        lines = [f"# {self.label} against {baseline.device}", "", self.headline(core_only) + ".", "",
                 f"{baseline.device}'s kernels: the {len(baseline)} overloads it registers a kernel for "
                 f"({baseline.listed} in its dispatch entries, {baseline.delegated} through their structured "
                 f"delegate), read from {baseline.source}; composite overloads, which need no kernel, are left out.",
                 "", "Where PyTorch's own devices stand by the same measure: "
                 + ", ".join(f"{other} has {count} ({round(100.0 * count / len(baseline), 1)}%)"
                             for other, count in peers(baseline.device).items()) + ".",
                 "", "| status | overloads |", "| --- | ---: |"]
        lines += [f"| {status} | {totals['by_status'][status]['count']} ({totals['by_status'][status]['percent']}%) |"
                  for status in AGAINST_STATUSES]
        lines += ["", "| family | overloads | " + " | ".join(AGAINST_STATUSES) + " |",
                  "| --- | ---: |" + " ---: |" * len(AGAINST_STATUSES)]
        for family in self.by_family():
            if core_only and not any(row.core for row in self.rows if row.family == family.family):
                continue
            lines.append(f"| {family.family} | {family.total} | "
                         + " | ".join(str(family.counts[status]) for status in AGAINST_STATUSES) + " |")
        lines += ["", "| operator | status | core |", "| --- | --- | --- |"]
        lines += [f"| `{row.operator}` | {row.status} | {'yes' if row.core else ''} |"
                  for row in self.rows if row.core or not core_only]
        return "\n".join(lines) + "\n"


def status_against(transitive: str) -> str:
    """What a coverage status means against a baseline kernel."""
    if transitive == KERNEL:
        return OWN_KERNEL
    if transitive in (FALLBACK, COPIES):
        return FALLS_BACK
    if transitive == MISSING:
        return NOTHING
    return THROUGH_COMPOSITE


def against(snapshot: CoverageSnapshot, device: str = "cuda") -> AgainstReport:
    """The snapshot's backend against `device`'s kernels: for each overload `device` has a kernel for, what the
    backend does with it (after following composites, as the snapshot's `transitive` status does)."""
    reference = baseline(device)
    rows_by_operator = snapshot.by_operator()
    core = core_operators()
    rows = []
    for operator in sorted(reference.operators):
        row = rows_by_operator.get(operator)
        rows.append(AgainstRow(operator, operator_family(operator), operator in core,
                               status_against(row.transitive if row else MISSING)))
    return AgainstReport(snapshot.label, reference, rows)
