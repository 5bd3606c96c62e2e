"""CoverageExplorer: a backend's operator coverage as a picture, a searchable table, drill-down and diffs."""
from __future__ import annotations

import ipywidgets

from pu1_explorer.baselines import BASELINE_KEYS, against, baseline
from pu1_explorer.devices import backend_key, check_device
from pu1_explorer.op_coverage import STATUS_ORDER, CoverageSnapshot, ForeignSnapshotError, coverage, diff
from pu1_explorer.dispatch_tables import FALLTHROUGH
from pu1_explorer.widgets.base import ExplorerWidget, escape, figure_html, message_html
from pu1_explorer.widgets.figures import coverage_treemap, dispatch_table_figure

TABLE_ROWS = 200


def rows_table(rows, limit: int = TABLE_ROWS, cuda_kernels: frozenset[str] = frozenset()) -> str:
    """Coverage rows as an HTML table (the first `limit`), with whether CUDA has a kernel for each."""
    body = "".join(
        f"<tr><td><code style='white-space:nowrap'>{escape(row.operator)}</code></td><td>{escape(row.backend)}</td>"
        f"<td>{escape(row.transitive)}</td><td>{escape(row.autograd)}</td><td>{escape(row.autocast)}</td>"
        f"<td>{'kernel' if row.operator in cuda_kernels else ''}</td>"
        f"<td>{'core' if row.core else ''}</td></tr>" for row in rows[:limit])
    more = f"<p>… and {len(rows) - limit} more</p>" if len(rows) > limit else ""
    # content-visibility: a browser lays out a table of thousands of rows only once it scrolls into view
    return ("<div style='max-height:22em;overflow:auto;content-visibility:auto;contain-intrinsic-block-size:auto 22em'>"
            "<table><thead><tr><th>operator</th><th>backend key</th>"
            "<th>transitive</th><th>autograd key</th><th>autocast key</th><th>CUDA</th><th></th></tr></thead>"
            f"<tbody>{body}</tbody></table></div>{more}")


