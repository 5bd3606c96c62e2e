"""KeySetView: a tensor's DispatchKeySet as a picture of its bits."""
from __future__ import annotations

import ipywidgets

from pu1_explorer.keyset import KeySetPicture, key_set
from pu1_explorer.widgets.base import ExplorerWidget, figure_html
from pu1_explorer.widgets.figures import key_set_figure


class KeySetView(ExplorerWidget):
    """`KeySetView(tensor)` or `KeySetView("sim")`: which bits of the 64-bit key set are set, which bit the device
    occupies, and what the current thread's include and exclude sets add or remove."""

    def __init__(self, subject: object = None, include_thread_local: bool = True) -> None:
        import torch

        self.subject = torch._C._get_privateuse1_backend_name() if subject is None else subject
        self.picture: KeySetPicture = key_set(self.subject, include_thread_local)
        self.thread_local = ipywidgets.Checkbox(value=include_thread_local,
                                                description="apply this thread's include and exclude sets")
        self.output = ipywidgets.Output()
        self.thread_local.observe(lambda change: self.redraw(), names="value")
        super().__init__([self.thread_local, self.output])
        self.show_figure(self.output, self.figure())

    def redraw(self) -> KeySetPicture:
        """Read the key set again (the thread's sets may have changed) and redraw it."""
        self.picture = key_set(self.subject, self.thread_local.value)
        self.show_figure(self.output, self.figure())
        return self.picture

    def figure(self):
        return key_set_figure(self.picture)

    def static_html(self) -> str:
        return f"<div class='explorer-widget'>{figure_html(self.figure())}</div>"
