"""FallbackMonitor and MemoryMonitor: watch a workload while it runs, with a progress bar."""
from __future__ import annotations

from typing import Callable

import ipywidgets

from pu1_explorer.fallback_report import FallbackReport, monitor_fallbacks
from pu1_explorer.memory import capacities, sample_memory, statistics_unavailable
from pu1_explorer.widgets.base import ExplorerWidget, escape, figure_html, message_html
from pu1_explorer.widgets.figures import fallback_bars, memory_figure


class _WorkloadWidget(ExplorerWidget):
    def __init__(self, children: list) -> None:
        self.progress = ipywidgets.IntProgress(value=0, min=0, max=1, description="steps")
        self.status = ipywidgets.HTML()
        self.output = ipywidgets.Output()
        super().__init__([self.progress, self.status, *children, self.output])

    def _steps(self, workload: Callable[[int], object], steps: int, after_step: Callable[[int], None]) -> None:
        if steps < 1:
            raise ValueError(f"steps must be at least 1, got {steps}")
        self.progress.max, self.progress.value = steps, 0
        for step in range(steps):
            try:
                workload(step)
            except Exception as error:
                self.status.value = message_html(f"step {step} failed: {type(error).__name__}: {error}", "error")
                after_step(step)
                return
            after_step(step)
            self.progress.value = step + 1
        self.status.value = message_html(f"{steps} steps done", "ok")


class FallbackMonitor(_WorkloadWidget):
    """`FallbackMonitor().run(workload, steps=10)`: which operators reach the fallback, how often, from where.

    `workload(step)` is called once per step while the backend's fallback is watched.
    """

    def __init__(self, backend_key: str = "PrivateUse1") -> None:
        self.backend_key = backend_key
        self.report: FallbackReport | None = None
        self.table = ipywidgets.HTML()
        super().__init__([self.table])

    def run(self, workload: Callable[[int], object], steps: int = 1) -> FallbackReport:
        with monitor_fallbacks(self.backend_key) as report:
            self.report = report
            self._steps(workload, steps, lambda step: None)
        self.table.value = self.table_html()
        self.show_figure(self.output, self.figure())
        return report

    def figure(self):
        counts = {entry.operator: entry.count for entry in self.report.ranked()} if self.report else {}
        backend = self.report.backend if self.report else self.backend_key
        return fallback_bars(counts, title=f"Operators that reached {backend}'s fallback ({sum(counts.values())} calls)")

    def table_html(self) -> str:
        if not self.report or not self.report.calls:
            return "<p>No operator reached the fallback.</p>"
        rows = "".join(
            f"<tr><td><code style='white-space:nowrap'>{escape(e.operator)}</code></td><td>{e.count}</td>"
            f"<td>{e.copied}</td><td>{escape('; '.join(s for s, _ in e.shapes.most_common(2)))}</td>"
            f"<td>{escape('; '.join(s for s, _ in e.call_sites.most_common(2)))}</td></tr>"
            for e in self.report.ranked())
        return ("<div style='overflow-x:auto'><table><thead><tr><th>operator</th><th>calls</th>"
                "<th title='calls that copied their tensors to the CPU and back'>copied</th><th>shapes</th>"
                f"<th>call sites</th></tr></thead><tbody>{rows}</tbody></table></div>")

    def static_html(self) -> str:
        return f"<div class='explorer-widget'>{self.status.value}{self.table_html()}{figure_html(self.figure())}</div>"


class MemoryMonitor(_WorkloadWidget):
    """`MemoryMonitor().run(workload, steps=10)`: allocated, reserved and peak memory per device, step by step."""

    def __init__(self) -> None:
        self.samples: list[dict] = []
        self.unavailable: str | None = None
        super().__init__([])

    def run(self, workload: Callable[[int], object], steps: int = 1) -> list[dict]:
        """Run the workload; without allocator statistics it still runs, and the widget says what is missing."""
        self.unavailable = statistics_unavailable()
        self.samples = sample_memory(0)

        def after(step: int) -> None:
            self.samples += sample_memory(step + 1)

        self._steps(workload, steps, after)
        if self.unavailable:
            self.status.value += message_html(f"no memory chart: {self.unavailable}", "warning")
        else:
            self.show_figure(self.output, self.figure())
        return self.samples

    def figure(self):
        return memory_figure(self.samples, capacities())

    def static_html(self) -> str:
        picture = "" if self.unavailable else figure_html(self.figure())
        return f"<div class='explorer-widget'>{self.status.value}{picture}</div>"
