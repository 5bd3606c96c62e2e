"""The stream sanitizer's report on a timeline: each stream's operators in the order they ran, each race a line
from the earlier access to the one that nothing ordered after it (engine: `pu1_explorer.sanitizer`)."""
from __future__ import annotations

import plotly.graph_objects as go

from pu1_explorer.sanitizer import SanitizerReport

CALL_COLOUR = "#1e88e5"
RACE_COLOUR = "#c62828"


def _where(line) -> str:
    return f"line {line.line}: {line.text}" if line else "no Python line (autograd's device thread)"


def stream_races_figure(report: SanitizerReport, title: str | None = None) -> go.Figure:
    """One row per stream, one marker per operator call in the order the sanitizer saw them; a red line joins the two
    accesses of each race, from the earlier one to the access nothing ordered after it."""
    position = {call.order: index for index, call in enumerate(report.calls)}
    names = {call.stream: call.stream_name for call in report.calls}
    rows = sorted(set(names.values()), key=lambda name: (name != "the default stream", name))
    figure = go.Figure()
    figure.add_trace(go.Scatter(
        x=list(range(len(report.calls))), y=[call.stream_name for call in report.calls], mode="markers",
        marker={"color": CALL_COLOUR, "size": 9, "symbol": "square"}, name="operator call",
        customdata=[[call.operator, call.reads, call.writes, _where(call.user_line)] for call in report.calls],
        hovertemplate="%{customdata[0]}<br>reads %{customdata[1]}, writes %{customdata[2]}<br>%{customdata[3]}"
                      "<extra></extra>"))
    for number, race in enumerate(report.races, 1):
        ends = (race.previous, race.access)
        figure.add_trace(go.Scatter(
            x=[position.get(end.order) for end in ends], y=[names.get(end.stream, end.stream_name) for end in ends],
            mode="lines+markers", line={"color": RACE_COLOUR, "width": 2},
            marker={"color": RACE_COLOUR, "size": 13, "symbol": ["circle-open", "x"]},
            name="race: the earlier access (○) and the unordered one (✕)", legendgroup="races", showlegend=number == 1,
            customdata=[[end.kind, end.operator, _where(end.user_line)] for end in ends],
            hovertemplate=f"race {number}: " + "%{customdata[0]} by %{customdata[1]}<br>%{customdata[2]}<extra></extra>"))
    found = f"{len(report.races)} race(s)" if report.races else "no race"
    figure.update_layout(
        title=title or f"Stream sanitizer on {report.device}: {found} in {report.operators} operator calls",
        xaxis_title="operator calls, in the order they ran on the host", height=170 + 60 * max(len(rows), 1),
        yaxis={"categoryorder": "array", "categoryarray": rows[::-1], "automargin": True},
        legend={"orientation": "h", "y": -0.3, "yanchor": "top", "x": 0}, margin={"t": 60, "l": 10, "r": 10})
    return figure
