"""A faithful trace of every dispatcher hop of real eager execution.

`with trace(device="sim") as recorded: ...` registers, for every ATen operator and
each dispatch key of interest, a kernel that records the hop and calls the kernel
that was computed there before, so the computation is the one PyTorch would run
anyway. On exit, also on an exception, the registrations are dropped and the
dispatcher's tables are as before.

The recording kernels are boxed C++ kernels of the compiled helper
`pu1_explorer._native` that append to a C++ buffer; the hops are built from it
when they are read.

What to wrap, and how each wrapped kernel was computed, is read from the dispatcher's
computed table dumps taken just before the trace starts (`WrapPlan`). Fallthrough keys
cannot be wrapped (a kernel there would change what runs), so they are reported from
those dumps as skipped hops.

Hops on other threads are recorded too: autograd's device threads run the backward hops,
and a backend may run its kernels on threads of its own (a driver's executor), where
those kernels may call operators. When the backend carries the launching thread's state
with the kernel (`at::ThreadLocalState`, as PyTorch does when it hands work to a thread),
those calls nest under the hop that launched the kernel, however late they run; when it
does not, the newest hop open on another thread is taken as the launcher, which is right
while the launcher waits for its kernel.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import threading
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator

import torch

from pu1_explorer import dispatcher
from pu1_explorer.boxed import native_helper
from pu1_explorer.devices import check_device
from pu1_explorer.dispatch_tables import FALLTHROUGH, MISSING, _parse_line

SCHEMA_VERSION = 1

# The keys a trace wraps, per device type: autocast, autograd, view tracking, factory
# routing and the backend. The sim fallback computes with CPU kernels, so tracing
# sim wraps the CPU key too.
# ATen's operators, and c10d's: torch.distributed sends each collective through the dispatcher too.
TRACED_NAMESPACES = ("aten", "c10d")

TRACE_KEYS: dict[str, tuple[str, ...]] = {
    "cpu": ("AutocastCPU", "AutogradCPU", "ADInplaceOrView", "BackendSelect", "CPU"),
    "privateuse1": ("AutocastPrivateUse1", "AutogradPrivateUse1", "ADInplaceOrView", "BackendSelect",
                    "PrivateUse1", "CPU"),
}
# A kernel registered directly at a backend key changes which kernel the dispatcher computes for that backend's
# autograd key when both came from CompositeImplicitAutograd (the dump's "math kernel"): the autograd key would
# fall back to the not-implemented autograd kernel. Where the trace wraps such a backend key but not its autograd
# key, it also wraps the autograd key with a passthrough that records nothing, so both keep their kernel.
AUTOGRAD_KEY_OF = {"CPU": "AutogradCPU", "PrivateUse1": "AutogradPrivateUse1"}
MATH_KERNEL_TAG = "math kernel"
PASSTHROUGH_TAG = "passthrough"


@dataclass
class TensorInfo:
    shape: list[int]
    dtype: str
    device: str


@dataclass
class Hop:
    """One dispatcher hop: an operator reaching the kernel of one dispatch key."""

    index: int
    operator: str
    key: str
    kind: str
    keyset: list[str]
    depth: int
    parent: int | None
    start_ns: int
    duration_ns: int = 0
    phase: str = "forward"
    skipped: bool = False
    provenance: str = ""
    inputs: list[TensorInfo] = field(default_factory=list)
    error: str | None = None


@dataclass
class Trace:
    """The hops of one traced run, in the order they started."""

    hops: list[Hop] = field(default_factory=list)
    device: str = "cpu"
    wrapped_operators: int = 0
    error: str | None = None

    def to_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "device": self.device, "error": self.error,
                "hops": [asdict(hop) for hop in self.hops]}

    def to_json(self, indent: int | None = None) -> str:
        """The trace as JSON, following explorer/pu1_explorer/trace_schema.json."""
        return json.dumps(self.to_dict(), indent=indent)

    def to_chrome_trace(self) -> dict:
        """Chrome trace / Perfetto JSON: one complete event ('X') per executed hop, skipped hops as instants."""
        origin = min((hop.start_ns for hop in self.hops), default=0)
        events = []
        for hop in self.hops:
            event = {"name": hop.operator, "cat": hop.key, "pid": 0, "tid": 0, "ts": (hop.start_ns - origin) / 1e3,
                     "args": {"key": hop.key, "kind": hop.kind, "phase": hop.phase, "keyset": hop.keyset,
                              "provenance": hop.provenance,
                              "inputs": [f"{tuple(t.shape)} {t.dtype} {t.device}" for t in hop.inputs]}}
            if hop.skipped:
                event.update(ph="i", s="t")
            else:
                event.update(ph="X", dur=hop.duration_ns / 1e3)
            events.append(event)
        return {"traceEvents": events, "displayTimeUnit": "ns"}

    def to_text(self, show_skipped: bool = True) -> str:
        """An indented tree: one line per hop, children indented under the hop that called them, even a call that a
        backend's own thread made after the hop that launched its kernel had returned."""
        lines = []
        for hop in self._depth_first():
            if hop.skipped and not show_skipped:
                continue
            shapes = ", ".join(f"{list(t.shape)}:{t.dtype.removeprefix('torch.')}@{t.device}" for t in hop.inputs)
            timing = "skipped" if hop.skipped else f"{hop.duration_ns / 1e3:.1f} us"
            marker = " [backward]" if hop.phase == "backward" else ""
            lines.append(f"{'  ' * hop.depth}{hop.operator} @ {hop.key} ({hop.kind}, {timing}){marker}"
                         + (f"  {shapes}" if shapes and not hop.skipped else ""))
        return "\n".join(lines)

    def _depth_first(self) -> list[Hop]:
        """The hops with each one's children right after it, each level in the order the hops began."""
        known = {hop.index for hop in self.hops}
        children: dict[int | None, list[Hop]] = {}
        for hop in self.hops:
            children.setdefault(hop.parent if hop.parent in known else None, []).append(hop)
        ordered: list[Hop] = []
        pending = list(reversed(children.get(None, [])))
        while pending:
            hop = pending.pop()
            ordered.append(hop)
            pending.extend(reversed(children.get(hop.index, [])))
        return ordered

    def operators(self) -> list[str]:
        """The operators called at the top level (depth 0), in order."""
        return [hop.operator for hop in self.hops if hop.depth == 0 and not hop.skipped]

    def children(self, index: int) -> list[Hop]:
        return [hop for hop in self.hops if hop.parent == index]


