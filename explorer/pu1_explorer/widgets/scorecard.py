"""ScorecardView: one or several conformance scorecards side by side, a row per probe, a column per device."""
from __future__ import annotations

from typing import Iterable, Sequence

import ipywidgets

from pu1_explorer.conformance import GUIDE_URL, STATUSES, GradedStep, ProbeResult, Scorecard, probe_pages, probe_steps
from pu1_explorer.conformance.results import needs_action, problem_ops
from pu1_explorer.pages import STATUS_COLOURS, badge, escape, status_colour
from pu1_explorer.widgets.base import ExplorerWidget, figure_html
from pu1_explorer.widgets.figures import scorecard_figure

_TD = "padding:.25em .5em;vertical-align:top;border-bottom:1px solid #ddd"


def _cell(result: ProbeResult | None, page: str = "") -> str:
    """A probe's cell: its status and finding, what usually causes a failure (with its guide step's `page`), and a
    sweep's operators that did not pass, folded."""
    if result is None:
        return "<td style='color:#999'>not run</td>"
    return (f"<td style='{_TD};border-left:4px solid {status_colour(result.status)}' title='{escape(result.detail)}'>"
            f"{badge(result.status)} <span style='font-size:.85em'>{escape(result.detail)}</span>"
            f"{_next_step(result, page)}{_problem_ops(result)}</td>")


def _next_step(result: ProbeResult, page: str) -> str:
    """For a probe that did not pass: its hint and a link to the guide step's page, in one line."""
    if not needs_action(result) or not (result.hint or page):
        return ""
    cause = f"<b>usual cause:</b> {escape(result.hint)}" if result.hint else ""
    link = f" <a href='{escape(page)}' target='_blank'>guide step &rarr;</a>" if page else ""
    return f"<div style='font-size:.8em;margin-top:.2em'>{cause}{link}</div>"


def _problem_ops(result: ProbeResult) -> str:
    problems = problem_ops(result)
    if not problems:
        return ""
    items = "".join(f"<li><code>{escape(op.name)}</code> {escape(op.status)}: {escape(op.detail)}</li>"
                    for op in problems)
    return f"<details><summary>{len(problems)} operators with problems</summary><ul>{items}</ul></details>"


class ScorecardView(ExplorerWidget):
    """`ScorecardView(card)` or `ScorecardView([card_a, card_b])`: the probes of each scorecard (from
    `pu1_explorer.scorecard`) in a table, a column per device, every cell coloured by status.

    A probe that did not pass says what usually causes that. With a `guide` (a sequence of
    `pu1_explorer.conformance.GradedStep`), each probe shows the guide step it grades, linked to the step's page under
    `guide_url` (by default the site's notebooks/ folder, seen from a page in it).
    """

    def __init__(self, card_or_cards: Scorecard | Sequence[Scorecard], *, problems_only: bool = False,
                 guide: Iterable[GradedStep] | None = None, guide_url: str = GUIDE_URL) -> None:
        cards = [card_or_cards] if isinstance(card_or_cards, Scorecard) else list(card_or_cards)
        if not cards:
            raise ValueError("ScorecardView needs at least one scorecard")
        self.cards = cards
        guide = list(guide or ())
        self.steps = probe_steps(guide)
        self.pages = probe_pages(guide, guide_url)
        self.problems_only = ipywidgets.Checkbox(value=problems_only, description="only probes that did not pass")
        self.output = ipywidgets.HTML(self.table_html())
        self.picture = ipywidgets.Output()
        self.problems_only.observe(lambda change: self.redraw(), names="value")
        super().__init__([self.picture, self.problems_only, self.output])
        self.show_figure(self.picture, self.figure())

    def figure(self):
        """The probes of every scorecard as a grid of squares coloured by status."""
        return scorecard_figure(self.cards, steps=self.steps)

    def redraw(self) -> None:
        """Draw the table again with the current filter."""
        self.output.value = self.table_html()

    def static_html(self) -> str:
        """The figure and the table as HTML that needs no kernel."""
        return f"<div class='explorer-widget'>{figure_html(self.figure())}{self.table_html()}</div>"

    def table_html(self) -> str:
        """The table of probes, a column per device."""
        names = list(dict.fromkeys(probe.name for card in self.cards for probe in card.probes))
        lookup = [{probe.name: probe for probe in card.probes} for card in self.cards]
        only_problems = getattr(getattr(self, "problems_only", None), "value", False)
        if only_problems:
            names = [name for name in names if any(name in found and found[name].status != "passed"
                                                   for found in lookup)]
        header = "".join(f"<th>{escape(card.device)}</th>" for card in self.cards)
        summaries = "".join(
            f"<td style='{_TD};font-size:.85em'>" + ", ".join(
                f"<span style='color:{status_colour(status)}'>{count} {escape(status)}</span>"
                for status, count in card.summary().items() if count) +
            f"<br>{card.seconds:.0f} s, torch {escape(card.torch_version)}, OpInfo {escape(card.opinfo)}</td>"
            for card in self.cards)
        rows = "".join(
            f"<tr><td style='{_TD}'><b>{escape(name)}</b>{self._step_html(name)}</td>"
            + "".join(_cell(found.get(name), self.pages.get(name, "")) for found in lookup) + "</tr>"
            for name in names)
        legend = " ".join(f"<span style='color:{status_colour(status)}'>&#9632; {escape(status)}</span>"
                          for status in STATUSES)
        return ("<div class='explorer-widget explorer-scorecard' style='overflow-x:auto'>"
                f"<p style='font-size:.85em'>{legend}</p>"
                "<table style='border-collapse:collapse;font-size:.9em;width:100%;table-layout:fixed;"
                "overflow-wrap:anywhere'>"
                f"<colgroup><col style='width:9.5em'>{'<col>' * len(self.cards)}</colgroup>"
                f"<thead><tr><th>probe</th>{header}</tr>"
                f"<tr><td><i>summary</i></td>{summaries}</tr></thead>"
                f"<tbody>{rows}</tbody></table></div>")

    def _step_html(self, name: str) -> str:
        step = self.steps.get(name)
        if not step:
            return ""
        label = f"step {escape(step)}"
        if name in self.pages:
            label = f"<a href='{escape(self.pages[name])}' target='_blank'>{label}</a>"
        return f"<br><span style='font-size:.8em;color:{STATUS_COLOURS['skipped']}'>{label}</span>"
