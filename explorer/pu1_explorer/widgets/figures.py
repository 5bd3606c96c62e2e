"""Plotly pictures of the engine's data: traces, dispatch tables, coverage, fallbacks and memory.

Each function takes the engine's plain data and returns a `plotly.graph_objects.Figure`;
all interactivity is plotly's own (hover, zoom, buttons), so the pictures keep
working in a saved notebook or a static page with no kernel.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pu1_explorer.op_coverage import STATUS_ORDER, CoverageSnapshot
from pu1_explorer.dispatch_tables import KERNEL_KINDS, KIND_DESCRIPTIONS, KernelEntry
from pu1_explorer.keyset import Bit, KeySetPicture
from pu1_explorer.pages import KIND_COLOURS
from pu1_explorer.profile import TimelineSpan
from pu1_explorer.tracer import Hop, Trace, key_priority

HOST_KEY = "CPU"


def lane_order(keys: Sequence[str], backend_key: str = "PrivateUse1") -> list[str]:
    """Dispatch keys in the order the dispatcher tries them; the host CPU lane goes right after the backend."""
    priority = {name: rank for rank, name in enumerate(key_priority())}
    ordered = sorted(set(keys), key=lambda name: priority.get(name, len(priority)))
    if HOST_KEY in ordered and backend_key in ordered:
        ordered.remove(HOST_KEY)
        ordered.insert(ordered.index(backend_key) + 1, HOST_KEY)
    return ordered


def _hop_text(hop: Hop) -> str:
    shapes = "<br>".join(f"  {t.shape} {t.dtype.removeprefix('torch.')} {t.device}" for t in hop.inputs[:6])
    timing = "skipped (fallthrough)" if hop.skipped else f"{hop.duration_ns / 1e3:.1f} µs"
    return (f"<b>{hop.operator}</b><br>key: {hop.key}<br>kernel: {hop.kind}<br>{timing}, {hop.phase}, depth {hop.depth}"
            + (f"<br>registered at: {hop.provenance[-70:]}" if hop.provenance else "")
            + (f"<br>inputs:<br>{shapes}" if shapes else "") + (f"<br><b>error:</b> {hop.error}" if hop.error else ""))


def _marker_size(hops: int) -> float:
    """Markers as large as the content column allows for this many hops."""
    return max(6.0, min(14.0, 900 / max(hops, 1)))


# plotly express's own threshold for drawing a scatter with WebGL (render_mode="auto")
WEBGL_ABOVE_HOPS = 1000


def _add_trace_panel(figure: go.Figure, recorded: Trace, row: int, max_hops: int) -> list[str]:
    """Draw one trace into `figure`; returns the visibility group of every plotly trace added."""
    hops = recorded.hops[:max_hops]
    lanes = lane_order([hop.key for hop in hops])
    position = {hop.index: step for step, hop in enumerate(hops)}
    size = _marker_size(len(hops))
    # SVG markers draw at once and need no WebGL context; only a long trace needs WebGL to stay responsive
    points = go.Scattergl if len(hops) > WEBGL_ABOVE_HOPS else go.Scatter
    groups: list[str] = []
    edges_x: list = []
    edges_y: list = []
    for hop in hops:
        if hop.parent is not None and hop.parent in position:
            parent = recorded.hops[hop.parent]
            edges_x += [position[parent.index], position[hop.index], None]
            edges_y += [parent.key, hop.key, None]
    figure.add_trace(points(x=edges_x, y=edges_y, mode="lines", line={"color": "#cfd8dc", "width": 1},
                            hoverinfo="skip", showlegend=False, name="calls"), row=row, col=1)
    groups.append("edges")
    buckets: dict[tuple[str, str], list[Hop]] = defaultdict(list)
    for hop in hops:
        category = "skipped" if hop.skipped else ("top" if hop.depth == 0 else "nested")
        buckets[(hop.kind, category)].append(hop)
    for (kind, category), members in sorted(buckets.items(), key=lambda item: KERNEL_KINDS.index(item[0][0])):
        figure.add_trace(points(
            x=[position[hop.index] for hop in members], y=[hop.key for hop in members], mode="markers",
            marker={"color": KIND_COLOURS[kind], "size": size if category == "top" else size * 0.75,
                    "symbol": ["diamond" if hop.phase == "backward" else "square" for hop in members],
                    "line": {"width": 1, "color": "#37474f" if category == "top" else "white"}},
            name=kind, showlegend=False,
            hovertext=[_hop_text(hop) for hop in members], hoverinfo="text"), row=row, col=1)
        groups.append(category)
    backward = [position[hop.index] for hop in hops if hop.phase == "backward"]
    if backward:
        figure.add_vrect(x0=min(backward) - 0.5, x1=max(backward) + 0.5, fillcolor=BACKWARD_SHADE, opacity=0.5,
                         line_width=0, layer="below", row=row, col=1)
    figure.update_yaxes(categoryorder="array", categoryarray=lanes[::-1], automargin=True, row=row, col=1)
    figure.update_xaxes(title_text="hop, in the order the dispatcher reached it", row=row, col=1)
    return groups


BACKWARD_SHADE = "#ffe0b2"


def _add_legend(figure: go.Figure, traces: Sequence[Trace], max_hops: int) -> list[str]:
    """Legend entries of their own, so that hiding hops never hides what the remaining markers mean."""
    hops = [hop for recorded in traces for hop in recorded.hops[:max_hops]]
    kinds = sorted({hop.kind for hop in hops}, key=KERNEL_KINDS.index)
    for kind in kinds:
        figure.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=kind.replace("_", " "),
                                    marker={"color": KIND_COLOURS[kind], "symbol": "square", "size": 11}))
    if any(hop.phase == "backward" for hop in hops):
        figure.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name="backward pass (shaded, ◆)",
                                    marker={"color": BACKWARD_SHADE, "symbol": "square", "size": 14}))
        kinds.append("backward")
    return ["legend"] * len(kinds)


def _toggle_buttons(groups: list[str], top_margin: int, plot_height: int) -> list[dict]:
    """Buttons that hide hops, placed between the title and the first panel (never on a panel's title)."""
    def visible(hidden: set[str]) -> list[bool]:
        return [group not in hidden for group in groups]

    return [{"type": "buttons", "direction": "right", "x": 0, "xanchor": "left", "yanchor": "top",
             "y": 1 + (top_margin - 36) / plot_height, "showactive": True, "pad": {"t": 0, "b": 0},
             "buttons": [
                 {"label": "all hops", "method": "restyle", "args": [{"visible": visible(set())}]},
                 {"label": "hide fallthroughs", "method": "restyle", "args": [{"visible": visible({"skipped"})}]},
                 {"label": "collapse decompositions", "method": "restyle",
                  "args": [{"visible": visible({"nested", "skipped", "edges"})}]},
             ]}]


def _finish_trace_layout(figure: go.Figure, groups: list[str], title: str, height: int, top_margin: int) -> None:
    """Title, then the buttons, then the panels; the legend in a row of its own under the x axis's title."""
    bottom = 110
    plot_height = height - top_margin - bottom
    figure.update_layout(title={"text": title, "y": 1, "yanchor": "top", "pad": {"t": 12}}, height=height,
                         updatemenus=_toggle_buttons(groups, top_margin, plot_height),
                         margin={"t": top_margin, "b": bottom, "l": 10, "r": 10}, hovermode="closest",
                         legend={"orientation": "h", "y": -62 / plot_height, "yanchor": "top", "x": 0})


def trace_figure(recorded: Trace, title: str | None = None, max_hops: int = 20_000) -> go.Figure:
    """The path of a trace through the dispatcher: one lane per key, hops in sequence, colour by kernel kind.

    Squares are forward hops, diamonds backward ones; framed markers are top-level calls,
    grey lines join a hop to the hops it called. The buttons hide fallthroughs or show
    only the top-level calls; hovering a hop shows its details.
    """
    figure = make_subplots(rows=1, cols=1)
    groups = _add_trace_panel(figure, recorded, 1, max_hops) + _add_legend(figure, [recorded], max_hops)
    lanes = len({hop.key for hop in recorded.hops[:max_hops]})
    _finish_trace_layout(figure, groups, title or f"Dispatcher trace on {recorded.device} ({len(recorded.hops)} hops)",
                         height=290 + 42 * max(lanes, 3), top_margin=90)
    return figure


def compare_figure(traces: Sequence[Trace], titles: Sequence[str] | None = None, max_hops: int = 20_000,
                   title: str = "The same code on different devices") -> go.Figure:
    """Several traces stacked (the same code on cpu and on sim, say), sharing the toggle buttons."""
    titles = list(titles or [f"on {recorded.device}" for recorded in traces])
    lanes = [len({hop.key for hop in recorded.hops[:max_hops]}) for recorded in traces]
    figure = make_subplots(rows=len(traces), cols=1, subplot_titles=titles, vertical_spacing=0.16,
                           row_heights=[max(n, 3) for n in lanes])
    groups: list[str] = []
    for row, recorded in enumerate(traces, start=1):
        groups += _add_trace_panel(figure, recorded, row, max_hops)
        if row < len(traces):
            figure.update_xaxes(title_text=None, row=row, col=1)
    groups += _add_legend(figure, traces, max_hops)
    _finish_trace_layout(figure, groups, title, height=270 + 46 * sum(max(n, 3) for n in lanes), top_margin=110)
    return figure


def dispatch_table_figure(tables: dict[str, list[KernelEntry]], title: str | None = None) -> go.Figure:
    """A grid of computed entries: one column per operator or backend, one row per key, colour by kind."""
    columns = list(tables)
    keys = list(dict.fromkeys(entry.key for entries in tables.values() for entry in entries))
    kinds = list(KERNEL_KINDS)
    z, text, hover = [], [], []
    for key in keys:
        row_z, row_text, row_hover = [], [], []
        for column in columns:
            entry = next((e for e in tables[column] if e.key == key), None)
            kind = entry.kind if entry else "missing"
            row_z.append(kinds.index(kind))
            row_text.append(kind.replace("composite_", "composite ").replace("_", " "))
            row_hover.append(f"<b>{column}</b> @ {key}<br>{kind}: {KIND_DESCRIPTIONS[kind]}"
                             + (f"<br>registered at {entry.provenance}" if entry and entry.provenance else ""))
        z.append(row_z)
        text.append(row_text)
        hover.append(row_hover)
    scale = []
    for index, kind in enumerate(kinds):
        low, high = index / len(kinds), (index + 1) / len(kinds)
        scale += [[low, KIND_COLOURS[kind]], [high, KIND_COLOURS[kind]]]
    figure = go.Figure(go.Heatmap(z=z, x=columns, y=keys, text=text, texttemplate="%{text}", hovertext=hover,
                                  hoverinfo="text", colorscale=scale, zmin=-0.5, zmax=len(kinds) - 0.5,
                                  showscale=False, xgap=3, ygap=3))
    figure.update_layout(title=title or "Computed dispatch table", height=120 + 38 * len(keys),
                         yaxis={"autorange": "reversed"}, xaxis={"side": "top"}, margin={"t": 110})
    return figure


def coverage_treemap(snapshot: CoverageSnapshot, transitive: bool = True, core_only: bool = False) -> go.Figure:
    """Status -> operator family -> overload, sized by overload count."""
    rows = [row for row in snapshot.rows if row.core or not core_only]
    ids, labels, parents, values, colours = ["all"], [f"{snapshot.label}: {len(rows)} overloads"], [""], [len(rows)], ["#ffffff"]
    status_of = (lambda row: row.transitive) if transitive else (lambda row: row.backend)
    by_status: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        by_status[status_of(row)][row.family].append(row.operator)
    for status in STATUS_ORDER:
        families = by_status.get(status)
        if not families:
            continue
        total = sum(len(ops) for ops in families.values())
        ids.append(status)
        labels.append(status)
        parents.append("all")
        values.append(total)
        colours.append(KIND_COLOURS[status])
        for family, operators in sorted(families.items()):
            ids.append(f"{status}/{family}")
            labels.append(family)
            parents.append(status)
            values.append(len(operators))
            colours.append(KIND_COLOURS[status])
    figure = go.Figure(go.Treemap(ids=ids, labels=labels, parents=parents, values=values, branchvalues="total",
                                  marker={"colors": colours}, maxdepth=2,
                                  hovertemplate="%{label}: %{value} overloads<extra></extra>"))
    figure.update_layout(title=f"Coverage of {snapshot.label} by status and operator family"
                               + (" (core ATen)" if core_only else "") + (", transitive" if transitive else ""),
                         height=520, margin={"t": 60, "l": 10, "r": 10, "b": 10})
    return figure


AGAINST_COLOURS = {"own kernel": KIND_COLOURS["kernel"], "through a composite": KIND_COLOURS["composite_implicit"],
                   "CPU fallback": KIND_COLOURS["fallback"], "nothing": KIND_COLOURS["missing"]}


def against_figure(totals: dict[str, dict], title: str | None = None) -> go.Figure:
    """Backends side by side against one device's kernels: a stacked bar per backend, by what it does with each.

    `totals` maps a backend's name to `AgainstReport.totals()` (or the "totals" of `coverage --against … --format
    json`), all against the same device."""
    labels = list(totals)
    device = next(iter(totals.values()))["baseline"] if totals else "cuda"
    figure = go.Figure()
    for status, colour in AGAINST_COLOURS.items():
        figure.add_bar(name=status, y=labels, x=[totals[label]["by_status"][status]["percent"] for label in labels],
                       customdata=[totals[label]["by_status"][status]["count"] for label in labels],
                       orientation="h", marker_color=colour,
                       hovertemplate="%{y}: %{x}% (%{customdata} overloads)<extra>" + status + "</extra>")
    overloads = next(iter(totals.values()))["overloads"] if totals else 0
    name = "the CPU" if device == "cpu" else device.upper()
    figure.update_layout(barmode="stack", title=title or f"What each backend does with {name}'s {overloads} kernels",
                         xaxis_title=f"% of {name}'s kernels", xaxis_range=[0, 100.5], xaxis_dtick=20,
                         yaxis_autorange="reversed",
                         height=160 + 50 * len(labels),
                         legend={"orientation": "h", "y": -0.35, "traceorder": "normal"},
                         margin={"l": 10, "r": 10, "t": 50})
    return figure


def next_kernels_figure(ranked, top: int = 20) -> go.Figure:
    """The first kernels of a `NextKernels` ranking: how many of the models need each, most needed on top."""
    needs = ranked.needs[:top]
    figure = go.Figure(go.Bar(
        x=[len(need.models) for need in needs], y=[need.operator.removeprefix("aten::") for need in needs],
        orientation="h", marker_color=[AGAINST_COLOURS["CPU fallback" if "CPU" in need.today else "nothing"]
                                       for need in needs],
        customdata=[[need.calls, need.today, ranked.needed_by(need)] for need in needs],
        hovertemplate="%{y}: %{x} models, %{customdata[0]} calls; without it: %{customdata[1]}"
                      "<br>needed by %{customdata[2]}<extra></extra>"))
    figure.update_layout(title=f"The kernels {ranked.label} needs next, by how many of {len(ranked.models)} models "
                               "reach them", xaxis_title="models that reach it", yaxis_autorange="reversed",
                         height=max(260, 24 * len(needs) + 120), margin={"l": 10, "r": 10})
    return figure


def fallback_bars(counts: dict[str, int], title: str = "Operators that reached the fallback", top: int = 25) -> go.Figure:
    ranked = sorted(counts.items(), key=lambda item: -item[1])[:top]
    figure = go.Figure(go.Bar(x=[count for _, count in ranked][::-1], y=[name for name, _ in ranked][::-1],
                              orientation="h", marker_color=KIND_COLOURS["fallback"]))
    figure.update_layout(title=title, xaxis_title="calls", height=max(260, 26 * len(ranked) + 120),
                         margin={"l": 10})
    return figure


def memory_figure(samples: Sequence[dict], capacities: dict[int, int] | None = None,
                  device_type: str | None = None) -> go.Figure:
    """Allocated, reserved and peak MiB per device over the samples; devices and measures that stay at zero
    are left out (the subtitle names them), a capacity within reach is a line."""
    import torch

    device_type = device_type or torch.device("privateuseone").type
    figure = go.Figure()
    devices = sorted({sample["device"] for sample in samples})
    dashes = {"allocated": "solid", "reserved": "dot", "peak": "dash"}
    idle = []
    for device in devices:
        series = [sample for sample in samples if sample["device"] == device]
        steps = [sample["step"] for sample in series]
        drawn = 0
        for measure, dash in dashes.items():
            values = [sample[measure] / 2**20 for sample in series]
            if not any(values):
                continue
            drawn += 1
            figure.add_trace(go.Scatter(x=steps, y=values, mode="lines+markers", name=f"{device_type}:{device} {measure}",
                                        line={"dash": dash}))
        if not drawn:
            idle.append(f"{device_type}:{device}")
        peak = max((sample["reserved"] for sample in series), default=0)
        if capacities and device in capacities and peak > 0.05 * capacities[device]:
            figure.add_hline(y=capacities[device] / 2**20, line_dash="longdash", line_color="#c62828",
                             annotation_text=f"{device_type}:{device} capacity")
    notes = []
    if capacities:
        notes.append("capacity " + ", ".join(f"{device_type}:{d} {c / 2**20:,.0f} MiB" for d, c in sorted(capacities.items())))
    if idle:
        notes.append(f"{', '.join(idle)}: nothing allocated")
    title = "Device memory while the workload ran" + (f"<br><sup>{'; '.join(notes)}</sup>" if notes else "")
    figure.update_layout(title=title, xaxis_title="step", yaxis_title="MiB", height=440, margin={"t": 90},
                         legend={"orientation": "h", "y": -0.2, "yanchor": "top", "x": 0})
    return figure


def profile_timeline_figure(spans: Sequence[TimelineSpan], title: str = "What the profiler saw") -> go.Figure:
    """One row per host thread and nesting level and per device: operators on the host, kernels and copies on the
    device, in µs."""
    def row_of(span: TimelineSpan) -> str:
        return f"{span.track}, depth {span.depth}" if span.track.startswith("host") else span.track

    rows: list[str] = []
    for span in spans:
        if row_of(span) not in rows:
            rows.append(row_of(span))
    rows.sort(key=lambda row: (not row.startswith("host"), not row.startswith("host,"), row))
    figure = go.Figure()
    # a bar is at least 1/120 of the profile wide, so that a kernel or copy of a few µs shows (hover: its real time)
    length = max((span.end_us for span in spans), default=0) - min((span.start_us for span in spans), default=0)
    shortest = length / 120
    for kind, colour, legend in (("operator", "#1e88e5", "host operator"), ("kernel", "#2e7d32", "device kernel"),
                                 ("copy", "#ef6c00", "device copy")):
        chosen = [span for span in spans if span.kind == kind]
        if not chosen:
            continue
        figure.add_trace(go.Bar(
            base=[span.start_us for span in chosen],
            x=[max(span.end_us - span.start_us, shortest, 0.5) for span in chosen],
            y=[row_of(span) for span in chosen], orientation="h",
            marker_color=colour, name=legend, text=[span.name for span in chosen], textposition="inside",
            insidetextanchor="middle", textangle=0,
            customdata=[[span.end_us - span.start_us, span.launched_by or "-"] for span in chosen],
            hovertemplate="%{text}<br>%{customdata[0]:.1f} µs<br>launched by %{customdata[1]}<extra></extra>"))
    figure.update_layout(title=title, barmode="overlay", xaxis_title="µs from the start of the profile",
                         yaxis={"categoryorder": "array", "categoryarray": rows[::-1]},
                         height=160 + 48 * len(rows), legend={"orientation": "h", "y": -0.35},
                         uniformtext={"minsize": 9, "mode": "hide"})
    return figure


def bringup_coverage_figure(progress: Sequence, highlight: str | None = None) -> go.Figure:
    """The coverage after each bring-up step (engine: `guide.coverage_by_step`): how ATen overloads resolve on
    the backend key, and how many have a kernel of the backend's own on its Autograd and Autocast keys."""
    labels = [f"{row.number}. {row.step.replace('_', ' ')}" for row in progress]
    figure = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.7, 0.3], vertical_spacing=0.06)
    for status in STATUS_ORDER:
        figure.add_trace(go.Bar(x=labels, y=[row.counts.get(status, 0) for row in progress],
                                name=status.replace("_", " "), marker_color=KIND_COLOURS[status],
                                hovertemplate="%{x}: %{y} overloads<extra>" + status + "</extra>"), row=1, col=1)
    for name, values, colour in (("own Autograd kernel", [row.autograd_kernels for row in progress], "#1e88e5"),
                                 ("own Autocast kernel", [row.autocast_kernels for row in progress], "#8e24aa")):
        figure.add_trace(go.Bar(x=labels, y=values, name=name, marker_color=colour, text=values,
                                textposition="outside", cliponaxis=False,
                                hovertemplate="%{x}: %{y} overloads<extra>" + name + "</extra>"), row=2, col=1)
    if highlight is not None:
        index = [row.step for row in progress].index(highlight)
        for row in (1, 2):
            figure.add_vrect(x0=index - 0.5, x1=index + 0.5, fillcolor="#ffe0b2", opacity=0.6, line_width=0,
                             layer="below", row=row, col=1)
    figure.update_layout(barmode="stack", height=560, margin={"t": 70, "l": 10, "r": 10},
                         title="What each bring-up step adds to the operators sim can run",
                         legend={"orientation": "h", "y": -0.32, "yanchor": "top", "x": 0})
    figure.update_yaxes(title_text="ATen overloads", automargin=True, row=1, col=1)
    figure.update_yaxes(title_text="kernels", automargin=True, row=2, col=1)
    figure.update_xaxes(tickangle=-40, automargin=True, row=2, col=1)
    return figure


