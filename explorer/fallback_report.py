"""Which operators reach a backend's fallback while a workload runs: how often, with which shapes, from where.

`monitor_fallbacks()` wraps, for the duration of a block, only the operators whose
computed kernel on the backend key is the backend fallback; every call that lands
there is counted with its input shapes and the first call site outside PyTorch.
Works for any PrivateUse1 backend (or any other backend key with a fallback).
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from pu1_explorer.dispatch_table import FALLBACK, canonical_key, entry_from_dump, short_path

_LIBRARY_DIRECTORIES = tuple(os.path.dirname(module.__file__) + os.sep for module in (torch, contextlib))


@dataclass
class FallbackCalls:
    """Every call of one operator that reached the fallback."""

    operator: str
    count: int = 0
    shapes: Counter = field(default_factory=Counter)
    call_sites: Counter = field(default_factory=Counter)

    def to_dict(self) -> dict:
        return {"operator": self.operator, "count": self.count, "shapes": dict(self.shapes.most_common()),
                "call_sites": dict(self.call_sites.most_common())}


@dataclass
class FallbackReport:
    backend: str
    backend_key: str
    calls: dict[str, FallbackCalls] = field(default_factory=dict)
    watched_operators: int = 0

    @property
    def total(self) -> int:
        return sum(entry.count for entry in self.calls.values())

    def ranked(self) -> list[FallbackCalls]:
        """Operators by how often they fell back, most first."""
        return sorted(self.calls.values(), key=lambda entry: (-entry.count, entry.operator))

    def to_dict(self) -> dict:
        return {"backend": self.backend, "backend_key": self.backend_key, "total": self.total,
                "watched_operators": self.watched_operators,
                "operators": [entry.to_dict() for entry in self.ranked()]}

    def to_markdown(self) -> str:
        lines = [f"# Fallback report for {self.backend}", "",
                 f"{self.total} call(s) of {len(self.calls)} operator(s) reached the fallback.", ""]
        if self.calls:
            lines += ["| operator | calls | most common shapes | call sites |", "| --- | ---: | --- | --- |"]
            for entry in self.ranked():
                shapes = "; ".join(f"{shape} ×{count}" for shape, count in entry.shapes.most_common(3))
                sites = "; ".join(f"{site} ×{count}" for site, count in entry.call_sites.most_common(3))
                lines.append(f"| `{entry.operator}` | {entry.count} | {shapes} | {sites} |")
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
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(skipped) and not filename.startswith("<frozen"):
            if "ipykernel_" in filename:  # a notebook cell: its temporary file name means nothing to the reader
                return f"notebook cell, line {frame.f_lineno} in {frame.f_code.co_name}"
            return f"{short_path(filename)}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    node = torch._C._current_autograd_node()
    return f"(backward: {node.name()})" if node is not None else "(no Python caller)"


def fallback_operators(backend_key: str = "PrivateUse1") -> list[str]:
    """The ATen overloads whose computed kernel on `backend_key` is the backend fallback."""
    key = canonical_key(backend_key)
    return [operator for operator in torch._C._dispatch_get_all_op_names()
            if operator.startswith("aten::")
            and entry_from_dump(operator, torch._C._dispatch_dump_table(operator), key).kind == FALLBACK]


@contextlib.contextmanager
def monitor_fallbacks(backend_key: str = "PrivateUse1") -> Iterator[FallbackReport]:
    """Count the calls that reach the fallback of `backend_key` inside the block; restores the tables on exit."""
    key = canonical_key(backend_key)
    name = torch._C._get_privateuse1_backend_name() if key == "PrivateUse1" else key
    report = FallbackReport(name, key)
    lock = threading.Lock()
    operators = fallback_operators(key)
    report.watched_operators = len(operators)

    def make_kernel(operator: str, original: Any):
        def kernel(keyset: Any, *arguments: Any, **keyword_arguments: Any) -> Any:
            site = user_call_site()
            shapes = _describe_inputs(arguments, keyword_arguments)
            with lock:
                entry = report.calls.get(operator)
                if entry is None:
                    entry = report.calls[operator] = FallbackCalls(operator)
                entry.count += 1
                entry.shapes[shapes] += 1
                entry.call_sites[site] += 1
            return original.call_boxed(keyset, *arguments, **keyword_arguments)

        return kernel

    library = torch._C._dispatch_library("IMPL", "aten", "")
    dispatch_key = getattr(torch._C.DispatchKey, key)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for operator in operators:
            original = torch.library.get_kernel(operator, key)
            library.impl(operator[len("aten::"):], dispatch_key, make_kernel(operator, original), True)
    try:
        yield report
    finally:
        del library
