"""DispatchVisualizer and DispatchTable: the dispatcher's path for real code, and computed tables side by side."""
from __future__ import annotations

from typing import Callable, Sequence

import ipywidgets

from pu1_explorer.devices import check_device, known_devices, privateuse1_backend
from pu1_explorer.dispatch_tables import UnknownOperatorError, all_operators, backend_tables, resolve_operator
from pu1_explorer.tracer import Trace, run_traced
from pu1_explorer.widgets.base import ExplorerWidget, code_html, escape, figure_html, message_html
from pu1_explorer.widgets.figures import compare_figure, dispatch_table_figure, trace_figure

EXAMPLE = """x = torch.randn(4, 8, device=device, requires_grad=True)
w = torch.randn(3, 8, device=device)
y = torch.nn.functional.linear(x, w).relu().sum()
y.backward()"""


def hop_details(recorded: Trace, index: int) -> str:
    """One hop as HTML: operator, schema, key, kind, provenance, inputs."""
    if not recorded.hops:
        return ""
    hop = recorded.hops[max(0, min(index, len(recorded.hops) - 1))]
    try:
        import torch

        base, _, overload = hop.operator.split("::", 1)[1].partition(".")
        schema = str(getattr(getattr(torch.ops.aten, base), overload or "default")._schema)
    except Exception:  # a non-aten operator: no schema to show
        schema = hop.operator
    inputs = "".join(f"<li>{escape(t.shape)} {escape(t.dtype)} on {escape(t.device)}</li>" for t in hop.inputs)
    children = recorded.children(hop.index)
    return (f"<b>hop {hop.index}</b>: <code>{escape(schema)}</code><br>"
            f"key <b>{escape(hop.key)}</b>, kernel <b>{escape(hop.kind)}</b>, {escape(hop.phase)}, depth {hop.depth}"
            + (" (fallthrough: skipped)" if hop.skipped else f", {hop.duration_ns / 1e3:.1f} µs")
            + (f"<br>registered at <code>{escape(hop.provenance)}</code>" if hop.provenance else "")
            + (f"<br>inputs:<ul>{inputs}</ul>" if inputs else "<br>")
            + (f"calls {len(children)} hop(s): " + ", ".join(escape(f"{c.operator}@{c.key}") for c in children[:8])
               if children else "")
            + (f"<br><b>error:</b> {escape(hop.error)}" if hop.error else ""))