def trace_from_json(text: str) -> Trace:
    """Read back a trace written by `Trace.to_json()`, e.g. by `pu1-explorer trace --format json` in another process
    (where another backend is loaded), so that this process can draw it."""
    data = json.loads(text)
    hops = [Hop(**{**hop, "inputs": [TensorInfo(**tensor) for tensor in hop["inputs"]]}) for hop in data["hops"]]
    return Trace(hops=hops, device=data["device"], error=data["error"])


def _get_hops(recorded: Trace) -> list[Hop]:
    # While a native trace runs, the hops live in its C++ buffer: bring the list up to date.
    refresh = recorded.__dict__.get("_refresh")
    if refresh is not None:
        refresh()
    return recorded.__dict__["_hops"]


def _set_hops(recorded: Trace, hops: list[Hop]) -> None:
    recorded.__dict__["_hops"] = hops


Trace.hops = property(_get_hops, _set_hops, doc="The hops, in the order they started.")  # type: ignore[assignment]


def _higher_first(first: str, second: str) -> int:
    keyset = torch.DispatchKeySet(getattr(torch.DispatchKey, first)).add(
        getattr(torch.DispatchKey, second))
    return -1 if str(keyset.highestPriorityTypeId()).split(".")[-1] == first else 1


@functools.lru_cache(maxsize=1)
def key_priority() -> tuple[str, ...]:
    """The runtime dispatch keys, highest priority first (the order the dispatcher tries them)."""
    not_runtime = {"Undefined", "CatchAll", "Autograd", "AutogradFunctionality", "Dense", "Sparse", "SparseCsr",
                   "Quantized", "NestedTensor", "CompositeImplicitAutograd", "CompositeExplicitAutograd",
                   "CompositeExplicitAutogradNonFunctional", "CompositeImplicitAutogradNestedTensor",
                   "FuncTorchBatchedDecomposition"}
    runtime = []
    for name in dir(torch.DispatchKey):
        if name.startswith(("_", "StartOf", "EndOf")) or name in not_runtime:
            continue
        with contextlib.suppress(Exception):
            torch.DispatchKeySet(getattr(torch.DispatchKey, name)).add(torch.DispatchKey.CPU)
            runtime.append(name)
    return tuple(sorted(runtime, key=functools.cmp_to_key(_higher_first)))


