"""The dispatcher's introspection functions (`torch._C._dispatch_*`): the explorer's one door to them.

torch gives these no public form, and they are what the explorer exists to show. Every other module of the
explorer calls them through here, so that a torch release that changes one changes this file only.
"""
from __future__ import annotations

from typing import Any

import torch


def operator_names() -> list[str]:
    """Every operator overload registered with this process's dispatcher, as 'namespace::name.overload'."""
    return list(torch._C._dispatch_get_all_op_names())


def dump_table(operator: str) -> str:
    """The dispatcher's computed table of one operator overload as text: one line per dispatch key with a kernel."""
    return torch._C._dispatch_dump_table(operator)


def tensor_key_set(tensor: torch.Tensor) -> torch.DispatchKeySet:
    """The dispatch key set `tensor` carries (before the current thread's local include and exclude sets)."""
    return torch._C._dispatch_keys(tensor)


def thread_local_include_set() -> torch.DispatchKeySet:
    """The keys the current thread adds to every call's key set."""
    return torch._C._dispatch_tls_local_include_set()


def thread_local_exclude_set() -> torch.DispatchKeySet:
    """The keys the current thread removes from every call's key set."""
    return torch._C._dispatch_tls_local_exclude_set()


def library(kind: str, namespace: str, dispatch_key: str = "") -> Any:
    """A dispatcher library handle ("IMPL", "DEF" or "FRAGMENT") whose `impl(name, DispatchKey, function,
    with_keyset)` registers a Python kernel over any earlier one; dropping the handle removes its kernels."""
    return torch._C._dispatch_library(kind, namespace, dispatch_key)
