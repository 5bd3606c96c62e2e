"""Notebook widgets over the explorer engine; each one call with keyword arguments gives a useful picture.

>>> from pu1_explorer.widgets import DispatchVisualizer
>>> DispatchVisualizer("torch.ones(3, device=device).relu()", device="sim")
"""
from pu1_explorer.widgets.base import setup_notebook, static_mode
from pu1_explorer.widgets.call_path import CallPathView, call_path
from pu1_explorer.widgets.coverage import CoverageExplorer
from pu1_explorer.widgets.dispatch import DispatchTable, DispatchVisualizer
from pu1_explorer.widgets.graphs import graph_figure, replay_comparison_figure, replay_traces_figure
from pu1_explorer.widgets.guide import GuideStepper, guide_step
from pu1_explorer.widgets.keyset import KeySetView
from pu1_explorer.widgets.monitors import FallbackMonitor, MemoryMonitor
from pu1_explorer.widgets.sanitizer import stream_races_figure
from pu1_explorer.widgets.scorecard import ScorecardView

__all__ = ["CallPathView", "CoverageExplorer", "DispatchTable", "DispatchVisualizer", "FallbackMonitor",
           "GuideStepper", "KeySetView", "MemoryMonitor", "ScorecardView", "call_path", "graph_figure", "guide_step",
           "replay_comparison_figure", "replay_traces_figure", "setup_notebook", "static_mode", "stream_races_figure"]