def _skipped_before(priority: dict[str, int], is_fallthrough: Callable[[str, str], bool], operator: str, key: str,
                    keys: list[str], parent: Hop | None) -> list[str]:
    """Fallthrough keys a call passed over on its way to `key`: those of `keys` above it (and, for a redispatch
    of the parent's call, below the parent's key), lowest priority first."""
    rank = priority.get(key, 0)
    floor = priority.get(parent.key, -1) if parent is not None and parent.operator == operator else -1
    skipped = [candidate for candidate in keys
               if floor < priority.get(candidate, 0) < rank and is_fallthrough(operator, candidate)]
    return sorted(skipped, key=lambda name: priority.get(name, 0))


_active_lock = threading.Lock()
_active: list[Tracer] = []


def _claim(tracer: Tracer) -> None:
    with _active_lock:
        if _active:
            raise RuntimeError("pu1_explorer.trace: a trace is already active in this process; traces cannot be "
                               "nested or run concurrently (the dispatch tables they wrap are process-wide), so "
                               "leave the first `with trace(...)` block before entering another")
        _active.append(tracer)


def _release(tracer: Tracer) -> None:
    with _active_lock:
        if tracer in _active:
            _active.remove(tracer)


def _dump_lines(dump: str, needles: list[tuple[str, str]]) -> dict[str, str]:
    """The lines of a computed table dump for the keys of `needles` ((key, "\\nKEY: ") pairs), by key; keys
    without a kernel are absent.

    A dump lists its keys lowest priority first; with the keys in that order each search starts where the last
    one matched, and a key found nowhere after it is looked for before it.
    """
    text = "\n" + dump
    lines, position = {}, 0
    for key, needle in needles:
        start = text.find(needle, position)
        if start < 0:
            start = text.find(needle, 0, position)
            if start < 0:
                continue
        end = text.find("\n", start + 1)
        lines[key] = text[start + 1:end] if end >= 0 else text[start + 1:]
        position = start + 1
    return lines


def _needles(keys: list[str] | tuple[str, ...]) -> list[tuple[str, str]]:
    """What starts the dump line of each key, the keys in the order a dump lists them (lowest priority first)."""
    dump_position = {name: position for position, name in enumerate(reversed(key_priority()))}
    return [(key, f"\n{key}: ") for key in sorted(keys, key=lambda name: dump_position.get(name, -1))]


def _is_fallthrough_line(line: str, key: str) -> bool:
    """Whether a dump line shows a fallthrough ("KEY: fallthrough registered at ...")."""
    return line.startswith("fallthrough ", len(key) + 2)


class WrapPlan:
    """What a trace wraps, read from the dispatcher's computed table dumps just before it starts.

    `sites` are the (operator, key, tag) whose computed kernel exists and is not a fallthrough, with the
    dump's provenance tag; the dumps also answer which keys a call passes over (`is_fallthrough`).
    """

    def __init__(self, namespaces: tuple[str, ...] | list[str], keys: tuple[str, ...] | list[str]) -> None:
        prefixes = tuple(f"{namespace}::" for namespace in namespaces)
        self.dumps: dict[str, str] = {name: dispatcher.dump_table(name)
                                      for name in dispatcher.operator_names() if name.startswith(prefixes)}
        needles = _needles(keys)
        fallthrough_at = {key: len(key) + 2 for key in keys}
        self.sites: list[tuple[str, str, str]] = []
        for operator, dump in self.dumps.items():
            lines = _dump_lines(dump, needles)
            for key in keys:
                line = lines.get(key)
                if line is not None and not line.startswith("fallthrough ", fallthrough_at[key]):
                    tag = line[line.rfind("[") + 1:-1]
                    self.sites.append((operator, key, tag))
                    autograd_key = AUTOGRAD_KEY_OF.get(key)
                    if tag == MATH_KERNEL_TAG and autograd_key not in keys and autograd_key is not None:
                        self.sites.append((operator, autograd_key, PASSTHROUGH_TAG))
        self._fallthrough: dict[tuple[str, str], bool] = {}

    def is_fallthrough(self, operator: str, key: str) -> bool:
        """Whether a call of `operator` passes over `key` (its computed kernel there is a fallthrough)."""
        known = self._fallthrough.get((operator, key))
        if known is None:
            line = _dump_lines(self.dumps.get(operator, ""), _needles([key])).get(key)
            known = self._fallthrough[(operator, key)] = line is not None and _is_fallthrough_line(line, key)
        return known


