"""KeySetView: a tensor's DispatchKeySet as a picture of its bits."""
from __future__ import annotations

import ipywidgets
import plotly.graph_objects as go

from pu1_explorer.keyset import KeySetPicture, key_set
from pu1_explorer.widgets.base import ExplorerWidget, figure_html
from pu1_explorer.widgets.figures import key_set_figure


class KeySetView(ExplorerWidget):
    """`KeySetView(tensor)`, `KeySetView(device="cpu")` or `KeySetView()` (a new tensor on the PrivateUse1 device):
    which bits of the 64-bit key set are set, which bit the device occupies, and what the current thread's include
    and exclude sets add or remove."""

    def __init__(self, subject: object = None, *, device: object = None, include_thread_local: bool = True,
                 title: str | None = None) -> None:
        import torch

        if subject is not None and device is not None:
            raise TypeError("KeySetView() takes a tensor (or key set) or device=, not both")
        self.subject = subject if subject is not None else device or torch.device("privateuseone").type
        self.title = title
        self.picture: KeySetPicture = key_set(self.subject, include_thread_local=include_thread_local)
        self.thread_local = ipywidgets.Checkbox(value=include_thread_local,
                                                description="apply this thread's include and exclude sets")
        self.output = ipywidgets.Output()
        self.thread_local.observe(lambda change: self.redraw(), names="value")
        super().__init__([self.thread_local, self.output])
        self.show_figure(self.output, self.figure())

    def redraw(self) -> KeySetPicture:
        """Read the key set again with the thread's sets as they are now (outside any `with` block) and redraw it."""
        self.picture = key_set(self.subject, include_thread_local=self.thread_local.value)
        self.show_figure(self.output, self.figure())
        return self.picture

    def figure(self) -> go.Figure:
        """The plotly figure of the current picture."""
        return key_set_figure(self.picture, title=self.title)

    def static_html(self) -> str:
        """The figure as HTML that needs no kernel."""
        return f"<div class='explorer-widget'>{figure_html(self.figure())}</div>"
