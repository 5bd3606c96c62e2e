"""What every explorer widget shares: live ipywidgets in JupyterLab, a kernel-free HTML rendering elsewhere.

In a live kernel a widget displays as ipywidgets controls (with a static HTML
copy in the same output, for frontends without widgets). When the notebook is
executed to build the docs (EXPLORER_STATIC=1), it displays as that HTML alone:
plotly figures with their own client-side controls, and plain HTML that needs no
kernel. The docs pages load plotly.js once, from the site itself (window.Plotly).
"""
from __future__ import annotations

import functools
import os

import ipywidgets
import plotly.graph_objects as go
import plotly.io as pio
from plotly.io.base_renderers import MimetypeRenderer
from IPython.display import display

from pu1_explorer.pages import escape, message_html  # noqa: F401 - the widgets import them from here


def static_mode() -> bool:
    """True while notebooks are executed for the static docs site."""
    return os.environ.get("EXPLORER_STATIC") == "1"


STATIC_RENDERER = "explorer_static"
FIGURE_CONFIG = {"displaylogo": False, "responsive": True}


def with_used_template(figure: go.Figure | dict) -> dict:
    """The figure as a dict whose template keeps the defaults of only the trace types it draws: plotly's default
    template carries those of every trace type, about 6 KB in each figure of a page."""
    figure_dict = figure.to_dict() if isinstance(figure, go.Figure) else dict(figure)
    layout = dict(figure_dict.get("layout") or {})
    template = layout.get("template")
    if isinstance(template, dict) and isinstance(template.get("data"), dict):
        drawn = {trace.get("type", "scatter") for trace in figure_dict.get("data") or ()}
        layout["template"] = {**template, "data": {kind: defaults for kind, defaults in template["data"].items()
                                                   if kind in drawn}}
        figure_dict["layout"] = layout
    return figure_dict


class _StaticFigureRenderer(MimetypeRenderer):
    """HTML that draws with the page's own plotly.js, and no MathJax from a CDN (plotly's notebook renderer adds it)."""

    def to_mimebundle(self, fig_dict: dict) -> dict:
        return {"text/html": pio.to_html(with_used_template(fig_dict), include_plotlyjs=False, include_mathjax=False,
                                         full_html=False, config=FIGURE_CONFIG)}


def setup_notebook() -> None:
    """Choose plotly's renderer for this environment (call once, at the top of a notebook).

    Static mode: HTML that draws with the page's own plotly.js, no kernel needed.
    Live: the plotly mime renderer of JupyterLab.
    """
    if static_mode():
        if STATIC_RENDERER not in pio.renderers:
            pio.renderers[STATIC_RENDERER] = _StaticFigureRenderer()
        pio.renderers.default = STATIC_RENDERER
    else:
        pio.renderers.default = "plotly_mimetype"


def figure_html(figure: go.Figure) -> str:
    """A figure as an HTML fragment that draws itself with the plotly.js the page already has."""
    return pio.to_html(with_used_template(figure), include_plotlyjs=False, full_html=False, config=FIGURE_CONFIG)




@functools.lru_cache(maxsize=64)  # a guide step's sources are drawn again at each render
def code_html(code: str, language: str = "python") -> str:
    """Code highlighted with inline styles (they need no stylesheet, live or on the site), scrolled, never wrapped.

    A `<pre>` without a `<code>` inside, as pygments writes it: the site's theme measures each `pre > code` as the page
    loads, forcing the layout of the notebook cell around it, which made guide pages with listings slow to load."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import get_lexer_by_name

    highlighted = highlight(code, get_lexer_by_name(language), HtmlFormatter(noclasses=True, nowrap=True))
    return ('<pre style="white-space:pre;overflow-x:auto;background:#f7f7f9;color:#1f2328;padding:.6em .8em;'
            f'border-radius:4px;font-size:.8em;line-height:1.45">{highlighted}</pre>')


def folded_code_html(summary: str, code: str, language: str = "python", fold_after: int = 30) -> str:
    """Code under a summary line: shown open when short, folded when longer than `fold_after` lines."""
    lines = code.count("\n") + 1
    opened = " open" if lines <= fold_after else ""
    return f"<details{opened}><summary>{summary} ({lines} lines)</summary>{code_html(code, language)}</details>"


def inline_code_html(text: str) -> str:
    """Text with its `code` spans as HTML."""
    parts = escape(text).split("`")
    return "".join(f"<code>{part}</code>" if index % 2 else part for index, part in enumerate(parts))


def inline_markdown(text: str) -> str:
    """The little markdown of docstrings as HTML: paragraphs, '- ' list items and `code`."""
    inline = inline_code_html
    blocks = []
    for paragraph in text.split("\n\n"):
        lines = [line.strip() for line in paragraph.splitlines() if line.strip()]
        items = [line[2:] for line in lines if line.startswith("- ")]
        prose = " ".join(line for line in lines if not line.startswith("- "))
        if prose:
            blocks.append(f"<p>{inline(prose)}</p>")
        if items:
            blocks.append("<ul>" + "".join(f"<li>{inline(item)}</li>" for item in items) + "</ul>")
    return "".join(blocks)




class ExplorerWidget(ipywidgets.VBox):
    """Base class: subclasses build their controls and implement `static_html()`."""

    def static_html(self) -> str:  # pragma: no cover - every widget overrides it
        raise NotImplementedError

    def show_figure(self, output: ipywidgets.Output, figure: go.Figure) -> None:
        output.clear_output(wait=True)
        with output:
            display(figure)

    def _repr_mimebundle_(self, **kwargs):
        if static_mode():
            return {"text/html": self.static_html(), "text/plain": f"<{type(self).__name__}>"}
        bundle = super()._repr_mimebundle_(**kwargs)
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        data["text/html"] = self.static_html()
        return bundle
