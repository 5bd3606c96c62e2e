"""The integration guide's map: each step of `torch_sim.GUIDE` with the torch interface it implements, its files in sim
(which `pu1-explorer new` copies into a vendor's backend), its scorecard probes and what it adds to operator coverage.

Run as `python -m pu1_docs.guide_map` (the docs build forks it from the kernels' template, beside the notebooks, and
keeps its output while sim, the explorer and the tooling stay unchanged): prints one line of JSON, the map's rows.
`map_markdown(rows, ...)` turns them into the table docs/guide.md shows. Coverage comes from
`pu1_explorer.guide.coverage_by_step`: one fresh process that brings sim up step by step (a few seconds).

Which interface a step implements is written here, once per step, with the names that prove it: each must occur
in sim's sources for the step, or the map is not made.
"""
from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
NOTEBOOKS = ROOT / "notebooks"


@dataclass(frozen=True)
class Interface:
    """What PyTorch calls for a step (markdown), and the names sim's code for it must use."""

    text: str
    in_sim: tuple[str, ...]
    # sim's files (under backend/torch_sim/) that implement it, when they are not only the step's module and C++ files
    sim_files: tuple[str, ...] = ()


INTERFACES: dict[str, Interface] = {
    "device_module": Interface(
        "`rename_privateuse1_backend`; a module registered as `torch.<name>` (`_register_device_module`)",
        in_sim=("rename_privateuse1_backend", "_register_device_module", "def is_available", "def device_count",
                "def current_device", "def set_device")),
    "hooks": Interface(
        "`at::PrivateUse1HooksInterface`",
        in_sim=("PrivateUse1HooksInterface", "RegisterPrivateUse1HooksInterface")),
    "guard": Interface(
        "`c10::impl::DeviceGuardImplInterface`",
        in_sim=("DeviceGuardImplInterface", "DeviceGuardImplRegistrar")),
    "allocator": Interface(
        "`c10::DeviceAllocator`; `at::HostAllocator` for pinned memory",
        in_sim=("c10::DeviceAllocator", "at::HostAllocator")),
    "operators": Interface(
        "kernels on `PrivateUse1` (`TORCH_LIBRARY_IMPL`); a boxed fallback",
        in_sim=("DispatchKey::PrivateUse1", "m.fallback(")),
    "streams_events": Interface(
        "the guard's stream and event methods (`getNewStream`, `record`, `elapsedTime`, …)",
        in_sim=("getStream", "exchangeStream", "getNewStream", "record(", "elapsedTime"),
        sim_files=("csrc/guard.cpp", "csrc/streams_events.cpp")),
    "generator": Interface(
        "`c10::GeneratorImpl`, handed out by the hooks",
        in_sim=("c10::GeneratorImpl",)),
    "autograd": Interface(
        "kernels on `AutogradPrivateUse1`, where the device's gradient differs (optional)",
        in_sim=("AutogradPrivateUse1",)),
    "amp": Interface(
        "kernels on `AutocastPrivateUse1`; the module's `get_amp_supported_dtype`",
        in_sim=("AutocastPrivateUse1", "get_amp_supported_dtype")),
    "serialization": Interface(
        "`TensorBackendMetaRegistry` for a tensor's `c10::BackendMeta` (sim only); storage methods "
        "(`generate_methods_for_privateuse1_backend`)",
        in_sim=("for_storage=True", "BackendMeta", "TensorBackendMetaRegistry")),
    "autoload": Interface(
        "an entry point in the group `torch.backends`",
        in_sim=("torch.backends",)),
    "profiler": Interface(
        "kineto's `PrivateUse1ProfilerRegistry`; `registerPrivateUse1Methods`",
        in_sim=("IActivityProfiler", "PrivateUse1ProfilerRegistry", "registerPrivateUse1Methods")),
    "compile": Interface(
        "inductor's `register_backend_for_device` (from the module's `Scheduling`, …); dynamo's `DeviceInterface`",
        in_sim=("Scheduling", "register_device_op_overrides", "register_interface_for_device")),
    "distributed": Interface(
        "a `c10d::Backend`, `Backend.register_backend(..., devices=[...])`",
        in_sim=("c10d::Backend", "register_backend")),
    "graphs": Interface(
        "`at::GraphImplInterface` in `at::GraphImplRegistry`; the guard's `isStreamCapturing`; private pools "
        "(`MempoolId_t`)",
        in_sim=("at::GraphImplInterface", "GraphImplRegistry")),
}

