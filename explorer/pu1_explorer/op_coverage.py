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

A snapshot carries the dispatch-table rows it was classified from, so that one read back
from JSON in another process (a backend this process has not loaded) still drills down
into that backend's own tables, never into this process's.
"""
from __future__ import annotations

import csv
import functools
import io
import json
import os
import uuid
from collections import Counter
from collections.abc import Collection
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from pu1_explorer import dispatcher
from pu1_explorer.dispatch_tables import (
    COMPOSITE_EXPLICIT, COMPOSITE_EXPLICIT_NONFUNCTIONAL, COMPOSITE_IMPLICIT, FALLBACK, KERNEL, MISSING, KernelEntry,
    UnknownOperatorError, entry_from_dump, role_keys,
)
from pu1_explorer.devices import privateuse1_backend

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


_PROCESS_TOKEN = uuid.uuid4().hex[:12]


def this_process() -> str:
    """An id of this process, different in every other one (a forked child has another pid): 'pid-token'."""
    return f"{os.getpid()}-{_PROCESS_TOKEN}"


class ForeignSnapshotError(ValueError):
    """A snapshot without its dispatch tables: only the process that measured it could compute them."""


@dataclass
class MeasuredTables:
    """The dispatch-table rows of every classified operator, as the measuring process's dispatcher computed them.

    `columns` maps each backend shown ('CPU', 'PrivateUse1', …) to the key of each role; every distinct line of
    the dispatcher's dump is stored once in `lines`, and `rows[operator][i]` is the index of the line of `keys[i]`.
    """

    columns: dict[str, dict[str, str]]
    keys: tuple[str, ...]
    lines: list[str]
    rows: dict[str, list[int]]

    def tables(self, operator: str) -> dict[str, list[KernelEntry]]:
        """One operator's entries by role, per backend (the shape of `dispatch_tables.backend_tables`)."""
        line_of_key = {key: self.lines[index] for key, index in zip(self.keys, self.rows[operator])}
        result = {}
        for column, roles in self.columns.items():
            entries = [entry_from_dump(operator, line_of_key.get(key, ""), key) for key in roles.values()]
            result[column] = [KernelEntry(operator, role, entry.kind, entry.file, entry.line)
                              for role, entry in zip(roles, entries)]
        return result

    def to_dict(self) -> dict:
        return {"columns": self.columns, "keys": list(self.keys), "lines": self.lines, "rows": self.rows}

    @classmethod
    def from_dict(cls, data: dict) -> MeasuredTables:
        return cls(data["columns"], tuple(data["keys"]), data["lines"], data["rows"])


def _dump_line(dump: str, key: str) -> str:
    """The line of one key in a dispatcher dump ('' when the key has none), found the way `entry_from_dump` does."""
    if dump.startswith(key + ":"):
        start = 0
    else:
        start = dump.find("\n" + key + ":") + 1
        if start == 0:
            return ""
    end = dump.find("\n", start)
    return dump[start:] if end < 0 else dump[start:end]


@dataclass
class CoverageSnapshot:
    """A backend's coverage at one moment; compare two with `diff()`.

    `privateuse1` is the PrivateUse1 backend's name in the measuring process and `process` that process's id
    (`this_process()`); `tables` holds the dispatch-table rows measured there, for `operator_tables()`.
    """

    backend_key: str
    label: str
    rows: list[CoverageRow] = field(default_factory=list)
    privateuse1: str | None = None
    process: str = ""
    tables: MeasuredTables | None = None

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
               autograd: str | None = None, autocast: str | None = None, transitive: bool = False,
               among: Collection[str] | None = None) -> list[CoverageRow]:
        """Rows matching every given condition (status on the backend key, or transitive status; `among`: only these
        operators, a baseline's for instance)."""
        needle = text.lower()
        selected = []
        for row in self.rows:
            if core_only and not row.core:
                continue
            if among is not None and row.operator not in among:
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

    def operator_tables(self, operator: str) -> dict[str, list[KernelEntry]]:
        """One operator's computed entries by role, for CPU and this backend, as the measuring process had them.

        Raises ForeignSnapshotError (one line, naming the command that measures them) when the snapshot lacks them.
        """
        if self.tables is None:
            raise ForeignSnapshotError(
                f"this snapshot of {self.label} holds no dispatch tables; they can only be measured in a process "
                f"where {self.label} is loaded: `python -m pu1_explorer coverage --device {self.label} --format json` "
                "there (with the backend imported or autoloaded) writes a snapshot that carries them")
        if operator not in self.tables.rows:
            raise UnknownOperatorError(f"{operator!r} is not an operator of this snapshot of {self.label}")
        return self.tables.tables(operator)

    def to_json(self) -> str:
        return json.dumps({"backend_key": self.backend_key, "label": self.label, "privateuse1": self.privateuse1,
                           "process": self.process, "summary": self.summary(),
                           "core_summary": self.summary(core_only=True),
                           "rows": [asdict(row) for row in self.rows],
                           "tables": self.tables.to_dict() if self.tables else None}, indent=1)

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
    """The overloads tagged core ATen (torch.Tag.core), read from each overload's public `tags`."""
    core = set()
    for name in dispatcher.operator_names():
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


