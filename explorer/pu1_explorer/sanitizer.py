"""A stream sanitizer for any PrivateUse1 backend: accesses between streams that nothing orders.

`with stream_sanitizer() as report: ...` records, for every operator called with the backend's
tensors, the memory it read and wrote and the stream it ran on (the explorer's native recorder,
a RecordFunction observer), and, in the same order, the backend's device-trace events: event
records and waits, stream, event and device synchronisations, memory handed out and taken back.
The backend fires those through PyTorch's `c10::impl::GPUTrace` hooks, which PyTorch's interpreter
passes to the registries in the backend's device module (`torch.<name>._gpu_trace`, the attribute
PyTorch looks up for every device type, as for `torch.cuda`). On exit the report lists:

- an access to memory that another stream wrote (or read, for a write) with no event wait,
  `wait_stream`, stream, event or device synchronisation ordering the two, as PyTorch's CUDA
  sanitizer finds them, for every view of one storage;
- memory freed while a stream other than the one that allocated it may still use it, with no
  `record_stream`, and then reused.

Each race names the tensor, the two streams and operators, the user's lines of both accesses and
where the memory was allocated. The analysis is the CUDA sanitizer's: a vector clock per stream.
"""
from __future__ import annotations

import contextlib
import linecache
import os
import textwrap
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

import torch

from pu1_explorer.boxed import native_helper
from pu1_explorer.devices import check_device
from pu1_explorer.tracer import TensorInfo

# PyTorch's hook registries in a device module's `_gpu_trace`, and the name each event has in a report.
TRACE_REGISTRIES: dict[str, str] = {
    "EventCreationCallbacks": "event_creation",
    "EventDeletionCallbacks": "event_deletion",
    "EventRecordCallbacks": "event_record",
    "EventWaitCallbacks": "event_wait",
    "MemoryAllocationCallbacks": "memory_allocation",
    "MemoryDeallocationCallbacks": "memory_deallocation",
    "StreamCreationCallbacks": "stream_creation",
    "DeviceSynchronizationCallbacks": "device_synchronization",
    "StreamSynchronizationCallbacks": "stream_synchronization",
    "EventSynchronizationCallbacks": "event_synchronization",
}
TEXT_WIDTH = 72  # a report's lines wrap at words, so that pages and terminals never break one mid-word
UNSYNCHRONIZED = "unsynchronized access"
REUSED = "reuse without record_stream"
# Frames of these folders are PyTorch's or the explorer's, not the user's code (nor are the backend's own).
_LIBRARY_FOLDERS = (str(Path(torch.__file__).parent), str(Path(__file__).parent), "<frozen ")


class SanitizerUnavailable(RuntimeError):
    """The backend does not tell PyTorch about its streams and events, so no race could be found."""


@dataclass
class SourceLine:
    file: str
    line: int
    function: str
    text: str

    def __str__(self) -> str:
        where = "a notebook cell" if "/ipykernel_" in self.file else f'File "{self.file}"'
        return f"{where}, line {self.line}, in {self.function}\n    {self.text}"


@dataclass
class Access:
    """One operator's read or write of a memory, on a stream (`stream` the backend's handle, `stream_id` PyTorch's
    id of it, 0 for the default stream); `user_line` is the innermost line of the user's code that led to it."""
    kind: str  # "read" or "write"
    operator: str
    argument: str
    tensor: TensorInfo
    stream: int
    stream_id: int
    thread: int
    order: int
    user_line: SourceLine | None
    stack: list[SourceLine] = field(repr=False)
    in_backward: bool = False  # run by a backward pass: the lines are those of the forward operator

    @property
    def stream_name(self) -> str:
        return stream_name(self.stream_id)


def stream_name(stream_id: int) -> str:
    """A stream as users know it: PyTorch's id, 0 being the default stream."""
    return "the default stream" if stream_id == 0 else f"stream {stream_id}"


@dataclass
class OperatorCall:
    """One operator the sanitizer saw run on a stream, with what it read and wrote of the backend's memory."""
    order: int
    operator: str
    stream: int
    stream_id: int
    reads: int
    writes: int
    user_line: SourceLine | None

    @property
    def stream_name(self) -> str:
        return stream_name(self.stream_id)