class _NativeHops:
    """Builds Hop objects from the native recorder's buffer, incrementally and in order."""

    def __init__(self, recorder: Any, plan: WrapPlan, recorded: Trace, priority: dict[str, int]) -> None:
        self._recorder = recorder
        self._trace = recorded
        self._priority = priority
        self._sites = recorder.sites()
        self._site_entries: dict[int, tuple[str, str]] = {}
        # Keys passed over are never wrapped; their fallthrough status is the one of the tables the plan read.
        self._is_fallthrough = plan.is_fallthrough
        self._keysets: list[tuple[str, ...]] = []
        self._by_record: list[Hop] = []
        self._running: dict[int, Hop] = {}
        self._dtypes: dict[Any, str] = {}

    def _site_entry(self, site: int) -> tuple[str, str]:
        """Kind and provenance of a wrapped kernel, read as the table dump would show them."""
        entry = self._site_entries.get(site)
        if entry is None:
            operator, key, tag, debug = self._sites[site]
            parsed = _parse_line(operator, f"{key}: {debug} [{tag}]")
            entry = self._site_entries[site] = (parsed.kind, parsed.provenance) if parsed else (MISSING, "")
        return entry

    def refresh(self) -> None:
        """Append the hops recorded since the last call, and finish those that were still running."""
        hops = self._trace.__dict__["_hops"]
        if self._running:
            indices = list(self._running)
            for index, (duration, error, finished) in zip(indices, self._recorder.endings(indices)):
                hop = self._running[index]
                hop.duration_ns, hop.error = duration, error
                if finished:
                    del self._running[index]
        records = self._recorder.records(len(self._by_record))
        if not records:
            return
        if max(record[1] for record in records) >= len(self._keysets):
            rank = self._priority
            self._keysets = [tuple(sorted(names, key=lambda name: rank.get(name, len(rank))))
                             for names in self._recorder.keysets()]
        dtypes = self._dtypes
        for site, keyset, parent_record, depth, start_ns, duration_ns, backward, inputs, error, finished in records:
            operator, key = self._sites[site][:2]
            entry = self._site_entry(site)
            parent = self._by_record[parent_record] if parent_record is not None else None
            parent_index = parent.index if parent is not None else None
            keys = list(self._keysets[keyset])
            phase = "backward" if backward else "forward"
            for skipped_key in _skipped_before(self._priority, self._is_fallthrough, operator, key, keys, parent):
                hops.append(Hop(len(hops), operator, skipped_key, FALLTHROUGH, keys, depth, parent_index, start_ns,
                                phase=phase, skipped=True))
            infos = []
            for shape, dtype, device in inputs:
                name = dtypes.get(dtype)
                if name is None:
                    name = dtypes[dtype] = str(dtype)
                infos.append(TensorInfo(shape, name, device))
            hop = Hop(len(hops), operator, key, entry[0], keys, depth, parent_index, start_ns, duration_ns, phase,
                      provenance=entry[1], inputs=infos, error=error)
            hops.append(hop)
            if not finished:
                self._running[len(self._by_record)] = hop
            self._by_record.append(hop)


