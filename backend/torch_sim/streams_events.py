"""Step 6, streams and events: the torch.cuda stream and event API, over the driver's streams and events.

The device guard hands out streams (a default stream per device, pools, and new
streams with a priority), each a stream of sim's driver, and records events on
them with the driver's events: a record completes when the stream reaches it, a
wait makes a stream, not the host, wait, and elapsed_time() is the device's clock
between two completed records of events created with enable_timing=True. Kernels,
copies and device_sleep() run on the device asynchronously, in the order of their
stream.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from torch_sim.device_module import _device_index, current_device, export
from torch_sim.runtime import load_runtime


_PRIVATEUSE1_DEVICE_TYPE = 20  # c10::DeviceType::PrivateUse1


class Stream(torch.Stream):
    """A sim stream, as torch.cuda.Stream is a CUDA stream."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> "Stream":
        if "stream_id" in kwargs:
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=torch.device("sim", _device_index(device)), priority=priority)


def Event(enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> torch.Event:
    """A torch.Event on the current sim device: record it on a stream, wait for it, time between two of them.

    As on CUDA, elapsed_time() times only two recorded events both created with enable_timing=True and
    refuses any other pair in PyTorch's words. A function rather than a subclass: torch.Event.elapsed_time
    accepts only torch.Event itself.
    """
    return torch.Event(device=torch.device("sim", current_device()), enable_timing=enable_timing,
                       blocking=blocking, interprocess=interprocess)


def current_stream(device: Any = None) -> torch.Stream:
    return torch.accelerator.current_stream(_device_index(device))


def default_stream(device: Any = None) -> torch.Stream:
    index = _device_index(device)
    return torch.Stream(stream_id=0, device_index=index, device_type=_PRIVATEUSE1_DEVICE_TYPE)


def set_stream(stream: torch.Stream) -> None:
    torch.accelerator.set_stream(stream)


@contextlib.contextmanager
def stream(selected: torch.Stream | None) -> Iterator[None]:
    """Make `selected` the current stream of its device inside the block (None: no change)."""
    if selected is None:
        yield
        return
    previous = torch.accelerator.current_stream(selected.device_index)
    torch.accelerator.set_stream(selected)
    try:
        yield
    finally:
        torch.accelerator.set_stream(previous)


def device_sleep(milliseconds: float, device: Any = None) -> None:
    """Queue a kernel that keeps the current stream of the device busy for `milliseconds` and computes nothing.

    It returns at once, as every launch does: what follows on that stream waits, the host does not. It makes
    asynchrony visible (a stream that is not idle, a copy that has not landed yet), as torch.cuda._sleep does.
    """
    load_runtime().device_sleep(float(milliseconds), _device_index(device))


def install() -> None:
    load_runtime().install_streams_events()
    export(Stream, Event, current_stream, default_stream, set_stream, stream, device_sleep)