@dataclass
class Race:
    kind: str  # UNSYNCHRONIZED or REUSED
    memory: int
    tensor: TensorInfo
    access: Access
    previous: Access
    allocated_at: SourceLine | None

    def to_text(self, label: str = "") -> str:
        """The race in words, its first line starting with `label` (the report numbers its races)."""
        tensor = _described(self.tensor)
        if self.kind == REUSED:
            head = (f"memory reused while another stream may still use it: a {_described(self.previous.tensor)} "
                    f"was freed without record_stream after {self.previous.stream_name} used it, and "
                    f"{self.access.stream_name} reused its memory for a {tensor} with nothing ordering the two")
        else:
            head = (f"unsynchronized access: {self.access.stream_name} {self.access.kind}s a {tensor} that "
                    f"{self.previous.stream_name} {_past(self.previous.kind)}, with no event wait, wait_stream or "
                    "synchronisation between the two")
        parts = [textwrap.fill(label + head, TEXT_WIDTH)]
        for label, access in (("this access", self.access), ("the earlier access", self.previous)):
            line = access.user_line
            where = f"\n  {line}" if line else " (no Python frames: an operator run by autograd's device thread)"
            backward = ", in the backward pass of the operator called at" if access.in_backward and line else ""
            said = textwrap.fill(f"{label}: {access.kind} by {access.operator} (argument {access.argument!r}) on "
                                 f"{access.stream_name}{backward}", TEXT_WIDTH)
            parts.append(f"{said}{where}")
        if self.allocated_at:
            parts.append(f"allocated at:\n  {self.allocated_at}")
        return "\n".join(parts)


def _described(tensor: TensorInfo) -> str:
    return f"tensor of shape {tuple(tensor.shape)}, {tensor.dtype}, on {tensor.device}"


def _past(kind: str) -> str:
    return "wrote" if kind == "write" else "read"


@dataclass
class SanitizerReport:
    """What a sanitized run found; filled when the `with` block ends."""
    device: str
    races: list[Race] = field(default_factory=list)
    operators: int = 0
    calls: list[OperatorCall] = field(default_factory=list, repr=False)  # in order, for a timeline
    trace_events: dict[str, int] = field(default_factory=dict)
    captured: int = 0  # operator calls recorded into a graph while a stream captured: a replay runs them
    finished: bool = False
    error: str | None = None  # what the sanitized script raised, in one line

    @property
    def clean(self) -> bool:
        return self.finished and not self.races

    def to_text(self) -> str:
        events = ", ".join(f"{count} {name.replace('_', ' ')}" for name, count in sorted(self.trace_events.items()))
        summary = (f"stream sanitizer on {self.device}: {len(self.races)} race(s) in {self.operators} operator call(s)\n"
                   + textwrap.fill(f"trace events: {events or 'none'}", TEXT_WIDTH, subsequent_indent="  "))
        if self.captured:
            summary += (f"\n{self.captured} operator call(s) captured into a graph, not checked: a replay runs "
                        "them")
        parts = [summary] + [race.to_text(f"race {number}: ") for number, race in enumerate(self.races, 1)]
        if self.error:
            parts.append(f"the script raised {self.error}")
        return "\n\n".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _StreamOrder:
    """Vector clocks: for each stream, the sequence number of every stream's last kernel it is ordered after."""

    def __init__(self) -> None:
        self.streams: dict[int, dict[int, int]] = {}
        self.events: dict[int, dict[int, int]] = {}
        self.host: dict[int, int] = {}

    def stream(self, stream: int) -> dict[int, int]:
        if stream not in self.streams:
            self.host.setdefault(stream, -1)
            self.streams[stream] = dict(self.host)
        return self.streams[stream]

    def launched(self, stream: int, sequence: int) -> None:
        self.stream(stream)[stream] = sequence

    def record(self, event: int, stream: int) -> None:
        self.events[event] = dict(self.stream(stream))

    def wait(self, stream: int, event: int) -> None:
        _merge(self.stream(stream), self.events.get(event, {}))

    def host_waited_for_event(self, event: int) -> None:
        recorded = self.events.get(event, {})
        for state in self.streams.values():
            _merge(state, recorded)
        _merge(self.host, recorded)

    def host_waited_for_stream(self, stream: int) -> None:
        reached = dict(self.stream(stream))
        for state in self.streams.values():
            _merge(state, reached)
        _merge(self.host, reached)

    def host_waited_for_device(self) -> None:
        for stream, state in self.streams.items():
            self.host[stream] = max(self.host.get(stream, -1), state[stream])
        for state in self.streams.values():
            _merge(state, self.host)

    def ordered_after(self, stream: int, earlier: Access) -> bool:
        return earlier.stream == stream or earlier.order <= self.stream(stream).get(earlier.stream, -1)


