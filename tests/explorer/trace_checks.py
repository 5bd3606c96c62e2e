"""Checks of a trace against the dispatch tables computed before it, and a run of them after every bring-up step.

`python -m tests.explorer.trace_checks` brings sim up step by step in one process and, after each step,
traces a small program and prints one JSON line per traced device with the disagreements found.
"""
from __future__ import annotations

import json

import torch

from pu1_explorer.dispatch_tables import FALLTHROUGH, MISSING, entry_from_dump
from pu1_explorer.tracer import TRACE_KEYS, Hop, Trace, key_priority


def all_tables() -> dict[str, str]:
    """Every operator's dispatch table dump, the computed tables included."""
    return {name: torch._C._dispatch_dump_table(name) for name in torch._C._dispatch_get_all_op_names()}


def _passed_over(hops: list[Hop], index: int) -> list[str]:
    """The keys of the skipped hops recorded right before hop `index` for the same call."""
    hop, keys = hops[index], []
    for earlier in reversed(hops[:index]):
        if not (earlier.skipped and earlier.operator == hop.operator and earlier.parent == hop.parent
                and earlier.depth == hop.depth):
            break
        keys.insert(0, earlier.key)
    return keys


def disagreements(recorded: Trace, tables: dict[str, str], device_type: str) -> list[str]:
    """Every way the trace differs from what the tables say a call goes through; empty when none does.

    Each executed hop has the kind and provenance of its (operator, key) entry and is a key the tracer wraps;
    the hops skipped before it are exactly the fallthrough keys of its key set that the call passed over; no
    wrapped key with a kernel was passed over; a redispatch goes down in priority; nesting is consistent.
    """
    priority = {name: rank for rank, name in enumerate(key_priority())}
    wrapped = set(TRACE_KEYS[device_type])
    hops, problems = recorded.hops, []

    def kind(operator: str, key: str) -> str:
        return entry_from_dump(operator, tables[operator], key).kind

    for index, hop in enumerate(hops):
        where = f"hop {index} {hop.operator} @ {hop.key}"
        if hop.index != index:
            problems.append(f"{where}: numbered {hop.index}")
        parent = hops[hop.parent] if hop.parent is not None else None
        if (parent is None) != (hop.depth == 0) or (parent is not None and (
                hop.parent >= index or parent.depth != hop.depth - 1)):
            problems.append(f"{where}: depth {hop.depth} under parent {hop.parent}")
        if hop.keyset != sorted(hop.keyset, key=lambda name: priority.get(name, len(priority))):
            problems.append(f"{where}: key set {hop.keyset} out of priority order")
        entry = entry_from_dump(hop.operator, tables[hop.operator], hop.key)
        if hop.skipped:
            if not (hop.kind == entry.kind == FALLTHROUGH and hop.duration_ns == 0 and hop.error is None):
                problems.append(f"{where}: skipped as {hop.kind}, the table has {entry.kind}")
            continue
        if hop.key not in wrapped or entry.kind in (FALLTHROUGH, MISSING):
            problems.append(f"{where}: executed at a key the tracer does not wrap ({entry.kind})")
        if (hop.kind, hop.provenance) != (entry.kind, entry.provenance):
            problems.append(f"{where}: ({hop.kind}, {hop.provenance}) but the table has "
                            f"({entry.kind}, {entry.provenance})")
        redispatch = parent is not None and parent.operator == hop.operator
        if redispatch and priority[hop.key] <= priority[parent.key]:
            problems.append(f"{where}: redispatched upwards from {parent.key}")
        floor = priority[parent.key] if redispatch else -1
        between = [key for key in hop.keyset if floor < priority.get(key, -1) < priority[hop.key]]
        expected_skips = [key for key in between if kind(hop.operator, key) == FALLTHROUGH]
        if _passed_over(hops, index) != expected_skips:
            problems.append(f"{where}: skipped {_passed_over(hops, index)}, the tables say {expected_skips}")
        missed = [key for key in between if key in wrapped and kind(hop.operator, key) not in (FALLTHROUGH, MISSING)]
        if missed:
            problems.append(f"{where}: passed over {missed}, which have kernels")
    return problems


def _program(device: str, with_backward: bool) -> None:
    x = torch.ones(2, 3, device=device, requires_grad=with_backward)
    loss = (x * 2.0).sum()
    if with_backward:
        loss.backward()


def main() -> None:
    """Trace after every bring-up step (TORCH_DEVICE_BACKEND_AUTOLOAD=0): one JSON line per step and device."""
    import torch_sim
    from pu1_explorer import trace

    for step in torch_sim.STEPS:
        torch_sim.bring_up(step)
        installed = torch_sim.installed_steps()
        for device in ["sim"] if "operators" in installed else ["cpu"]:
            # No backward before sim's autograd step: the engine sizes its device queues at the first backward.
            with_backward = device == "sim" and "autograd" in installed
            tables = all_tables()
            with trace(device) as recorded:
                _program(device, with_backward)
            backend = sorted({(hop.key, hop.kind) for hop in recorded.hops
                              if hop.key == "PrivateUse1" and not hop.skipped})
            print(json.dumps({"step": step, "device": device, "hops": len(recorded.hops), "backend": backend,
                              "disagreements": disagreements(recorded, tables, "cpu" if device == "cpu"
                                                             else "privateuse1")}))


if __name__ == "__main__":
    main()