class CoverageExplorer(ExplorerWidget):
    """Coverage of a backend: `CoverageExplorer(device="sim", compare_with="CPU")` (device: the loaded backend by default).

    A treemap by status and operator family; a table filtered by text, status, core
    ATen, autograd and autocast status, and to the overloads CUDA (or the CPU, or MPS) has a kernel for, with how
    far the backend is from that device; a drill-down into one operator's dispatch
    table; and the difference from another backend or an earlier snapshot.
    """

    def __init__(self, device: str | None = None, snapshot: CoverageSnapshot | None = None,
                 compare_with: str | CoverageSnapshot | None = None) -> None:
        if snapshot is None:
            device = check_device(device)
            snapshot = coverage(backend_key(device), label=device)
        self.snapshot = snapshot
        self.baseline = (coverage(compare_with, label=compare_with) if isinstance(compare_with, str)
                         else compare_with)
        self.search = ipywidgets.Text(description="search", placeholder="part of a name, e.g. conv")
        self.status = ipywidgets.Dropdown(options=["any"] + list(STATUS_ORDER), value="any", description="status")
        self.transitive = ipywidgets.ToggleButtons(options=["direct", "transitive"], value="transitive")
        self.core_only = ipywidgets.Checkbox(description="core ATen only")
        self.autograd = ipywidgets.Dropdown(options=["any", "autograd", "kernel", "composite_implicit", "fallthrough",
                                                     "missing"], value="any", description="autograd")
        self.autocast = ipywidgets.Dropdown(options=["any", "kernel", FALLTHROUGH, "missing"], value="any",
                                            description="autocast")
        self.among = ipywidgets.Dropdown(options=[("every overload", "any")] + [
            (f"{'the CPU' if device == 'cpu' else device.upper()} has a kernel", device) for device in BASELINE_KEYS],
            value="any", description="among")
        self.count = ipywidgets.HTML()
        self.table = ipywidgets.HTML()
        self.drill = ipywidgets.Combobox(options=[row.operator for row in self.snapshot.rows], ensure_option=True,
                                         description="drill down", placeholder="an operator from the table")
        self.drill_output = ipywidgets.Output()
        self.drill_message = ipywidgets.HTML()
        self.picture = ipywidgets.Output()
        self.differences = ipywidgets.HTML()
        self.drilled = None
        for control in (self.search, self.status, self.transitive, self.core_only, self.autograd, self.autocast,
                        self.among):
            control.observe(lambda change: self.refresh(), names="value")
        self.core_only.observe(lambda change: self.show_figure(self.picture, self.figure()), names="value")
        self.drill.observe(lambda change: self.drill_down(change["new"]), names="value")
        filters = ipywidgets.VBox([ipywidgets.HBox([self.search, self.status, self.transitive]),
                                   ipywidgets.HBox([self.core_only, self.autograd, self.autocast]),
                                   self.among])
        super().__init__([self.picture, filters, self.count, self.table, self.drill, self.drill_message,
                          self.drill_output, self.differences])
        self.show_figure(self.picture, self.figure())
        self.refresh()
        self.differences.value = self.diff_html()

    def filtered(self):
        """The rows that match the controls (the engine's filter)."""
        pick = lambda control: None if control.value == "any" else control.value  # noqa: E731
        among = pick(self.among)
        return self.snapshot.filter(status=pick(self.status), core_only=self.core_only.value,
                                    text=self.search.value.strip(), autograd=pick(self.autograd),
                                    autocast=pick(self.autocast), transitive=self.transitive.value == "transitive",
                                    among=baseline(among).operators if among else None)

    def refresh(self) -> None:
        rows = self.filtered()
        headline = ""
        if self.among.value != "any":
            headline = f"<br>{escape(against(self.snapshot, self.among.value).headline(self.core_only.value))}."
        self.count.value = f"<b>{len(rows)}</b> of {len(self.snapshot.rows)} overloads match{headline}"
        self.table.value = rows_table(rows, cuda_kernels=baseline("cuda").operators)

    def figure(self):
        return coverage_treemap(self.snapshot, core_only=self.core_only.value)

    def drill_down(self, operator: str):
        """Draw one operator's dispatch table for CPU and this backend, as the snapshot's own process measured it;
        returns the figure (None for an unknown operator, or a snapshot without tables: a message says why)."""
        if operator not in {row.operator for row in self.snapshot.rows}:
            return None
        self.drilled = None
        self.drill_output.clear_output()
        try:
            tables = self.snapshot.operator_tables(operator)
        except ForeignSnapshotError as error:
            self.drill_message.value = message_html(str(error), "error")
            return None
        self.drill_message.value = ""
        self.drilled = dispatch_table_figure(tables, title=f"{operator}: computed entries by role, measured for "
                                                           f"{self.snapshot.label}")
        self.show_figure(self.drill_output, self.drilled)
        return self.drilled

    def diff_html(self) -> str:
        if self.baseline is None:
            return ""
        changes = diff(self.baseline, self.snapshot)
        body = "".join(f"<tr><td><code style='white-space:nowrap'>{escape(c.operator)}</code></td><td>{escape(c.before)}</td>"
                       f"<td>{escape(c.after)}</td></tr>" for c in changes[:TABLE_ROWS])
        return (f"<h4>{len(changes)} overloads differ from {escape(self.baseline.label)}</h4>"
                "<div style='max-height:18em;overflow:auto'><table><thead><tr><th>operator</th>"
                f"<th>{escape(self.baseline.label)}</th><th>{escape(self.snapshot.label)}</th></tr></thead>"
                f"<tbody>{body}</tbody></table></div>")

    def static_html(self) -> str:
        summary = self.snapshot.summary()
        rows = self.snapshot.rows
        # A page without a kernel still searches: a few lines of the page's own JavaScript filter the table.
        search = ("<input type='search' placeholder='search the overloads, e.g. conv or fallback' "
                  "style='width:100%;box-sizing:border-box;padding:.4em;margin:.6em 0;border:1px solid #9e9e9e;border-radius:4px' "
                  "oninput=\"var words=this.value.toLowerCase().split(/\\s+/).filter(Boolean);"
                  "var table=this.parentNode.querySelector('tbody');var shown=0;"
                  "table.querySelectorAll('tr').forEach(function(row){var text=row.textContent.toLowerCase();"
                  "var match=words.every(function(word){return text.indexOf(word)>=0});"
                  "row.style.display=match?'':'none';shown+=match});"
                  "this.parentNode.querySelector('.matches').textContent=shown\">")
        return (f"<div class='explorer-widget coverage'>{figure_html(self.figure())}"
                f"<p>{summary['without_fallback_percent']}% of {summary['operators']} overloads run without the "
                f"fallback; {escape(against(self.snapshot, 'cuda').headline())}. All of them, searchable "
                f"(<b class='matches'>{len(rows)}</b> shown):</p>{search}"
                f"{rows_table(rows, limit=len(rows), cuda_kernels=baseline('cuda').operators)}{self.diff_html()}</div>")