def _merge(state: dict[int, int], other: dict[int, int]) -> None:
    for stream, sequence in other.items():
        if sequence > state.get(stream, -1):
            state[stream] = sequence


@dataclass
class _Memory:
    allocated_at: SourceLine | None
    write: Access | None = None
    reads: list[Access] = field(default_factory=list)
    owner: int | None = None  # the stream it was allocated on (else of its first access): the allocator's own
    recorded: set[int] = field(default_factory=set)  # streams named by record_stream
    before_reuse: list[Access] = field(default_factory=list)  # the previous owner's accesses no stream ordered yet


class _Analysis:
    """PyTorch's CUDA sanitizer's algorithm over a recording, plus memory reused across streams."""

    def __init__(self, device: str, library_folders: tuple[str, ...] = _LIBRARY_FOLDERS) -> None:
        self.library_folders = library_folders
        self.order = _StreamOrder()
        self.memory: dict[int, _Memory] = {}
        self.freed: dict[int, list[Access]] = {}
        self.report = SanitizerReport(device)
        self.shown: set[tuple[int, int, int]] = set()

    def run(self, records: list[tuple]) -> SanitizerReport:
        for order, kind, operator, stream, stream_id, first, second, accesses, frames, thread, backward in records:
            stack = _stack(frames)
            if kind == "kernel":
                self.report.operators += 1
                self.kernel(order, operator, stream, stream_id, accesses, stack, thread, backward)
                continue
            if kind == "captured":
                self.report.captured += 1  # recorded into a graph, not run: a replay runs it, which no call shows
                continue
            self.report.trace_events[kind] = self.report.trace_events.get(kind, 0) + 1
            if kind == "record_stream":
                self.memory_of(first, stack).recorded.add(second)
            elif kind == "event_record":
                self.order.record(first, second)
            elif kind == "event_wait":
                self.order.wait(second, first)
            elif kind == "stream_creation":
                self.order.stream(first)
            elif kind == "stream_synchronization":
                self.order.host_waited_for_stream(first)
            elif kind == "event_synchronization":
                self.order.host_waited_for_event(first)
            elif kind == "device_synchronization":
                self.order.host_waited_for_device()
            elif kind == "memory_allocation":
                self.memory[first] = _Memory(self.user_line(stack), owner=stream,
                                             before_reuse=self.freed.pop(first, []))
            elif kind == "memory_deallocation":
                self.freed_memory(first)
            elif kind == "event_deletion":
                self.order.events.pop(first, None)
        self.report.finished = True
        return self.report

    def user_line(self, stack: list[SourceLine]) -> SourceLine | None:
        for line in reversed(stack):
            if not line.file.startswith(self.library_folders):
                return line
        return None

    def memory_of(self, address: int, stack: list[SourceLine]) -> _Memory:
        if address not in self.memory:  # allocated before the sanitizer started, or by a kernel the hooks missed
            self.memory[address] = _Memory(None, before_reuse=self.freed.pop(address, []))
        return self.memory[address]

    def freed_memory(self, address: int) -> None:
        memory = self.memory.pop(address, None)
        if memory is None:
            return
        safe = {memory.owner} | memory.recorded
        accesses = ([memory.write] if memory.write else []) + memory.reads
        pending = [access for access in accesses if access.stream not in safe]
        pending += memory.before_reuse
        if pending:
            self.freed[address] = pending

    def kernel(self, order: int, operator: str, stream: int, stream_id: int, accesses: list[tuple],
               stack: list[SourceLine], thread: int, in_backward: bool) -> None:
        self.order.launched(stream, order)
        user_line = self.user_line(stack)
        writes = sum(1 for access in accesses if access[1])
        self.report.calls.append(OperatorCall(order, operator, stream, stream_id, len(accesses) - writes, writes,
                                              user_line))
        for address, write, argument, shape, dtype, device in accesses:
            memory = self.memory_of(address, stack)
            if memory.owner is None:
                memory.owner = stream
            tensor = TensorInfo(list(shape), dtype, f"{self.report.device}:{device}")
            access = Access("write" if write else "read", operator, argument, tensor, stream, stream_id, thread,
                            order, user_line, stack, in_backward)
            unordered = [earlier for earlier in memory.before_reuse if not self.order.ordered_after(stream, earlier)]
            for earlier in unordered:
                self.found(REUSED, address, tensor, access, earlier, memory)
            memory.before_reuse = []
            if write:
                earlier_accesses = memory.reads if memory.reads else ([memory.write] if memory.write else [])
                for earlier in earlier_accesses:
                    if not self.order.ordered_after(stream, earlier):
                        self.found(UNSYNCHRONIZED, address, tensor, access, earlier, memory)
                memory.write, memory.reads = access, []
            else:
                if memory.write and not self.order.ordered_after(stream, memory.write):
                    self.found(UNSYNCHRONIZED, address, tensor, access, memory.write, memory)
                memory.reads.append(access)

    def found(self, kind: str, address: int, tensor: TensorInfo, access: Access, earlier: Access,
              memory: _Memory) -> None:
        key = (address, earlier.order, access.stream)
        if key in self.shown:
            return
        self.shown.add(key)
        self.report.races.append(Race(kind, address, tensor, access, earlier, memory.allocated_at))


