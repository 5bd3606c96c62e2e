"""Pictures of captured graphs: the kernels in replay order with the tensors they touch, and replay against eager.

>>> from pu1_explorer.graphs import dump_graph
>>> from pu1_explorer.widgets import graph_figure, replay_comparison_figure
>>> graph_figure(dump_graph(graph))                          # kernels as rows, tensors as columns
>>> replay_comparison_figure(compare_replay_with_eager(step, "sim"))  # the hops replay no longer makes
"""
from __future__ import annotations

import os
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pu1_explorer.graphs import GraphDump, GraphKernel, GraphTensor, ReplayComparison, read_graph_dump

# How a kernel touches a tensor: (plotly marker symbol, colour, legend text).
ACCESS_MARKS = {
    "read": ("circle-open", "#1e88e5", "reads"),
    "write": ("square", "#ef6c00", "writes"),
    "read and write": ("diamond", "#8e24aa", "reads and writes (in place)"),
}
EAGER_COLOUR, REPLAY_COLOUR = "#90a4ae", "#2e7d32"


def _wrapped_title(text: str, width: int = 46) -> tuple[str, int]:
    """A title broken into lines of about `width` characters (plotly never wraps one: on a phone it runs off the
    figure), and the height in pixels it takes."""
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "<br>".join(lines), 24 * len(lines) + 14


def _access(kernel: GraphKernel, tensor: GraphTensor) -> str | None:
    reads = any(t.id == tensor.id for t in kernel.reads)
    writes = any(t.id == tensor.id for t in kernel.writes)
    return "read and write" if reads and writes else "read" if reads else "write" if writes else None


def _kernel_label(kernel: GraphKernel) -> str:
    return f"{kernel.index}. {kernel.operator.removeprefix('aten::')}"


def graph_figure(graph: GraphDump | str | os.PathLike, title: str | None = None, max_kernels: int = 300,
                 shapes_in_labels: bool | None = None) -> go.Figure:
    """A captured graph as a grid: one row per kernel in replay order (top to bottom), one column per tensor in the
    order the kernels first touch it, a mark where a kernel reads (○), writes (■) or updates in place (◆) a tensor.
    `graph` is a `GraphDump` or the path of a `debug_dump` file; hover a mark for the kernel, tensor and address."""
    dump = graph if isinstance(graph, GraphDump) else read_graph_dump(graph)
    kernels = list(dump.kernels[:max_kernels])
    tensors = [t for t in dump.tensors if any(_access(k, t) for k in kernels)]
    if shapes_in_labels is None:
        shapes_in_labels = len(tensors) <= 16
    columns = {t.id: (t.label if shapes_in_labels else t.id) for t in tensors}
    rows = [_kernel_label(k) for k in kernels]
    figure = go.Figure()
    for access, (symbol, colour, legend) in ACCESS_MARKS.items():
        xs, ys, hover = [], [], []
        for kernel, row in zip(kernels, rows):
            for tensor in tensors:
                if _access(kernel, tensor) == access:
                    xs.append(columns[tensor.id])
                    ys.append(row)
                    hover.append(f"<b>{kernel.operator}</b><br>kernel: {kernel.kernel or '?'}<br>{legend} "
                                 f"{tensor.label}<br>address: {tensor.address or '?'}")
        figure.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=legend, hovertext=hover, hoverinfo="text",
                                    marker={"symbol": symbol, "color": colour, "size": 11,
                                            "line": {"width": 2, "color": colour}}))
    shown = f"{len(kernels)} of {len(dump.kernels)}" if len(kernels) < len(dump.kernels) else f"{len(kernels)}"
    heading, title_height = _wrapped_title(title or f"The graph captured on {dump.device}: {shown} kernels, "
                                                    f"{len(tensors)} tensors")
    top = title_height + 100  # the title, then the legend (up to three rows on a phone), then the plot
    height = max(360, top + 110 + 24 * len(kernels))
    figure.update_layout(
        title={"text": heading, "x": 0, "xanchor": "left", "yref": "container",
               "y": 1 - (title_height - 4) / height, "yanchor": "bottom"},
        template="plotly_white", height=height, margin={"l": 10, "r": 10, "t": top, "b": 10}, hovermode="closest",
        legend={"orientation": "h", "x": 0, "xanchor": "left", "yref": "container", "y": 1 - (title_height + 20) / height,
                "yanchor": "top"})
    figure.update_yaxes(categoryorder="array", categoryarray=rows, autorange="reversed", automargin=True,
                        title_text="kernels, in replay order", showgrid=True)
    figure.update_xaxes(categoryorder="array", categoryarray=[columns[t.id] for t in tensors], automargin=True,
                        tickangle=-45 if shapes_in_labels else -90 if len(tensors) > 12 else 0, title_text="tensors",
                        showgrid=True)
    return figure


