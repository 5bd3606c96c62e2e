"""The path of one call: user lines -> the operators they dispatched -> the backend's interface methods that ran.

A backend that offers the interface-trace protocol records, while a trace is on, every call PyTorch
makes into its integration interfaces (for sim: its device module's functions, hooks, guard, allocator,
generator, streams and events, serialization, profiler, collectives, graphs) between begin/end markers of the
operators that caused them. The
protocol is two functions on the backend's device module, looked up as `torch.<device name>`:

- `start_interface_trace(ignored_paths=())`: start recording; frames under `ignored_paths` are not
  the user's line (the explorer passes its own package);
- `stop_interface_trace() -> list[dict]`: stop and return the records in order, each with
  `sequence`, `kind` ("call", "operator_begin", "operator_end"), `interface`, `method`,
  `arguments`, `thread`, `python` ("file:line" or "").

`trace_call_path(code, device)` runs code under that trace and under the dispatcher tracer at once,
so the interface calls and the dispatcher's hops come from the same run.
"""
from __future__ import annotations

import inspect
import json
import linecache
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import torch

from pu1_explorer.devices import check_device
from pu1_explorer.tracer import Trace, run_traced, trace_from_json

SCHEMA_VERSION = 1
CODE_FILENAME = "<call path>"
EXPLORER_FOLDER = os.path.dirname(os.path.abspath(__file__)) + os.sep
RECORD_FIELDS = ("sequence", "kind", "interface", "method", "arguments", "thread", "python")
KINDS = ("call", "operator_begin", "operator_end")
NO_LINE = "(no Python line: run without the GIL, or on a thread of PyTorch's own)"


class InterfaceTraceUnavailable(RuntimeError):
    """The device's module does not offer start_interface_trace()/stop_interface_trace()."""


@dataclass
class InterfaceRecord:
    """One record of the backend's trace: an interface call, or an operator's begin or end."""

    sequence: int
    kind: str
    interface: str
    method: str
    arguments: str = ""
    thread: int = 0
    python: str = ""

    def label(self) -> str:
        """`guard.exchangeDevice(device=sim:1)` for a call, the operator's name for a marker."""
        if self.kind != "call":
            return self.method
        return f"{self.interface}.{self.method}({self.arguments})"


@dataclass
class PathNode:
    """A node of the path: a user line, an operator it dispatched, or an interface call inside either."""

    kind: str  # "line", "operator" or "call"
    label: str
    python: str = ""
    thread: int = 0
    sequence: int = -1
    children: list[PathNode] = field(default_factory=list)

    def calls(self) -> list[PathNode]:
        """Every interface call under this node, in order."""
        found = []
        for child in self.children:
            if child.kind == "call":
                found.append(child)
            found.extend(child.calls())
        return found


@dataclass
class CallPath:
    """One traced run: the backend's interface records and the dispatcher's hops of the same code."""

    device: str
    code: str
    records: list[InterfaceRecord] = field(default_factory=list)
    dispatch: Trace | None = None
    error: str | None = None

    def calls(self) -> list[InterfaceRecord]:
        """The interface calls alone, in order."""
        return [record for record in self.records if record.kind == "call"]

    def methods(self) -> list[str]:
        """`interface.method` of each call, in order (e.g. to check that a page's methods appear)."""
        return [f"{record.interface}.{record.method}" for record in self.calls()]

    def source_of(self, python: str) -> str:
        """The text of a "file:line" location: from the traced code for code strings, else from the file."""
        filename, _, line = python.rpartition(":")
        if not line.isdigit():
            return ""
        if filename == CODE_FILENAME:
            lines = self.code.splitlines()
            number = int(line)
            return lines[number - 1].strip() if 0 < number <= len(lines) else ""
        return linecache.getline(filename, int(line)).strip()

    def tree(self) -> list[PathNode]:
        """User lines in order, each with the operators it dispatched (nested) and the interface calls inside them.

        Calls made with no operator running on their thread hang from the line directly; records without a
        Python line (a thread of PyTorch's own, a tensor freed without the GIL) form a line of their own.
        """
        roots: list[PathNode] = []
        open_operators: dict[int, list[PathNode]] = {}
        current: PathNode | None = None
        for record in self.records:
            stack = open_operators.setdefault(record.thread, [])
            if record.kind == "operator_end":
                if stack and stack[-1].label == record.method:
                    stack.pop()
                continue
            if not stack and (current is None or current.python != record.python or current.thread != record.thread):
                source = self.source_of(record.python) if record.python else ""
                label = f"{record.python}  {source}" if record.python else NO_LINE
                current = PathNode("line", label.strip(), record.python, record.thread, record.sequence)
                roots.append(current)
            parent = stack[-1] if stack else current
            node = PathNode("operator" if record.kind == "operator_begin" else "call", record.label(),
                            record.python, record.thread, record.sequence)
            parent.children.append(node)
            if record.kind == "operator_begin":
                stack.append(node)
        return roots

    def to_text(self) -> str:
        """The path as an indented tree: lines, operators (`op`), interface calls (`->`)."""
        out: list[str] = []

        def walk(node: PathNode, depth: int) -> None:
            marker = {"line": "", "operator": "op ", "call": "-> "}[node.kind]
            out.append(f"{'  ' * depth}{marker}{node.label}")
            for child in node.children:
                walk(child, depth + 1)

        for root in self.tree():
            walk(root, 0)
        if self.error:
            out.append(f"error: {self.error}")
        return "\n".join(out)

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "device": self.device, "code": self.code, "error": self.error,
                "records": [asdict(record) for record in self.records],
                "dispatch": self.dispatch.to_dict() if self.dispatch is not None else None}

    def to_json(self, indent: int | None = None) -> str:
        """The run as JSON (read back with `call_path_from_json`)."""
        return json.dumps(self.to_dict(), indent=indent)