KEYSET_STATES = {0: ("unset", "#eceff1"), 1: ("set", "#2e7d32"), 2: ("added by the thread's include set", "#1e88e5"),
                 3: ("removed by the thread's exclude set", "#c62828")}
KEYSET_MARKS = {0: "", 1: "●", 2: "+", 3: "✕"}


def _wrapped(parts: Sequence[str], separator: str, width: int, prefix: str = "") -> str:
    """`prefix` then `parts` joined by `separator`, broken with <br> so that no line is longer than `width`
    characters (unless a single part is)."""
    lines = [prefix]
    for part in parts:
        candidate = lines[-1] + (separator if lines[-1] != prefix else "") + part
        if lines[-1] and lines[-1] != prefix and len(candidate) > width:
            lines[-1] += separator.rstrip()
            lines.append(part)
        else:
            lines[-1] = candidate
    return "<br>".join(lines)


def key_set_figure(picture: KeySetPicture, title: str | None = None) -> go.Figure:
    """A key set (engine: `keyset.key_set()`) as functionality bits × backend bits, then the other functionality
    bits it touches; green is set, blue added by the thread's include set, red (✕) removed by its exclude set."""
    def state(bit: Bit) -> int:
        return 3 if bit.excluded else 2 if bit.included else 1 if bit.in_tensor else 0

    def mark(value: int, key: str) -> str:
        return "1st" if value in (1, 2) and key == picture.first_key else KEYSET_MARKS[value]

    backends = picture.backend_bits
    columns = [f"{bit.name} ({picture.device_name})" if bit.name == "PrivateUse1" else bit.name for bit in backends]
    functionality = {bit.name: bit for bit in picture.functionality_bits}
    runtime = {(key.functionality, key.backend): key.name for key in picture.runtime_keys}
    first_backend, last_backend = backends[0].index, backends[-1].index
    rows = [f"backend bit ({first_backend}–{last_backend})"] + [f"{name} (bit {functionality[name].index})"
                                                               for name in picture.per_backend]
    z, text, hover = [], [], []
    for row, name in zip(rows, [None] + picture.per_backend):
        z_row, text_row, hover_row = [], [], []
        for bit in backends:
            if name is None:
                value, key, where = state(bit), bit.name, f"backend bit {bit.index}"
                z_row.append(value)
                text_row.append(KEYSET_MARKS[value])
            else:
                f = functionality[name]
                has_backend = bit.in_tensor or bit.included
                value = 0 if not has_backend or not (f.in_tensor or f.included) else state(f) if not bit.included else 2
                key, where = runtime.get((name, bit.name), f"{name} × {bit.name}"), f"bits {f.index} and {bit.index}"
                z_row.append(value)
                text_row.append(mark(value, key))
            hover_row.append(f"<b>{key}</b> ({where})<br>{KEYSET_STATES[value][0]}"
                             + ("<br>dispatch starts here" if text_row[-1] == "1st" else ""))
        z.append(z_row)
        text.append(text_row)
        hover.append(hover_row)
    others = [bit for bit in picture.functionality_bits
              if bit.name not in picture.per_backend and (bit.in_tensor or bit.included or bit.excluded)]
    scale = []
    for value, (_, colour) in KEYSET_STATES.items():
        scale += [[value / 4, colour], [(value + 1) / 4, colour]]
    figure = make_subplots(rows=2, cols=1, row_heights=[len(rows), max(len(others), 1)], vertical_spacing=0.1,
                           subplot_titles=["", "the other functionality bits it touches"])
    figure.add_trace(go.Heatmap(z=z, x=columns, y=rows, text=text, texttemplate="%{text}", hovertext=hover,
                                hoverinfo="text", colorscale=scale, zmin=-0.5, zmax=3.5, showscale=False,
                                xgap=2, ygap=2, textfont={"size": 10}, name="backend × per-backend bits"),
                     row=1, col=1)
    strip_text = [[KEYSET_STATES[state(bit)][0] + (", dispatch starts here" if bit.name == picture.first_key else "")]
                  for bit in others]
    figure.add_trace(go.Heatmap(z=[[state(bit)] for bit in others] or [[0]], x=["bit"],
                                y=[f"{bit.name} (bit {bit.index})" for bit in others] or ["none"],
                                text=strip_text or [["no other bit is set"]], texttemplate="%{text}",
                                hovertext=strip_text or [[""]], hoverinfo="text", colorscale=scale, zmin=-0.5,
                                zmax=3.5, showscale=False, xgap=2, ygap=2, name="other functionality bits"),
                     row=2, col=1)
    for value, (meaning, colour) in list(KEYSET_STATES.items())[1:]:
        figure.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=meaning,
                                    marker={"symbol": "square", "size": 12, "color": colour}))
    unset = sum(1 for bit in picture.functionality_bits if bit.name not in picture.per_backend) - len(others)
    order = _wrapped(picture.keys or ["nothing: the set is empty"], " › ", 90, "tried in this order: ")
    combined = _wrapped([f"{key.functionality} × {key.backend} = {key.name}" for key in picture.runtime_keys
                         if key.effective] or ["none"], ", ", 90, "grid cells that are runtime keys: ")
    subtitle = (f"{order}<br>{combined}<br>{len(backends)} backend bits, {len(picture.functionality_bits)} "
                f"functionality bits; {unset} unset ones are not drawn")
    lines = 1 + subtitle.count("<br>")
    top = 128 + 16 * lines
    figure.update_layout(
        title={"text": f"{title or picture.label}: dispatch starts at {picture.first_key}"
                       f"<br><span style='font-size:11px'>{subtitle}</span>",
               "x": 0, "xref": "container", "y": 1, "yanchor": "top", "pad": {"t": 10, "l": 10},
               "font": {"size": 14}},
        height=top + 150 + 28 * (len(rows) + max(len(others), 1)), margin={"t": top, "l": 10, "r": 24, "b": 60},
        legend={"orientation": "h", "y": -0.06, "yanchor": "top", "x": 0}, plot_bgcolor="white")
    figure.update_xaxes(tickangle=-50, side="top", tickmode="array", tickvals=columns,
                        ticktext=[(f"<b>{bit.index} {column}</b>" if bit.name == "PrivateUse1"
                                   else f"{bit.index} {column}") for bit, column in zip(backends, columns)],
                        tickfont={"size": 11}, row=1, col=1)
    figure.update_xaxes(showticklabels=False, row=2, col=1)
    figure.update_yaxes(autorange="reversed", automargin=True, tickfont={"size": 11})
    figure.update_annotations(font_size=12)
    return figure


