"""ScorecardView: one or several conformance scorecards side by side, a row per probe, a column per device."""
from __future__ import annotations

from typing import Sequence

import ipywidgets

from pu1_explorer.scorecard import STATUS_COLOURS, STATUSES, ProbeResult, Scorecard
from pu1_explorer.widgets.base import ExplorerWidget, escape, figure_html
from pu1_explorer.widgets.figures import scorecard_figure


_TD = "padding:.25em .5em;vertical-align:top;border-bottom:1px solid #ddd"


def _cell(result: ProbeResult | None) -> str:
    if result is None:
        return "<td style='color:#999'>not run</td>"
    colour = STATUS_COLOURS.get(result.status, "#555")
    return (f"<td style='{_TD};border-left:4px solid {colour}' title='{escape(result.detail)}'>"
            f"<span style='display:inline-block;background:{colour};color:#fff;border-radius:3px;padding:0 .4em;"
            f"font-size:.85em;white-space:nowrap'>{escape(result.status)}</span> "
            f"<span style='font-size:.85em'>{escape(result.detail)}</span></td>")


def _problem_ops(result: ProbeResult | None) -> str:
    if result is None or not result.ops:
        return ""
    problems = [op for op in result.ops if op.status not in ("passed", "skipped")]
    if not problems:
        return ""
    items = "".join(f"<li><code>{escape(op.name)}</code> {escape(op.status)}: {escape(op.detail)}</li>"
                    for op in problems)
    return f"<details><summary>{len(problems)} operators with problems</summary><ul>{items}</ul></details>"


class ScorecardView(ExplorerWidget):
    """`ScorecardView(card)` or `ScorecardView([card_a, card_b])`: the probes of each scorecard (from
    `pu1_explorer.scorecard`) in a table, a column per device, every cell coloured by status."""

    def __init__(self, card_or_cards: Scorecard | Sequence[Scorecard], *, problems_only: bool = False) -> None:
        cards = [card_or_cards] if isinstance(card_or_cards, Scorecard) else list(card_or_cards)
        if not cards:
            raise ValueError("ScorecardView needs at least one scorecard")
        self.cards = cards
        self.problems_only = ipywidgets.Checkbox(value=problems_only, description="only probes that did not pass")
        self.output = ipywidgets.HTML(self.table_html())
        self.picture = ipywidgets.Output()
        self.problems_only.observe(lambda change: self.redraw(), names="value")
        super().__init__([self.picture, self.problems_only, self.output])
        self.show_figure(self.picture, self.figure())

    def figure(self):
        """The probes of every scorecard as a grid of squares coloured by status."""
        return scorecard_figure(self.cards)

    def redraw(self) -> None:
        """Draw the table again with the current filter."""
        self.output.value = self.table_html()

    def static_html(self) -> str:
        """The figure and the table as HTML that needs no kernel."""
        return f"<div class='explorer-widget'>{figure_html(self.figure())}{self.table_html()}</div>"

    def table_html(self) -> str:
        """The table of probes, a column per device."""
        names: list[str] = []
        capability: dict[str, str] = {}
        for card in self.cards:
            for probe in card.probes:
                if probe.name not in capability:
                    names.append(probe.name)
                    capability[probe.name] = probe.capability
        lookup = [{probe.name: probe for probe in card.probes} for card in self.cards]
        only_problems = getattr(getattr(self, "problems_only", None), "value", False)
        if only_problems:
            names = [name for name in names if any(name in found and found[name].status != "passed"
                                                   for found in lookup)]
        header = "".join(f"<th>{escape(card.device)}</th>" for card in self.cards)
        summaries = "".join(
            f"<td style='{_TD};font-size:.85em'>" + ", ".join(
                f"<span style='color:{STATUS_COLOURS[status]}'>{count} {status}</span>"
                for status, count in card.summary().items() if count) +
            f"<br>{card.seconds:.0f} s, torch {escape(card.torch_version)}, OpInfo {escape(card.opinfo)}</td>"
            for card in self.cards)
        rows = "".join(
            f"<tr><td style='{_TD}'><b>{escape(name)}</b><br>"
            f"<span style='font-size:.8em;color:#757575'>step {escape(capability[name])}</span></td>"
            + "".join(_cell(found.get(name)).replace("</td>", _problem_ops(found.get(name)) + "</td>", 1)
                      for found in lookup) + "</tr>"
            for name in names)
        legend = " ".join(f"<span style='color:{STATUS_COLOURS[status]}'>&#9632; {status}</span>"
                          for status in STATUSES)
        return ("<div class='explorer-widget explorer-scorecard' style='overflow-x:auto'>"
                f"<p style='font-size:.85em'>{legend}</p>"
                "<table style='border-collapse:collapse;font-size:.9em;width:100%;table-layout:fixed;"
                "overflow-wrap:anywhere'>"
                f"<colgroup><col style='width:9.5em'>{'<col>' * len(self.cards)}</colgroup>"
                f"<thead><tr><th>probe</th>{header}</tr>"
                f"<tr><td><i>summary</i></td>{summaries}</tr></thead>"
                f"<tbody>{rows}</tbody></table></div>")