def _stack(frames: list[tuple[str, int, str]]) -> list[SourceLine]:
    """Outermost first, as a traceback reads."""
    return [SourceLine(file, line, function, linecache.getline(file, line).strip())
            for file, line, function in reversed(frames)]


class _Listener:
    """The sanitizer's callbacks in a backend's registries: each notes its trace event into the recorder of the
    sanitizer that is running, if any."""

    def __init__(self, registries: Any) -> None:
        self.recorder: Any = None
        self.added = [(getattr(registries, registry), self.callback(kind))
                      for registry, kind in TRACE_REGISTRIES.items()]
        # PyTorch's own registries cannot remove a callback: there the callbacks are added once and kept.
        self.removable = all(hasattr(registry, "remove_callback") for registry, _ in self.added)

    def callback(self, kind: str):
        def note(*arguments: int) -> None:
            recorder = self.recorder
            if recorder is not None:
                recorder.note(kind, *arguments)
        return note

    def add(self) -> None:
        for registry, callback in self.added:
            registry.add_callback(callback)

    def remove(self) -> None:
        for registry, callback in self.added:
            registry.remove_callback(callback)


_kept_listeners: dict[str, _Listener] = {}
_listeners_lock = threading.Lock()


def _backend_folders(backend: str) -> tuple[str, ...]:
    """The folder of the backend's device module: its frames (the trace callbacks' callers) are not the user's."""
    source = getattr(torch.get_device_module(backend), "__file__", None)
    return (str(Path(source).parent),) if source else ()


def trace_registries(backend: str) -> Any:
    """The backend's device-trace registries (`torch.<backend>._gpu_trace`); SanitizerUnavailable in one line if
    it has none."""
    module = torch.get_device_module(backend)
    registries = getattr(module, "_gpu_trace", None)
    missing = [name for name in TRACE_REGISTRIES if not hasattr(getattr(registries, name, None), "add_callback")]
    if registries is None or missing:
        raise SanitizerUnavailable(
            f"{backend} does not tell PyTorch about its streams and events: torch.{backend}._gpu_trace "
            f"{'is missing' if registries is None else 'lacks ' + ', '.join(missing)}; a backend fires "
            "c10::impl::GPUTrace's hooks from its guard and allocator and keeps their registries there (guide page 6)")
    return registries