class DispatchVisualizer(ExplorerWidget):
    """Run code under the tracer and draw its path through the dispatcher.

    `DispatchVisualizer(code, device="sim", compare_with="cpu")` traces the code (which
    sees `torch` and `device`) on each device and draws one lane per dispatch key.
    `device` defaults to the loaded PrivateUse1 backend (cpu if none is loaded); a
    device `:index` ("sim:1") is kept.
    A callable can be given instead of code. Code that raises shows its error and the
    hops up to it; code that runs past `timeout` seconds is stopped.
    """

    def __init__(self, code: str | Callable[[], object] = EXAMPLE, device: str | None = None,
                 compare_with: str | None = "cpu", timeout: float = 10.0, max_hops: int = 5000) -> None:
        self.function = code if callable(code) else None
        self.timeout = timeout
        self.max_hops = max_hops
        self.traces: list[Trace] = []
        self.code = ipywidgets.Textarea(value=EXAMPLE if callable(code) else code, rows=6,
                                        layout={"width": "100%"}, description="code",
                                        disabled=callable(code))
        device = check_device(device) if device is not None else (privateuse1_backend() or "cpu")
        choices = list(dict.fromkeys([device, *(name for name in known_devices() if name != "meta")]))
        self.device = ipywidgets.Dropdown(options=choices, value=device, description="device")
        self.compare = ipywidgets.Checkbox(value=compare_with is not None, description="compare with cpu")
        self.run_button = ipywidgets.Button(description="Trace", button_style="primary", icon="play")
        self.hop = ipywidgets.IntSlider(value=0, min=0, max=0, description="hop", continuous_update=False,
                                        layout={"width": "60%"})
        self.status = ipywidgets.HTML()
        self.details = ipywidgets.HTML()
        self.output = ipywidgets.Output()
        self.run_button.on_click(lambda _: self.run())
        self.hop.observe(lambda change: self._show_details(), names="value")
        super().__init__([self.code, ipywidgets.HBox([self.device, self.compare, self.run_button]), self.status,
                          self.output, self.hop, self.details])
        self.run()

    def run(self) -> list[Trace]:
        """Trace the code on the chosen device(s) and redraw; returns the traces."""
        devices = [self.device.value] + (["cpu"] if self.compare.value and self.device.value != "cpu" else [])
        target = self.function or self.code.value
        self.status.value = message_html(f"tracing on {', '.join(devices)} …")
        self.traces = [run_traced(target, device, timeout=self.timeout) for device in devices]
        errors = [f"on {t.device}: {t.error}" for t in self.traces if t.error]
        hops = len(self.traces[0].hops)
        summary = f"{hops} hops on {self.traces[0].device}" + (
            f", {len(self.traces[1].hops)} on {self.traces[1].device}" if len(self.traces) > 1 else "")
        if hops > self.max_hops:
            summary += f" (drawing the first {self.max_hops})"
        self.status.value = (message_html("\n".join(errors) + f"\n{summary} up to the error", "error") if errors
                             else message_html(summary, "ok"))
        self.hop.max = max(0, hops - 1)
        self.show_figure(self.output, self.figure())
        self._show_details()
        return self.traces

    def figure(self):
        if len(self.traces) > 1:
            return compare_figure(self.traces, [f"on {t.device}" for t in self.traces], max_hops=self.max_hops)
        return trace_figure(self.traces[0], max_hops=self.max_hops)

    def _show_details(self) -> None:
        self.details.value = hop_details(self.traces[0], self.hop.value) if self.traces else ""

    def static_html(self) -> str:
        code = "" if self.function else code_html(self.code.value.strip())
        errors = "".join(message_html(f"on {t.device}: {t.error}", "error") for t in self.traces if t.error)
        return f"<div class='explorer-widget'>{code}{errors}{figure_html(self.figure())}</div>"


class DispatchTable(ExplorerWidget):
    """Pick an operator and see its computed dispatch table for several backends side by side."""

    def __init__(self, operator: str = "add.Tensor", backends: Sequence[str] | None = None) -> None:
        """`backends` defaults to CPU, the loaded PrivateUse1 backend (if any) and Meta."""
        self.backends = tuple(backends) if backends else ("CPU", *filter(None, [privateuse1_backend()]), "Meta")
        self.operator = ipywidgets.Combobox(value=operator, options=all_operators(), ensure_option=False,
                                            description="operator", placeholder="e.g. add.Tensor",
                                            layout={"width": "50%"})
        self.show_button = ipywidgets.Button(description="Show", icon="table")
        self.status = ipywidgets.HTML()
        self.output = ipywidgets.Output()
        self.tables: dict = {}
        self.show_button.on_click(lambda _: self.show())
        self.operator.observe(lambda change: self.show(), names="value")
        super().__init__([ipywidgets.HBox([self.operator, self.show_button]), self.status, self.output])
        self.show()

    def show(self) -> dict:
        try:
            resolved = resolve_operator(self.operator.value)
            self.tables = backend_tables(resolved, self.backends)
        except (UnknownOperatorError, ValueError) as error:
            self.status.value = message_html(str(error), "error")
            return self.tables
        self.resolved = resolved
        self.status.value = message_html(f"{resolved}: hover a cell for where its kernel was registered")
        self.show_figure(self.output, self.figure())
        return self.tables

    def figure(self):
        return dispatch_table_figure(self.tables, title=f"{self.resolved}: computed entries by role")

    def static_html(self) -> str:
        return f"<div class='explorer-widget'>{figure_html(self.figure())}</div>" if self.tables else self.status.value
