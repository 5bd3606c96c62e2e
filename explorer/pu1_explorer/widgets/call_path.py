"""call_path: the backend's interface calls of a piece of code next to the dispatcher's hops of the same run.

>>> from pu1_explorer.widgets import call_path
>>> call_path('with torch.accelerator.device_index(1):\\n    torch.randn(100, device="sim:1")', device="sim")

Left: each user line, the operators it dispatched and, inside them, the interface methods the
backend ran (guard, allocator, hooks, generator, ...). Right: the dispatcher's hops. Both are plain
HTML, so the picture is the same live and on the static site.
"""
from __future__ import annotations

from typing import Callable

import ipywidgets

from pu1_explorer.interface_trace import CallPath, InterfaceTraceUnavailable, PathNode, trace_call_path
from pu1_explorer.widgets.base import ExplorerWidget, code_html, escape, message_html

# One colour per interface, so that the same interface reads the same everywhere on a page.
INTERFACE_COLOURS = {
    "hooks": "#8e44ad", "guard": "#2471a3", "allocator": "#1e8449", "host_allocator": "#117a65",
    "cpu_allocator": "#7d8c2b", "generator": "#b9770e", "serialization": "#a04000", "profiler": "#6c3483",
    "graphs": "#c0392b", "streams": "#2e86c1", "events": "#2e86c1",
}
OTHER_COLOUR = "#555"
PANEL = "flex:1 1 340px;min-width:0;max-width:100%"
LIST = "list-style:none;margin:0;padding-left:1.1em"  # nested: sizes are set once, on the outer list


def _call_html(node: PathNode) -> str:
    interface, _, rest = node.label.partition(".")
    colour = INTERFACE_COLOURS.get(interface, OTHER_COLOUR)
    return (f'<li style="white-space:nowrap">&#8594; <b style="color:{colour}">{escape(interface)}</b>'
            f".{escape(rest)}</li>")


def _node_html(node: PathNode, budget: list[int]) -> str:
    """`node` as a list item; `budget` (one count, shared by the whole tree) caps the items drawn."""
    if budget[0] <= 0:
        return ""
    budget[0] -= 1
    if node.kind == "call":
        return _call_html(node)
    inner = "".join(_node_html(child, budget) for child in node.children)
    if node.kind == "operator":
        body = f'<ul style="{LIST}">{inner}</ul>' if inner else ""
        return f'<li style="white-space:nowrap"><span style="color:#1f2328">{escape(node.label)}</span>{body}</li>'
    calls = len(node.calls())
    return (f'<li style="margin:.3em 0"><details open><summary style="white-space:pre-wrap;word-break:break-all">'
            f'<code>{escape(node.label)}</code> <small>({calls} interface call{"s" if calls != 1 else ""})'
            f'</small></summary><ul style="{LIST}">{inner}</ul></details></li>')


def call_path_html(path: CallPath, max_hops: int = 400, max_items: int = 1500) -> str:
    """The run as HTML: the interface path and the dispatcher's hops side by side (stacked on a narrow screen);
    long runs are cut at `max_items` lines, operators and calls, and `max_hops` hops."""
    budget = [max_items]
    tree = "".join(_node_html(node, budget) for node in path.tree())
    if budget[0] <= 0:
        tree += f"<li>… cut after {max_items} items ({len(path.records)} records in all)</li>"
    interfaces = (f'<ul style="list-style:none;margin:0;padding:0;overflow-x:auto;font-family:monospace;'
                  f'font-size:.8em;line-height:1.5">{tree}</ul>' if tree
                  else message_html("no interface call was recorded"))
    hops = ""
    if path.dispatch is not None:
        lines = path.dispatch.to_text(show_skipped=False).splitlines()
        more = f"\n… {len(lines) - max_hops} more hops" if len(lines) > max_hops else ""
        hops = (f'<div style="{PANEL}"><h4 style="margin:.2em 0">Dispatcher hops</h4>'
                f'<pre style="overflow-x:auto;font-size:.75em;line-height:1.45;background:#f7f7f9;padding:.5em">'
                f'{escape(chr(10).join(lines[:max_hops]) + more)}</pre></div>')
    error = message_html(f"the code raised {path.error}", "error") if path.error else ""
    return (f"<div class='explorer-widget call-path'>{error}"
            f'<div style="display:flex;flex-wrap:wrap;gap:1em;align-items:flex-start">'
            f'<div style="{PANEL}"><h4 style="margin:.2em 0">Interface calls on {escape(path.device)}</h4>'
            f"{interfaces}</div>{hops}</div></div>")


class CallPathView(ExplorerWidget):
    """Run code under the backend's interface trace and the dispatcher tracer, and show both side by side."""

    def __init__(self, code: str | Callable[[], object], device: str | None = None, dispatch: bool = True,
                 timeout: float = 10.0) -> None:
        self.target = code
        self.device_name = device
        self.dispatch = dispatch
        self.timeout = timeout
        self.path: CallPath | None = None
        self.problem = ""
        self.view = ipywidgets.HTML()
        self.run_button = ipywidgets.Button(description="Trace again", icon="play")
        self.run_button.on_click(lambda _: self.run())
        super().__init__([self.run_button, self.view])
        self.run()

    def run(self) -> CallPath | None:
        """Trace the code again and redraw; returns the run (None when the backend offers no interface trace)."""
        try:
            self.path = trace_call_path(self.target, self.device_name, dispatch=self.dispatch, timeout=self.timeout)
            self.problem = ""
        except InterfaceTraceUnavailable as error:
            self.path, self.problem = None, str(error)
        self.view.value = self.static_html()
        return self.path

    def static_html(self) -> str:
        if self.path is None:
            return message_html(self.problem, "error")
        code = code_html(self.path.code.strip()) if isinstance(self.target, str) else ""
        return code + call_path_html(self.path)


def call_path(code: str | Callable[[], object], device: str | None = None, dispatch: bool = True,
              timeout: float = 10.0) -> CallPathView:
    """Show the interface calls of `code` (statements that see `torch` and `device`, or a callable) on `device`
    (default: the loaded PrivateUse1 backend) next to the dispatcher's hops of the same run."""
    return CallPathView(code, device=device, dispatch=dispatch, timeout=timeout)