def operator_family(operator: str) -> str:
    """'aten::add_.Tensor' -> 'add': the base name without overload and leading or trailing underscores."""
    return operator.split("::", 1)[1].split(".", 1)[0].rstrip("_").lstrip("_") or operator


def coverage(backend_key: str = "PrivateUse1", label: str | None = None, namespace: str = "aten") -> CoverageSnapshot:
    """Classify every overload of one operator namespace for one backend key ('PrivateUse1', 'CPU', 'Meta', …).

    `namespace` is "aten" by default; "c10d" shows which collectives reach a kernel on the device.
    """
    roles = role_keys(backend_key)
    key = roles["Backend"]
    watched = (key, roles.get("Autograd"), roles.get("Autocast"))  # a role this backend lacks reads as missing
    columns = {column: role_keys(column) for column in dict.fromkeys(("CPU", key))}
    table_keys = tuple(dict.fromkeys(k for column in columns.values() for k in column.values()))
    core = core_operators()
    statuses: dict[str, tuple[str, str, str]] = {}
    line_index: dict[str, int] = {}  # each distinct dump line once: most recur across operators
    kinds: list[str] = []  # the kind of each distinct line, parsed once
    table_rows: dict[str, list[int]] = {}
    positions = [table_keys.index(k) if k else None for k in watched]
    for operator in dispatcher.operator_names():
        if not operator.startswith(f"{namespace}::"):
            continue
        dump = dispatcher.dump_table(operator)
        row = []
        for k in table_keys:
            line = _dump_line(dump, k)
            index = line_index.setdefault(line, len(line_index))
            if index == len(kinds):
                kinds.append(entry_from_dump(operator, line, k).kind)
            row.append(index)
        table_rows[operator] = row
        statuses[operator] = tuple(kinds[row[p]] if p is not None else MISSING for p in positions)

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
                        operator_family(operator))
            for operator, (backend, autograd, autocast) in sorted(statuses.items())]
    privateuse1 = privateuse1_backend()
    name = label or (torch.device("privateuseone").type if key == "PrivateUse1" else key)
    tables = MeasuredTables(columns, table_keys, list(line_index), table_rows)
    return CoverageSnapshot(key, name, rows, privateuse1=privateuse1, process=this_process(), tables=tables)


def observe(snapshot: CoverageSnapshot, report) -> CoverageSnapshot:
    """The snapshot with what a monitored run saw: the backend kernels that copied to the CPU become copies_to_cpu.

    `report` is a FallbackReport from `monitor_fallbacks()` on the same backend.
    """
    copying = set(report.copying_kernels)
    rows = [replace(row, transitive=COPIES) if row.operator in copying else row for row in snapshot.rows]
    return replace(snapshot, rows=rows)


def snapshot_from_json(text: str) -> CoverageSnapshot:
    """Read back a snapshot written by `CoverageSnapshot.to_json()`, with where it was measured and its tables."""
    data = json.loads(text)
    tables = data.get("tables")
    return CoverageSnapshot(data["backend_key"], data["label"], [CoverageRow(**row) for row in data["rows"]],
                            privateuse1=data.get("privateuse1"), process=data.get("process", ""),
                            tables=MeasuredTables.from_dict(tables) if tables else None)
