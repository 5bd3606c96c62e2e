"""The look of every self-contained page and widget: one stylesheet, HTML escaping, status colours, templates.

The pages (`pu1-explorer report`, a scorecard's `to_html`) are Jinja2 templates under `templates/`, shipped
with the package; they escape every value unless it is marked safe. The widgets' HTML fragments carry inline
styles (a notebook has no stylesheet of ours) built from the same colours.
"""
from __future__ import annotations

import html
from functools import lru_cache
from pathlib import Path

import jinja2
from markupsafe import Markup

TEMPLATES = Path(__file__).with_name("templates")

# What a check ended in (a scorecard probe, an operator of a sweep): one colour each, everywhere.
STATUS_COLOURS = {"passed": "#2e7d32", "failed": "#c62828", "skipped": "#757575", "crashed": "#6a1b9a",
                  "timed out": "#ef6c00", "mismatched": "#c62828", "errored": "#ad1457"}
UNKNOWN_COLOUR = "#555555"
# how a dispatch-table entry or a coverage row resolves, in every figure and page
KIND_COLOURS = {
    "kernel": STATUS_COLOURS["passed"], "composite_explicit": "#66bb6a", "composite_explicit_nonfunctional": "#9ccc65",
    "composite_implicit": "#26a69a", "autograd": "#1e88e5", "fallback": STATUS_COLOURS["timed out"],
    "fallthrough": "#bdbdbd", "missing": STATUS_COLOURS["failed"], "copies_to_cpu": "#8d6e63",
}
# The kinds of a widget's one-line message.
MESSAGE_COLOURS = {"info": "#1565c0", "error": STATUS_COLOURS["failed"], "ok": STATUS_COLOURS["passed"],
                   "warning": STATUS_COLOURS["timed out"]}


def escape(text: object) -> str:
    """`text` as HTML text: &, <, >, and both quotes escaped."""
    return html.escape(str(text))


def status_colour(status: str) -> str:
    """The colour of a status (grey-black for one this module does not know)."""
    return STATUS_COLOURS.get(status, UNKNOWN_COLOUR)


def badge(status: str) -> Markup:
    """A status as a coloured label, styled inline so that it needs no stylesheet."""
    return Markup(f'<span class="badge" style="display:inline-block;background:{status_colour(status)};color:#fff;'
                  f'border-radius:3px;padding:0 .45em;font-size:.85em;white-space:nowrap">{escape(status)}</span>')


def message_html(text: str, kind: str = "info") -> str:
    """A one-line message of a widget, coloured by its kind (info, error, ok, warning)."""
    if kind not in MESSAGE_COLOURS:
        raise ValueError(f"kind must be one of {', '.join(MESSAGE_COLOURS)}, not {kind!r}")
    return (f'<div style="color:{MESSAGE_COLOURS[kind]};white-space:pre-wrap;font-family:monospace">'
            f'{escape(text)}</div>')


def page_css() -> Markup:
    """The stylesheet every self-contained page embeds (as it is: a stylesheet is not HTML text)."""
    return Markup((TEMPLATES / "page.css").read_text())


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                                     undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    environment.globals.update(badge=badge, status_colour=status_colour, page_css=page_css)
    return environment


def render(template: str, **context: object) -> str:
    """The page `template` (a file under `templates/`) filled with `context`; values are escaped unless `Markup`."""
    return _environment().get_template(template).render(**context)


def safe(fragment: str) -> Markup:
    """Mark HTML this program built (a plotly chart) as safe to put into a page as it is."""
    return Markup(fragment)
