"""Notebook widgets over the explorer engine; each one call with keyword arguments gives a useful picture.

>>> from explorer.widgets import DispatchVisualizer
>>> DispatchVisualizer("torch.ones(3, device=device).relu()", device="sim")
"""
from explorer.widgets.base import setup_notebook, static_mode
from explorer.widgets.coverage import CoverageExplorer
from explorer.widgets.dispatch import DispatchTable, DispatchVisualizer
from explorer.widgets.guide import GuideStepper
from explorer.widgets.monitors import FallbackMonitor, MemoryMonitor

__all__ = ["CoverageExplorer", "DispatchTable", "DispatchVisualizer", "FallbackMonitor", "GuideStepper",
           "MemoryMonitor", "setup_notebook", "static_mode"]
