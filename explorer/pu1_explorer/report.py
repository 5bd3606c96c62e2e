"""One self-contained HTML page: a backend's coverage, the fallback report of a reference workload, and charts.

plotly.js is embedded in the page itself, so it opens with no network.
"""
from __future__ import annotations

import runpy
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import plotly.graph_objects as go

from pu1_explorer import pages
from pu1_explorer.op_coverage import STATUS_ORDER, CoverageSnapshot
from pu1_explorer.devices import backend_key
from pu1_explorer.fallback_report import FallbackReport, monitor_fallbacks
from pu1_explorer.pages import KIND_COLOURS
from pu1_explorer.workloads import WORKLOADS, train


@dataclass
class WorkloadResult:
    """How one workload of the report ran: its name, its time, and the error that stopped it, if any."""

    name: str
    seconds: float
    error: str | None = None


def check_workloads(names: Sequence[str]) -> None:
    """Refuse an unknown workload name or a missing file before anything runs."""
    for name in names:
        if name.endswith(".py"):
            if not Path(name).is_file():
                raise FileNotFoundError(f"--workload {name}: no such file")
        elif name not in WORKLOADS:
            raise ValueError(f"--workload {name}: unknown; give one of {', '.join(WORKLOADS)} or a .py file")


def run_workloads(device: str, names: Sequence[str] | None = None, steps: int = 2,
                  progress: Callable[[str], None] = lambda message: None) -> tuple[FallbackReport, list[WorkloadResult]]:
    """Run each workload under one fallback monitor; a failing workload is recorded and the next one still runs."""
    names = list(names or WORKLOADS)
    check_workloads(names)
    results = []
    with monitor_fallbacks(backend_key(device)) as fallbacks:
        for name in names:
            started = time.perf_counter()
            try:
                if name.endswith(".py"):
                    runpy.run_path(name, init_globals={"device": device}, run_name="__main__")
                else:
                    train(name, device, steps=steps)
                error = None
            except Exception as failure:  # the report shows it; the other workloads still run
                frame = traceback.extract_tb(failure.__traceback__)[-1]
                first_line = str(failure).strip().splitlines()[0] if str(failure).strip() else ""
                error = f"{type(failure).__name__}: {first_line} ({Path(frame.filename).name}:{frame.lineno})"
            results.append(WorkloadResult(name, time.perf_counter() - started, error))
            progress(f"workload {name}: " + (f"failed: {error}" if error else f"{results[-1].seconds:.1f} s"))
    return fallbacks, results


def coverage_figure(snapshot: CoverageSnapshot) -> go.Figure:
    """Stacked bars: how the overloads (all and core ATen) resolve on the backend key, direct and transitive."""
    figure = go.Figure()
    groups = [("all, direct", snapshot.summary()["direct"]), ("all, transitive", snapshot.summary()["transitive"]),
              ("core, direct", snapshot.summary(core_only=True)["direct"]),
              ("core, transitive", snapshot.summary(core_only=True)["transitive"])]
    for status in STATUS_ORDER:
        figure.add_bar(name=status, y=[label for label, _ in groups],
                       x=[counts[status]["percent"] for _, counts in groups],
                       customdata=[counts[status]["count"] for _, counts in groups], orientation="h",
                       marker_color=KIND_COLOURS[status],
                       hovertemplate="%{y}: %{x}% (%{customdata} overloads)<extra>" + status + "</extra>")
    figure.update_layout(barmode="stack", title=f"How ATen overloads resolve on {snapshot.label}",
                         xaxis_title="% of overloads", height=380, legend={"orientation": "h", "y": -0.3})
    return figure


def fallback_figure(report: FallbackReport, top: int = 25) -> go.Figure:
    ranked = report.ranked()[:top]
    figure = go.Figure(go.Bar(x=[entry.count for entry in ranked][::-1],
                              y=[entry.operator for entry in ranked][::-1], orientation="h",
                              marker_color=KIND_COLOURS["fallback"]))
    figure.update_layout(title=f"Operators that reached the fallback ({report.total} calls)",
                         xaxis_title="calls", height=max(300, 24 * len(ranked) + 120))
    return figure


def build_report(snapshot: CoverageSnapshot, fallbacks: FallbackReport, workloads: Sequence[WorkloadResult],
                 progress: Callable[[str], None] = lambda message: None) -> str:
    """The whole page as one HTML string."""
    progress("drawing the charts")
    summary = snapshot.summary()
    core = snapshot.summary(core_only=True)
    charts = coverage_figure(snapshot).to_html(include_plotlyjs=True, full_html=False)
    if fallbacks.calls:
        charts += fallback_figure(fallbacks).to_html(include_plotlyjs=False, full_html=False)
    workload_rows = [[result.name, f"{result.seconds:.2f}\u00a0s", result.error or "ran"] for result in workloads]
    workload_names = ", ".join(result.name for result in workloads) or "none"
    fallback_rows = [[entry.operator, entry.count, entry.copied, "; ".join(f"{s} ×{c}" for s, c in entry.shapes.most_common(3)),
                      "; ".join(f"{s} ×{c}" for s, c in entry.call_sites.most_common(2))]
                     for entry in fallbacks.ranked()]
    falling_back = [[row.operator, row.backend, row.transitive, row.autograd, "yes" if row.core else ""]
                    for row in snapshot.rows if row.falls_back]
    return pages.render("report.html", snapshot=snapshot, summary=summary, core=core, charts=pages.safe(charts),
                        generated=time.strftime("%Y-%m-%d %H:%M"), workload_rows=workload_rows,
                        workload_names=workload_names, fallbacks=fallbacks, fallback_rows=fallback_rows,
                        falling_back=falling_back)