class Tracer:
    """Records hops while active; use `trace()` rather than this class directly."""

    def __init__(self, device: str) -> None:
        self.trace = Trace(device=device)
        self._priority = {name: rank for rank, name in enumerate(key_priority())}
        self._recorder: Any = None
        self._collector: _NativeHops | None = None
        self._device_type = "privateuse1" if torch.device(device).type not in ("cpu", "meta") else "cpu"

    def install(self) -> None:
        """Wrap every (operator, key) of interest; refused while another trace is active."""
        _claim(self)
        try:
            native = native_helper()
            plan = WrapPlan(TRACED_NAMESPACES, TRACE_KEYS[self._device_type])
            recorder = native.HopRecorder(plan=plan.sites)
            self._collector = _NativeHops(recorder, plan, self.trace, self._priority)
            recorder.install()
        except BaseException:
            self._collector = None
            _release(self)
            raise
        self._recorder = recorder
        self.trace.__dict__["_refresh"] = self._collector.refresh
        self.trace.wrapped_operators = recorder.operator_count()

    def uninstall(self) -> None:
        """Drop the wrappers: the dispatch tables are exactly as before install()."""
        try:
            if self._recorder is not None:
                self._recorder.uninstall()
                self.trace.__dict__.pop("_refresh", None)
                self._recorder = None
                if self._collector is not None:
                    self._collector.refresh()
                    self._collector = None  # the native buffer goes with it
        finally:
            _release(self)


@contextlib.contextmanager
def trace(device: str | torch.device = "cpu") -> Iterator[Trace]:
    """Record every dispatcher hop inside the block; the tables are restored on exit, also on an exception.

    `device` selects the keys to wrap: "cpu" for CPU tensors, or the PrivateUse1
    backend's name ("sim", or any other backend) for its tensors. One trace at a time:
    entering a second one while a trace is active raises RuntimeError. A block that ends
    normally ends its trace once the device ran what the block launched, so the operators
    a queued kernel calls are in it, however late the kernel runs.
    """
    device = check_device(device)
    tracer = Tracer(device)
    tracer.install()
    try:
        yield tracer.trace
        wait_for_device(device)
    except BaseException as error:
        tracer.trace.error = f"{type(error).__name__}: {error}"
        raise
    finally:
        tracer.uninstall()


def wait_for_device(device: str) -> None:
    """Wait until a PrivateUse1 device ran every kernel queued on it. A backend whose device guard cannot synchronize
    has no queue to wait for: its kernels run before their operators return."""
    if torch.device(device).type in ("cpu", "meta"):
        return
    try:
        torch.accelerator.synchronize(torch.device(device))
    except RuntimeError as error:
        if "support synchronizing" not in str(error):
            raise


class TimeLimitExceeded(TimeoutError):
    """The traced code ran past its time limit and was stopped."""

    def __str__(self) -> str:
        return "the code ran past its time limit and was stopped"


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise TimeLimitExceeded in this thread once `seconds` have passed, even inside a pure-Python loop."""
    target = threading.get_ident()
    lock = threading.Lock()
    state = {"finished": False}

    def interrupt() -> None:
        with lock:
            if not state["finished"]:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(target),
                                                           ctypes.py_object(TimeLimitExceeded))

    timer = threading.Timer(seconds, interrupt)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        with lock:
            state["finished"] = True
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(target), None)  # drop a late one
        timer.cancel()


def run_traced(code: str | Callable[[], object], device: str | None = None, timeout: float = 10.0,
               namespace: dict | None = None) -> Trace:
    """Run code (Python statements, or a callable) under the tracer and return its trace, never raising.

    The code sees `torch` and `device` (default: the loaded PrivateUse1 backend). An
    exception ends the run; the trace keeps the hops up to it and records the error.
    Python code still running after `timeout` seconds is stopped (a single long native
    kernel finishes first). Only an unknown device raises, before anything runs.
    """
    device = check_device(device)
    if isinstance(code, str):
        try:
            compiled = compile(code, "<traced code>", "exec")
        except SyntaxError as error:
            return Trace(device=str(device), error=f"SyntaxError: {error.msg} (line {error.lineno})")
        scope = {"torch": torch, "device": str(device), **(namespace or {})}

        def body() -> object:
            return exec(compiled, scope)
    else:
        body = code
    recorded = Trace(device=str(device))
    try:
        with trace(device) as recorded, _time_limit(timeout):
            body()
    except BaseException as error:  # the trace already holds the hops up to the error
        if isinstance(error, KeyboardInterrupt):
            raise
        recorded.error = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
    return recorded
