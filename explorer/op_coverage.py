"""Operator coverage of a backend: for every ATen overload, what runs on the backend, autograd and autocast keys.

`coverage()` classifies all overloads from the computed dispatch tables (any backend
key: "PrivateUse1", "CPU", "Meta", …). Composite kernels are followed further, to what
the call really reaches: through `structured_delegate` edges of native_functions.yaml (a
functional operator whose composite wrapper calls an `.out` form that lands on the
fallback counts as falling back), through ATen's routing of a PrivateUse1 convolution to
`convolution_overrideable`, and onto ATen defaults that only raise (those count as
missing). What only running shows, a backend's own kernel that copies to the CPU
(`at::native::cpu_fallback` called from a per-operator kernel), is added by `observe()`
from a fallback report.
"""
from __future__ import annotations

import csv
import functools
import io
import json
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from pu1_explorer.dispatch_tables import (
    COMPOSITE_EXPLICIT, COMPOSITE_EXPLICIT_NONFUNCTIONAL, COMPOSITE_IMPLICIT, FALLBACK, KERNEL, MISSING, entry_from_dump, role_keys,
)

COMPOSITES = (COMPOSITE_IMPLICIT, COMPOSITE_EXPLICIT, COMPOSITE_EXPLICIT_NONFUNCTIONAL)
COPIES = "copies_to_cpu"  # the backend's own kernel, seen copying its tensors to the CPU and back
STATUS_ORDER = (KERNEL, COMPOSITE_EXPLICIT, COMPOSITE_EXPLICIT_NONFUNCTIONAL, COMPOSITE_IMPLICIT, COPIES, FALLBACK,
                MISSING)
# ATen's default kernels that only raise "not implemented": a backend must register its own.
ERROR_ONLY_DEFAULTS = frozenset({"aten::convolution_overrideable", "aten::convolution_backward_overrideable"})
# Where ATen's composite convolution sends a PrivateUse1 tensor (ConvUtils' backend choice "Overrideable").
PRIVATEUSE1_ROUTES = {
    **{f"aten::conv{n}d{overload}": "aten::convolution" for n in (1, 2, 3) for overload in ("", ".padding")},
    **{f"aten::conv_transpose{n}d.input": "aten::convolution" for n in (1, 2, 3)},
    "aten::convolution": "aten::_convolution",
    "aten::_convolution": "aten::convolution_overrideable",
    "aten::convolution_backward": "aten::convolution_backward_overrideable",
}


@dataclass(frozen=True)
class CoverageRow:
    """The status of one operator overload for one backend."""

    operator: str
    backend: str  # the kind on the backend key
    autograd: str  # the kind on the backend's autograd key
    autocast: str  # the kind on the backend's autocast key
    core: bool  # tagged core ATen
    transitive: str  # the backend kind after following composite -> .out delegation
    family: str  # the operator's base name without overload and trailing underscore

    @property
    def falls_back(self) -> bool:
        """The call lands on the fallback, or on a kernel of the backend's own that copies to the CPU."""
        return self.transitive in (FALLBACK, COPIES)