def call_path_from_json(text: str) -> CallPath:
    """Read back a run written by `CallPath.to_json()` (e.g. by `pu1-explorer interfaces` in another process)."""
    data = json.loads(text)
    dispatch = data.get("dispatch")
    return CallPath(device=data["device"], code=data["code"], error=data.get("error"),
                    records=[InterfaceRecord(**record) for record in data["records"]],
                    dispatch=trace_from_json(json.dumps(dispatch)) if dispatch is not None else None)


def interface_trace_module(device: str) -> Any:
    """The device module that offers the protocol (`torch.<device type>`); one clear line when it does not."""
    kind = torch.device(check_device(device)).type
    module = getattr(torch, kind, None)
    missing = [name for name in ("start_interface_trace", "stop_interface_trace")
               if not callable(getattr(module, name, None))]
    if missing:
        raise InterfaceTraceUnavailable(
            f"the {kind!r} backend offers no interface trace: torch.{kind} has no "
            f"{' or '.join(name + '()' for name in missing)} "
            "(a backend records the calls into its interfaces only if it implements that protocol)")
    return module


def _start(module: Any) -> None:
    start = module.start_interface_trace
    try:
        accepts_paths = "ignored_paths" in inspect.signature(start).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        accepts_paths = False
    if accepts_paths:
        start(ignored_paths=[EXPLORER_FOLDER])
    else:
        start()


def _records(raw: list[dict[str, Any]]) -> list[InterfaceRecord]:
    records = []
    for entry in raw:
        record = InterfaceRecord(**{name: entry.get(name, "") for name in RECORD_FIELDS})
        if record.kind not in KINDS:
            raise ValueError(f"the backend's interface trace has a record of unknown kind {record.kind!r}; "
                             f"expected one of {', '.join(KINDS)}")
        records.append(record)
    return records


def trace_call_path(code: str | Callable[[], object], device: str | None = None, dispatch: bool = True,
                    timeout: float = 10.0) -> CallPath:
    """Run code (statements seeing `torch` and `device`, or a callable) under the backend's interface trace and,
    unless `dispatch` is False, the dispatcher tracer; never raises for the code's own errors.

    Raises InterfaceTraceUnavailable before anything runs when the device's backend lacks the protocol.
    """
    device = check_device(device)
    module = interface_trace_module(device)
    text = code if isinstance(code, str) else _callable_source(code)
    if isinstance(code, str):
        try:
            compiled = compile(code, CODE_FILENAME, "exec")
        except SyntaxError as error:
            return CallPath(device=device, code=text, error=f"SyntaxError: {error.msg} (line {error.lineno})")
        scope = {"torch": torch, "device": device}

        def body() -> object:
            return exec(compiled, scope)
    else:
        body = code
    raw: list[dict[str, Any]] = []

    def traced_body() -> object:
        _start(module)
        try:
            return body()
        finally:
            raw.extend(module.stop_interface_trace())

    if dispatch:
        recorded = run_traced(traced_body, device=device, timeout=timeout)
        return CallPath(device=device, code=text, records=_records(raw), dispatch=recorded, error=recorded.error)
    error = None
    try:
        traced_body()
    except Exception as failure:  # the records up to the error are kept
        error = f"{type(failure).__name__}: {str(failure).strip().splitlines()[0] if str(failure).strip() else ''}"
    return CallPath(device=device, code=text, records=_records(raw), error=error)


def _callable_source(function: Callable[[], object]) -> str:
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        return getattr(function, "__qualname__", repr(function))
