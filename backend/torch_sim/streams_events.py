"""Step 6, streams and events: the torch.cuda stream and event API, over the driver's streams and events.

The device guard hands out streams (a default stream per device, pools, and new
streams with a priority), each a stream of sim's driver, and records events on
them with the driver's events: a record completes when the stream reaches it, a
wait makes a stream, not the host, wait, and elapsed_time() is the device's clock
between two completed records of events created with enable_timing=True. Kernels,
copies and device_sleep() run on the device asynchronously, in the order of their
stream.

Tools follow the streams, events and memory through PyTorch's device-trace hooks: sim's C++
tells `c10::impl::GPUTrace` of each new stream, event record, wait and host synchronisation
(streams_events.cpp) and of each block its allocator hands out or takes back (allocator.cpp).
PyTorch's interpreter passes each to `torch.sim._gpu_trace.<Kind>Callbacks` (it imports the
device module by its name and looks for that attribute, as for `torch.cuda`), where a tool, such
as the explorer's stream sanitizer, adds a callback. Tracing costs nothing while none is there.
"""
from __future__ import annotations

import contextlib
import threading
import types
from typing import Any, Callable, Iterator

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


def device_sleep(milliseconds: float, device: Any = None) -> Any:
    """Queue a kernel that keeps the current stream of the device busy for `milliseconds` and computes nothing.

    It returns at once, as every launch does: what follows on that stream waits, the host does not. It makes
    asynchrony visible (a stream that is not idle, a copy that has not landed yet), as torch.cuda._sleep does. The
    returned handle's `wake()` ends the sleep early (at once if it has not started), so that a program holds the
    stream only as long as it looks at the pending work.
    """
    return load_runtime().device_sleep(float(milliseconds), _device_index(device))


_listeners = threading.Lock()
_callbacks = 0  # in all registries: sim's C++ tells PyTorch's hooks only while there is one


def _count(change: int) -> None:
    global _callbacks
    with _listeners:
        before, _callbacks = _callbacks, _callbacks + change
        if (before == 0) != (_callbacks == 0):
            load_runtime().listen_to_gpu_trace(_callbacks > 0)


class CallbackRegistry:
    """The callbacks of one kind of trace event, fired in the order they were added."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.callback_list: list[Callable[..., None]] = []

    def add_callback(self, callback: Callable[..., None]) -> None:
        self.callback_list.append(callback)
        _count(+1)

    def remove_callback(self, callback: Callable[..., None]) -> None:
        """Unlike torch.cuda's registries, sim's let a tool go: with the last callback gone, tracing costs nothing."""
        self.callback_list.remove(callback)
        _count(-1)

    def fire_callbacks(self, *args: int) -> None:
        for callback in list(self.callback_list):
            callback(*args)


# torch.sim._gpu_trace: one registry per hook, by the names PyTorch's interpreter fires.
gpu_trace = types.SimpleNamespace(**{
    f"{kind}Callbacks": CallbackRegistry(f"sim {description}") for kind, description in (
        ("EventCreation", "event creation"), ("EventDeletion", "event deletion"), ("EventRecord", "event record"),
        ("EventWait", "event wait"), ("MemoryAllocation", "memory allocation"),
        ("MemoryDeallocation", "memory deallocation"), ("StreamCreation", "stream creation"),
        ("DeviceSynchronization", "device synchronization"), ("StreamSynchronization", "stream synchronization"),
        ("EventSynchronization", "event synchronization"))})


def install() -> None:
    load_runtime().install_streams_events()
    export(Stream, Event, current_stream, default_stream, set_stream, stream, device_sleep)
    export(_gpu_trace=gpu_trace)  # the attribute PyTorch's interpreter fires device-trace hooks into