@dataclass
class CoverageSnapshot:
    """A backend's coverage at one moment; compare two with `diff()`."""

    backend_key: str
    label: str
    rows: list[CoverageRow] = field(default_factory=list)

    def by_operator(self) -> dict[str, CoverageRow]:
        return {row.operator: row for row in self.rows}

    def summary(self, core_only: bool = False) -> dict:
        """Counts and percentages by status (direct and transitive), over all rows or the core-ATen rows."""
        rows = [row for row in self.rows if row.core] if core_only else self.rows
        total = len(rows)
        direct = Counter(row.backend for row in rows)
        transitive = Counter(row.transitive for row in rows)

        def with_percent(counter: Counter) -> dict:
            return {status: {"count": counter.get(status, 0),
                             "percent": round(100.0 * counter.get(status, 0) / total, 2) if total else 0.0}
                    for status in STATUS_ORDER}

        runs_natively = sum(1 for row in rows if row.transitive not in (FALLBACK, COPIES, MISSING))
        return {
            "backend_key": self.backend_key,
            "label": self.label,
            "operators": total,
            "core_only": core_only,
            "direct": with_percent(direct),
            "transitive": with_percent(transitive),
            "without_fallback_percent": round(100.0 * runs_natively / total, 2) if total else 0.0,
        }

    def filter(self, *, status: str | None = None, core_only: bool = False, text: str = "",
               autograd: str | None = None, autocast: str | None = None, transitive: bool = False) -> list[CoverageRow]:
        """Rows matching every given condition (status on the backend key, or transitive status)."""
        needle = text.lower()
        selected = []
        for row in self.rows:
            if core_only and not row.core:
                continue
            if status and (row.transitive if transitive else row.backend) != status:
                continue
            if autograd and row.autograd != autograd:
                continue
            if autocast and row.autocast != autocast:
                continue
            if needle and needle not in row.operator.lower():
                continue
            selected.append(row)
        return selected

    def to_json(self) -> str:
        return json.dumps({"backend_key": self.backend_key, "label": self.label, "summary": self.summary(),
                           "core_summary": self.summary(core_only=True),
                           "rows": [asdict(row) for row in self.rows]}, indent=1)

    def to_csv(self) -> str:
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(["operator", "backend", "autograd", "autocast", "core", "transitive", "family"])
        for row in self.rows:
            writer.writerow([row.operator, row.backend, row.autograd, row.autocast, row.core, row.transitive,
                             row.family])
        return buffer.getvalue()

    def to_markdown(self, core_only: bool = False) -> str:
        summary = self.summary(core_only=core_only)
        lines = [f"# Coverage of {self.label} ({self.backend_key})", "",
                 f"{summary['operators']} {'core ATen ' if core_only else ''}operator overloads; "
                 f"{summary['without_fallback_percent']}% run without the fallback.", "",
                 "| status | direct | transitive |", "| --- | ---: | ---: |"]
        for status in STATUS_ORDER:
            direct, transitive = summary["direct"][status], summary["transitive"][status]
            lines.append(f"| {status} | {direct['count']} ({direct['percent']}%) | "
                         f"{transitive['count']} ({transitive['percent']}%) |")
        lines += ["", "| operator | backend | transitive | autograd | autocast | core |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for row in self.rows:
            if core_only and not row.core:
                continue
            lines.append(f"| `{row.operator}` | {row.backend} | {row.transitive} | {row.autograd} | "
                         f"{row.autocast} | {'yes' if row.core else ''} |")
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class CoverageChange:
    operator: str
    before: str
    after: str


def diff(before: CoverageSnapshot, after: CoverageSnapshot, transitive: bool = True) -> list[CoverageChange]:
    """Operators whose status differs between two snapshots (two backends, or before and after a step)."""
    old, new = before.by_operator(), after.by_operator()
    changes = []
    for operator in sorted(set(old) | set(new)):
        was = getattr(old.get(operator), "transitive" if transitive else "backend", MISSING)
        now = getattr(new.get(operator), "transitive" if transitive else "backend", MISSING)
        if was != now:
            changes.append(CoverageChange(operator, was, now))
    return changes


@functools.lru_cache(maxsize=1)
def structured_delegates() -> dict[str, str]:
    """'aten::add.Tensor' -> 'aten::add.out', read from the native_functions.yaml that ships in torchgen."""
    import torchgen

    path = Path(torchgen.__file__).parent / "packaged" / "ATen" / "native" / "native_functions.yaml"
    delegates: dict[str, str] = {}
    current = None
    for line in path.read_text().splitlines():
        if line.startswith("- func:"):
            signature = line[len("- func:"):].strip()
            current = "aten::" + signature.split("(", 1)[0]
        elif current and line.strip().startswith("structured_delegate:"):
            target = line.split(":", 1)[1].strip()
            delegates[current] = "aten::" + target
    return delegates


@functools.lru_cache(maxsize=1)
def core_operators() -> frozenset[str]:
    """The overloads tagged core ATen (torch.Tag.core)."""
    try:  # the tags the dispatcher registered, without building torch.ops objects (about 10 times faster)
        core = set()
        for name in torch._C._dispatch_get_all_op_names():
            if name.startswith("aten::"):
                base, _, overload = name.partition(".")
                found = torch._C._get_operation_overload(base, overload)
                if found is not None and torch.Tag.core in found[2]:
                    core.add(name)
        return frozenset(core)
    except (AttributeError, RuntimeError, TypeError, IndexError):  # a torch whose private function differs
        return _core_operators_through_torch_ops()


def _core_operators_through_torch_ops() -> frozenset[str]:
    core = set()
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::"):
            continue
        base, _, overload = name[len("aten::"):].partition(".")
        packet = getattr(torch.ops.aten, base, None)
        if packet is None:
            continue
        try:
            op = getattr(packet, overload or "default")
        except AttributeError:
            continue
        if torch.Tag.core in op.tags:
            core.add(name)
    return frozenset(core)


def _family(operator: str) -> str:
    return operator.split("::", 1)[1].split(".", 1)[0].rstrip("_").lstrip("_") or operator


def coverage(backend_key: str = "PrivateUse1", label: str | None = None, namespace: str = "aten") -> CoverageSnapshot:
    """Classify every overload of one operator namespace for one backend key ('PrivateUse1', 'CPU', 'Meta', …).

    `namespace` is "aten" by default; "c10d" shows which collectives reach a kernel on the device.
    """
    roles = role_keys(backend_key)
    key = roles["Backend"]
    watched = (key, roles.get("Autograd"), roles.get("Autocast"))  # a role this backend lacks reads as missing
    core = core_operators()
    statuses: dict[str, tuple[str, str, str]] = {}
    for operator in torch._C._dispatch_get_all_op_names():
        if not operator.startswith(f"{namespace}::"):
            continue
        dump = torch._C._dispatch_dump_table(operator)
        statuses[operator] = tuple(entry_from_dump(operator, dump, k).kind if k else MISSING for k in watched)

    delegates = structured_delegates()
    routes = PRIVATEUSE1_ROUTES if key == "PrivateUse1" else {}

    def transitive(operator: str, depth: int = 0) -> str:
        status = statuses.get(operator, (MISSING,))[0]
        if status not in COMPOSITES:
            return status
        if operator in ERROR_ONLY_DEFAULTS:
            return MISSING
        for target in (delegates.get(operator), routes.get(operator)):
            if target in statuses and depth < 6:
                followed = transitive(target, depth + 1)
                if followed in (FALLBACK, MISSING):
                    return followed
        return status

    rows = [CoverageRow(operator, backend, autograd, autocast, operator in core, transitive(operator),
                        _family(operator))
            for operator, (backend, autograd, autocast) in sorted(statuses.items())]
    name = label or (torch._C._get_privateuse1_backend_name() if key == "PrivateUse1" else key)
    return CoverageSnapshot(key, name, rows)


def observe(snapshot: CoverageSnapshot, report) -> CoverageSnapshot:
    """The snapshot with what a monitored run saw: the backend kernels that copied to the CPU become copies_to_cpu.

    `report` is a FallbackReport from `monitor_fallbacks()` on the same backend.
    """
    copying = set(report.copying_kernels)
    rows = [replace(row, transitive=COPIES) if row.operator in copying else row for row in snapshot.rows]
    return CoverageSnapshot(snapshot.backend_key, snapshot.label, rows)


def snapshot_from_json(text: str) -> CoverageSnapshot:
    """Read back a snapshot written by `CoverageSnapshot.to_json()`."""
    data = json.loads(text)
    return CoverageSnapshot(data["backend_key"], data["label"], [CoverageRow(**row) for row in data["rows"]])