def scorecard_figure(cards: Sequence, title: str = "Conformance: every probe on every device",
                     steps: dict[str, str] | None = None) -> go.Figure:
    """A square per probe and device, coloured by the probe's status; hover for its one-line finding.

    `cards` are `pu1_explorer.conformance.Scorecard`s; probes keep the order of the first card that ran them.
    `steps` (probe name -> "N. title", from `pu1_explorer.conformance.probe_steps(guide)`) adds each probe's
    guide step to its hover text.
    """
    from pu1_explorer.conformance import STATUSES
    from pu1_explorer.pages import STATUS_COLOURS

    steps = steps or {}
    names: list[str] = []
    for card in cards:
        names += [probe.name for probe in card.probes if probe.name not in names]
    figure = go.Figure()
    for status in STATUSES:
        points = [(card.device, probe.name, probe.detail) for card in cards for probe in card.probes
                  if probe.status == status]
        if not points:
            continue
        figure.add_trace(go.Scatter(
            x=[device for device, _, _ in points], y=[name for _, name, _ in points], mode="markers", name=status,
            customdata=[(f"step {steps[name]}: " if name in steps else "") + detail for _, name, detail in points],
            marker={"symbol": "square", "size": 22, "color": STATUS_COLOURS[status]},
            hovertemplate="%{y} on %{x}: " + status + "<br>%{customdata}<extra></extra>"))
    figure.update_layout(title=title, height=max(320, 26 * len(names) + 150), margin={"l": 170, "t": 60},
                         xaxis={"type": "category", "side": "top", "title": None},
                         yaxis={"type": "category", "categoryorder": "array", "categoryarray": names[::-1],
                                "title": None},
                         legend={"orientation": "h", "y": -0.04, "yanchor": "top", "x": 0})
    return figure