def replay_comparison_figure(comparison: ReplayComparison, top: int = 15, title: str | None = None) -> go.Figure:
    """The dispatcher's hops of the same code run eagerly and replayed from its graph: per dispatch key (top) and
    per operator (below, the `top` operators with most eager hops), eager in grey, replay in green."""
    keys = sorted(set(comparison.eager_by_key) | set(comparison.replay_by_key),
                  key=lambda key: -comparison.eager_by_key.get(key, 0))
    rows = comparison.rows()[:top]
    operators = [row["operator"].removeprefix("aten::") for row in rows]
    figure = make_subplots(rows=2, cols=1, row_heights=[max(len(keys), 1), max(len(rows), 1)], vertical_spacing=0.12,
                           subplot_titles=("hops per dispatch key", f"hops per operator (top {len(rows)})"))
    for name, colour, by_key, by_operator in (
            ("eager", EAGER_COLOUR, comparison.eager_by_key, [row["eager"] for row in rows]),
            ("graph replay", REPLAY_COLOUR, comparison.replay_by_key, [row["replay"] for row in rows])):
        figure.add_trace(go.Bar(y=keys, x=[by_key.get(key, 0) for key in keys], name=name, orientation="h",
                                marker_color=colour, legendgroup=name, text=[by_key.get(key, 0) for key in keys],
                                textposition="outside", cliponaxis=False), row=1, col=1)
        figure.add_trace(go.Bar(y=operators, x=by_operator, name=name, orientation="h", marker_color=colour,
                                legendgroup=name, showlegend=False), row=2, col=1)
    heading, title_height = _wrapped_title(title or (f"The dispatcher on {comparison.device}: "
                                                     f"{comparison.eager_hops} hops eagerly, {comparison.replay_hops} "
                                                     "in a replay"))
    top = title_height + 100  # the title, the legend (two rows on a phone), the first panel's title
    height = top + 160 + 34 * (len(keys) + len(rows))
    figure.update_layout(barmode="group", template="plotly_white", height=height,
                         title={"text": heading, "x": 0, "xanchor": "left", "yref": "container",
                                "y": 1 - (title_height - 4) / height, "yanchor": "bottom"},
                         margin={"l": 10, "r": 40, "t": top, "b": 10},
                         legend={"orientation": "h", "x": 0, "xanchor": "left", "yref": "container",
                                 "y": 1 - (title_height + 20) / height, "yanchor": "top"})
    figure.update_yaxes(autorange="reversed", automargin=True)
    figure.update_xaxes(title_text="hops", automargin=True, rangemode="tozero")
    return figure


def replay_traces_figure(comparison: ReplayComparison, **keywords: Any) -> go.Figure:
    """The two traces themselves, stacked: every hop of the eager run above the replay's (the explorer's trace
    figure, `compare_figure`)."""
    from pu1_explorer.widgets.figures import compare_figure

    keywords.setdefault("title", f"One run on {comparison.device}, eagerly and replayed from its graph")
    return compare_figure([comparison.eager, comparison.replay],
                          titles=[f"eager: {comparison.eager_hops} hops", f"replay: {comparison.replay_hops} hops"],
                          **keywords)