@contextlib.contextmanager
def _listening(backend: str) -> Iterator[_Listener]:
    """The sanitizer's callbacks in the backend's registries for the block: removed after it where the registries
    allow it (sim's do), so tracing costs nothing once the sanitizer is off."""
    with _listeners_lock:
        listener = _kept_listeners.get(backend)
        if listener is None:
            listener = _Listener(trace_registries(backend))
            listener.add()
            if not listener.removable:
                _kept_listeners[backend] = listener
    try:
        yield listener
    finally:
        if listener.removable:
            listener.remove()


class _Probe:
    def __init__(self) -> None:
        self.kinds: list[str] = []

    def note(self, kind: str, *arguments: int) -> None:
        self.kinds.append(kind)


def _check_hooks_fire(backend: str, listener: _Listener, device: torch.device) -> None:
    probe = _Probe()
    listener.recorder = probe
    try:
        event = torch.Event(device=device)
        event.record(torch.accelerator.current_stream(device.index))
        event.synchronize()
    finally:
        listener.recorder = None
    if "event_record" not in probe.kinds:
        raise SanitizerUnavailable(
            f"{backend} has device-trace registries but fired no event-record hook when an event was recorded: its "
            "guard's record() must call c10::impl::GPUTrace::get_trace()'s trace_gpu_event_record, and registering a "
            f"callback in torch.{backend}._gpu_trace must turn tracing on (guide page 6)")


@contextlib.contextmanager
def stream_sanitizer(device: str | torch.device | None = None) -> Iterator[SanitizerReport]:
    """Record every operator and stream event of the block on a PrivateUse1 backend; the report is filled on exit,
    also when the block raised."""
    name = torch.device(check_device(device)).type
    if name in ("cpu", "meta"):
        raise ValueError(f"the stream sanitizer is for a PrivateUse1 backend's streams, not {name!r}")
    with _listening(name) as listener:
        target = torch.device(name, torch.accelerator.current_device_index())
        _check_hooks_fire(name, listener, target)
        recorder = native_helper().AccessRecorder()
        report = SanitizerReport(name)
        recorder.start()
        listener.recorder = recorder
        try:
            yield report
        finally:
            listener.recorder = None
            recorder.stop()
            _finish(report, recorder)


def analyze(records: list[tuple], device: str, library_folders: tuple[str, ...] = _LIBRARY_FOLDERS) -> SanitizerReport:
    """The races in a recording: the native recorder's tuples (order, kind, operator, stream, stream_id, first,
    second, accesses, frames, thread, in_backward), in order. Frames under `library_folders` are not the user's lines."""
    return _Analysis(device, library_folders).run(records)


def _finish(report: SanitizerReport, recorder: Any) -> None:
    """Analyse what the recorder took into the report."""
    name = report.device
    if recorder.streams_named_by_id():
        raise SanitizerUnavailable(
            f"{name} has no native stream handles (getStreamNativeHandle), so its trace events cannot be matched "
            "to the streams operators ran on; implement it in the backend's guard (guide page 3)")
    finished = analyze(recorder.take(), name, _LIBRARY_FOLDERS + _backend_folders(name))
    report.races, report.operators, report.calls = finished.races, finished.operators, finished.calls
    report.trace_events, report.captured, report.finished = finished.trace_events, finished.captured, True


def sanitize_script(script: str | os.PathLike, device: str | None = None) -> SanitizerReport:
    """Run a Python file as __main__ (with `device` defined) under the stream sanitizer. The report is returned
    also when the script raised: the races found until then, and the error in `report.error`."""
    import runpy

    path = Path(script)
    if not path.is_file():
        raise FileNotFoundError(f"no such script: {script}")
    with stream_sanitizer(device) as report:
        try:
            runpy.run_path(str(path), init_globals={"device": report.device}, run_name="__main__")
        except Exception as error:  # the script's own failure is part of what the user reads
            lines = str(error).strip().splitlines()
            report.error = f"{type(error).__name__}: {lines[0] if lines else ''}"
    return report