# the statuses whose change a row reports, as (status, one, several)
COUNTED = (("kernel", "kernel of its own", "kernels of its own"),
           ("copies_to_cpu", "overload copied to the CPU", "overloads copied to the CPU"),
           ("fallback", "overload on the fallback", "overloads on the fallback"),
           ("missing", "overload with nothing", "overloads with nothing"))
KERNELS_ON = (("autograd", "AutogradPrivateUse1"), ("autocast", "AutocastPrivateUse1"))


class GuideMapError(ValueError):
    """The map cannot be made: a step without an interface here, or an interface its sources do not use."""


def _sim_texts(step: Any, interface: Interface) -> dict[str, str]:
    package = Path(step.module_path).parent
    paths = [package / name for name in interface.sim_files] or [step.module_path, *step.cpp_paths]
    return {f"backend/torch_sim/{Path(path).relative_to(package).as_posix()}": Path(path).read_text()
            for path in paths}


def _check_names(step_name: str, where: str, names: Sequence[str], texts: Mapping[str, str]) -> None:
    for name in names:
        if not any(name in text for text in texts.values()):
            raise GuideMapError(f"step {step_name!r}: the map says its interface uses {name!r}, but {where} "
                                f"({', '.join(texts) or 'no files'}) do not: correct INTERFACES in {__name__}")


def guide_page(step: Any) -> str:
    """The step's guide page, relative to docs/: notebooks/guide_NN_NAME.ipynb."""
    page = f"guide_{step.number:02d}_{step.name}.ipynb"
    if not (NOTEBOOKS / page).is_file():
        raise GuideMapError(f"step {step.name!r} has no guide page notebooks/{page}: name the page after the step")
    return f"notebooks/{page}"


def map_rows(guide: Sequence[Any], coverage: Sequence[Any]) -> list[dict]:
    """The map's rows, one per step of `guide` in its order: `coverage` is `coverage_by_step(guide)`."""
    by_step = {row.step: row for row in coverage}
    rows = []
    for step in guide:
        interface = INTERFACES.get(step.name)
        if interface is None:
            raise GuideMapError(f"step {step.name!r} has no interface in {__name__}.INTERFACES: add one")
        sim_texts = _sim_texts(step, interface)
        _check_names(step.name, "sim's sources for it", interface.in_sim, sim_texts)
        measured = by_step.get(step.name)
        if measured is None:
            raise GuideMapError(f"step {step.name!r} has no coverage measurement: pass coverage_by_step(guide)")
        package = Path(step.module_path).parent
        rows.append({"number": step.number, "name": step.name, "title": step.title, "page": guide_page(step),
                     "interface": interface.text, "probes": list(step.probes),
                     "sim_module": f"backend/torch_sim/{Path(step.module_path).relative_to(package).as_posix()}",
                     "sim_cpp": [f"backend/torch_sim/{Path(path).relative_to(package).as_posix()}"
                                 for path in step.cpp_paths],
                     "coverage": {"counts": dict(measured.counts), "percent": measured.without_fallback_percent,
                                  "autograd": measured.autograd_kernels, "autocast": measured.autocast_kernels}})
    return rows


def _change(number: int, one: str, several: str) -> str:
    sign = "+" if number > 0 else "−"
    return f"{sign}{abs(number):,} {one if abs(number) == 1 else several}"


