"""Gives sim device-trace registries that accept callbacks and never fire: how a backend that keeps PyTorch's
registries but never calls its hooks looks to the stream sanitizer (`--import` this file)."""
import types

import torch

from pu1_explorer.sanitizer import TRACE_REGISTRIES


class SilentRegistry:
    def add_callback(self, callback) -> None:
        pass


torch.sim._gpu_trace = types.SimpleNamespace(**{name: SilentRegistry() for name in TRACE_REGISTRIES})
