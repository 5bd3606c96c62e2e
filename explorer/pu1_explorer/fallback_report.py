"""Which operators reach a backend's fallback while a workload runs: how often, with which shapes, from where.

`monitor_fallbacks()` wraps, for the duration of a block, only the operators whose
computed kernel on the backend key is the backend fallback; every call that lands
there is counted with its input shapes and the first call site outside PyTorch.
Works for any PrivateUse1 backend (or any other backend key with a fallback).
"""
from __future__ import annotations

import contextlib
import inspect
import os
import threading
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from pu1_explorer import dispatcher
from pu1_explorer.boxed import call_original, native_helper
from pu1_explorer.dispatch_tables import FALLBACK, KERNEL, MISSING, canonical_key, entry_from_dump, short_path

_LIBRARY_DIRECTORIES = tuple(os.path.dirname(module.__file__) + os.sep for module in (torch, contextlib))
_WORKLOADS_FILE = os.path.join(os.path.dirname(__file__), "workloads.py")


@dataclass
class FallbackCalls:
    """Every call of one operator that reached the fallback."""

    operator: str
    count: int = 0
    copied: int = 0  # calls that copied their tensors to the CPU (aten::_to_cpu, as at::native::cpu_fallback does)
    shapes: Counter = field(default_factory=Counter)
    call_sites: Counter = field(default_factory=Counter)

    def to_dict(self) -> dict:
        return {"operator": self.operator, "count": self.count, "copied": self.copied,
                "shapes": dict(self.shapes.most_common()), "call_sites": dict(self.call_sites.most_common())}


@dataclass
class FallbackReport:
    backend: str
    backend_key: str
    calls: dict[str, FallbackCalls] = field(default_factory=dict)
    watched_operators: int = 0
    # The backend's own per-operator kernels that copied to the CPU (a kernel forwarding to cpu_fallback): calls.
    copying_kernels: Counter = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(entry.count for entry in self.calls.values())

    @property
    def copied(self) -> int:
        """Fallback calls that copied their tensors to the CPU and back."""
        return sum(entry.copied for entry in self.calls.values())

    def ranked(self) -> list[FallbackCalls]:
        """Operators by how often they fell back, most first."""
        return sorted(self.calls.values(), key=lambda entry: (-entry.count, entry.operator))

    def to_dict(self) -> dict:
        return {"backend": self.backend, "backend_key": self.backend_key, "total": self.total,
                "copied": self.copied, "watched_operators": self.watched_operators,
                "operators": [entry.to_dict() for entry in self.ranked()],
                "copying_kernels": dict(self.copying_kernels.most_common())}

    def to_markdown(self) -> str:
        lines = [f"# Fallback report for {self.backend}", "",
                 f"{self.total} call(s) of {len(self.calls)} operator(s) reached the fallback; "
                 f"{self.copied} copied their tensors to the CPU and back.", ""]
        if self.calls:
            lines += ["| operator | calls | copied to the CPU | most common shapes | call sites |",
                      "| --- | ---: | ---: | --- | --- |"]
            for entry in self.ranked():
                shapes = "; ".join(f"{shape} ×{count}" for shape, count in entry.shapes.most_common(3))
                sites = "; ".join(f"{site} ×{count}" for site, count in entry.call_sites.most_common(3))
                lines.append(f"| `{entry.operator}` | {entry.count} | {entry.copied} | {shapes} | {sites} |")
        if self.copying_kernels:
            lines += ["", "The backend's own kernels that copied to the CPU:", ""]
            lines += [f"- `{operator}`: {count} call(s)" for operator, count in self.copying_kernels.most_common()]
        return "\n".join(lines) + "\n"


def _describe_inputs(arguments: tuple, keyword_arguments: dict) -> str:
    parts = []
    for value in (*arguments, *keyword_arguments.values()):
        tensors = value if isinstance(value, (list, tuple)) else (value,)
        for tensor in tensors:
            if isinstance(tensor, torch.Tensor):
                parts.append(f"{list(tensor.shape)}:{str(tensor.dtype).removeprefix('torch.')}")
    return ", ".join(parts) or "(no tensors)"