def coverage_added(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> str:
    """What a step changed in coverage (`before` is the step before's measurement, None for the first step)."""
    counts = after["counts"]
    if before is None:
        return (f"the start: {counts['kernel']:,} kernels of its own, {counts['missing']:,} of "
                f"{sum(counts.values()):,} overloads with nothing")
    changes = [_change(counts[status] - before["counts"][status], one, several) for status, one, several in COUNTED
               if counts[status] != before["counts"][status]]
    if after["percent"] != before["percent"]:
        changes.append(f"{before['percent']}% → {after['percent']}% without the fallback")
    for key, dispatch_key in KERNELS_ON:
        if after[key] != before[key]:
            changes.append(_change(after[key] - before[key], f"`{dispatch_key}` kernel", f"`{dispatch_key}` kernels"))
    return "; ".join(changes) or "—"


_CODE_SPAN = re.compile(r"`([^`]+)`")
_NAME_BREAKS = re.compile(r"(::|/|_|\()")  # where a long name in code may wrap
_PATH_BREAKS = re.compile(r"(/)")  # where a file's path may wrap


def _code(text: str, breaks: re.Pattern = _NAME_BREAKS) -> str:
    """Code as HTML that may wrap only after what `breaks` matches (markdown left out of it)."""
    escaped = breaks.sub(lambda part: part.group(1) + "<wbr>", html.escape(text, quote=False))
    return "<code>" + escaped.replace("_", "&#95;").replace("*", "&#42;") + "</code>"


def _cell(text: str) -> str:
    """A table cell: its code spans wrap at their separators only, pipes escaped."""
    return _CODE_SPAN.sub(lambda match: _code(match.group(1)), text).replace("|", "\\|")


def nav_labels(nav: Any) -> dict[str, str]:
    """Each page of mkdocs' `nav` (a list of {title: page or list}) with its title there: the map's link texts."""
    labels: dict[str, str] = {}
    for entry in nav or ():
        for title, target in (entry.items() if isinstance(entry, Mapping) else ()):
            labels.update(nav_labels(target) if isinstance(target, list) else {str(target): str(title)})
    return labels


def map_markdown(rows: Sequence[Mapping[str, Any]], labels: Mapping[str, str] | None = None,
                 torch_version: str | None = None) -> str:
    """The map as a markdown table in a `guide-map` block (md_in_html): one row per step, linked to its page, whose
    link text is its label in `labels` (page -> text, see `nav_labels`) or its number and title."""
    calls = f"what PyTorch calls (torch {torch_version})" if torch_version else "what PyTorch calls"
    lines = ["<div class=\"guide-map\" markdown>", "",
             f"| step | {calls} | in sim (`backend/torch_sim/`) | scorecard probes | what it adds to coverage |",
             "| --- | --- | --- | --- | --- |"]
    before = None
    for row in rows:
        prefix = "backend/torch_sim/"
        sim = ("<br>".join(_code(path.removeprefix(prefix), _PATH_BREAKS) for path in row["sim_cpp"]) if row["sim_cpp"]
               else f"{_code(row['sim_module'].removeprefix(prefix), _PATH_BREAKS)} (no C++)")
        label = (labels or {}).get(row["page"], f"{row['number']}. {row['title']}")
        cells = (f"[{label}]({row['page']})", row["interface"], sim, ", ".join(row["probes"]),
                 coverage_added(before, row["coverage"]))
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
        before = row["coverage"]
    return "\n".join([*lines, "", "</div>"]) + "\n"


def main() -> None:
    """Measure sim's coverage step by step, print the map's rows and torch's version as JSON."""
    import torch
    import torch_sim
    from pu1_explorer.guide import coverage_by_step

    rows = map_rows(torch_sim.GUIDE, coverage_by_step(torch_sim.GUIDE))
    print(json.dumps({"torch": torch.__version__.split("+")[0], "rows": rows}))


if __name__ == "__main__":
    main()