def user_call_site(skip_directories: tuple[str, ...] = ()) -> str:
    """'file:line in function' of the innermost frame that is not PyTorch's, the explorer's or the standard library's."""
    own = os.path.dirname(__file__) + os.sep
    skipped = _LIBRARY_DIRECTORIES + (own,) + skip_directories
    frame = inspect.currentframe().f_back
    while frame is not None:
        filename = frame.f_code.co_filename
        # the reference workloads are code the user runs, though they ship with the explorer
        if filename == _WORKLOADS_FILE or not filename.startswith(skipped) and not filename.startswith("<frozen"):
            if "ipykernel_" in filename:  # a notebook cell: its temporary file name means nothing to the reader
                return f"notebook cell, line {frame.f_lineno} in {frame.f_code.co_name}"
            return f"{short_path(filename)}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    node = native_helper().current_backward_node()
    return f"(backward: {node})" if node is not None else "(no Python caller)"


def fallback_operators(backend_key: str = "PrivateUse1") -> list[str]:
    """The ATen overloads whose computed kernel on `backend_key` is the backend fallback (those the monitor watches)."""
    return _watched(canonical_key(backend_key))[0]


# Never wrapped: nn.Parameter refuses a detached tensor that passed through a Python kernel.
UNWATCHED_OPERATORS = frozenset({"aten::detach"})
COPY_TO_CPU = "aten::_to_cpu"  # what at::native::cpu_fallback calls to move its tensor arguments to the CPU


def _watched(key: str) -> tuple[list[str], list[str]]:
    """The aten overloads that land on the key's fallback, and those with a kernel of the backend's own there."""
    fallbacks, kernels = [], []
    for operator in dispatcher.operator_names():
        if not operator.startswith("aten::") or operator in UNWATCHED_OPERATORS or operator == COPY_TO_CPU:
            continue
        kind = entry_from_dump(operator, dispatcher.dump_table(operator), key).kind
        if kind == FALLBACK:
            fallbacks.append(operator)
        elif kind == KERNEL:
            kernels.append(operator)
    return fallbacks, kernels


@contextlib.contextmanager
def monitor_fallbacks(backend_key: str = "PrivateUse1") -> Iterator[FallbackReport]:
    """Count the calls that reach the fallback of `backend_key` inside the block; restores the tables on exit.

    The calls that copy their tensors to the CPU (a fallback or kernel built on
    `at::native::cpu_fallback`) are told apart by watching `aten::_to_cpu` inside them.
    """
    key = canonical_key(backend_key)
    name = torch.device("privateuseone").type if key == "PrivateUse1" else key
    report = FallbackReport(name, key)
    lock = threading.Lock()
    local = threading.local()
    fallbacks, kernels = _watched(key)
    report.watched_operators = len(fallbacks)

    def frames() -> list[list]:
        stack = getattr(local, "stack", None)
        if stack is None:
            stack = local.stack = []
        return stack

    def wrapped_kernel(operator: str, original: Any, counted: bool):
        """A kernel that calls `original` with the call marked on this thread's stack; `counted`: a fallback call,
        recorded in the report."""
        def kernel(keyset: Any, *arguments: Any, **keyword_arguments: Any) -> Any:
            entry = None
            if counted:
                site = user_call_site()
                shapes = _describe_inputs(arguments, keyword_arguments)
                with lock:
                    entry = report.calls.get(operator)
                    if entry is None:
                        entry = report.calls[operator] = FallbackCalls(operator)
                    entry.count += 1
                    entry.shapes[shapes] += 1
                    entry.call_sites[site] += 1
            stack = frames()
            stack.append([operator, entry, False])
            try:
                return call_original(original, operator, keyset, arguments, keyword_arguments)
            finally:
                stack.pop()

        return kernel

    def copy_to_cpu(original: Any):
        def kernel(keyset: Any, *arguments: Any, **keyword_arguments: Any) -> Any:
            stack = frames()
            if stack and not stack[-1][2]:
                stack[-1][2] = True
                operator, entry = stack[-1][0], stack[-1][1]
                with lock:
                    if entry is not None:
                        entry.copied += 1
                    else:
                        report.copying_kernels[operator] += 1
            return call_original(original, COPY_TO_CPU, keyset, arguments, keyword_arguments)

        return kernel

    library = dispatcher.library("IMPL", "aten")
    dispatch_key = getattr(torch.DispatchKey, key)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for operators, counted in ((fallbacks, True), (kernels, False)):
            for operator in operators:
                original = torch.library.get_kernel(operator, key)
                library.impl(operator[len("aten::"):], dispatch_key, wrapped_kernel(operator, original, counted), True)
        if entry_from_dump(COPY_TO_CPU, dispatcher.dump_table(COPY_TO_CPU), key).kind != MISSING:
            original = torch.library.get_kernel(COPY_TO_CPU, key)
            library.impl(COPY_TO_CPU[len("aten::"):], dispatch_key, copy_to_cpu(original), True)
    try:
        yield report
    finally:
        del library
