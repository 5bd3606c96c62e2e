"""Run the code of the guide pages' call_path cells under sim's interface trace, a fresh process each.

Usage: python guide_path_runner.py INPUT.json OUTPUT.json, where INPUT holds
`[[page, [[code, device], ...]], ...]`. OUTPUT receives `{page: [{"code", "error", "calls"}, ...]}`, `calls`
being the distinct `[interface, method]` pairs the trace recorded, operators as `["operator", name]`.
Each page's codes run in order in a process of their own, forked from this one before any device started,
after every sim device has started, as on a page whose earlier cells used the device; each code sees `torch` and
`device`, as call_path's code does. A page whose codes crash its process gets a string saying so.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch

if not hasattr(torch, "sim"):  # autoload off: bring sim up as the pages' kernel does
    import torch_sim

    torch_sim.bring_up()


def traced_calls(code: str, device: str) -> dict[str, Any]:
    """Run `code` under the interface trace: its distinct calls and operators, and its error if it raised."""
    error = None
    scope = {"torch": torch, "device": device}  # outlives the trace, as call_path's does: objects the code keeps
    torch.sim.start_interface_trace()           # are destroyed after the trace ends, not inside it
    try:
        exec(compile(code, "<call path>", "exec"), scope)
    except Exception as failure:  # reported to the test, which names the page
        error = f"{type(failure).__name__}: {failure}"
    finally:
        records = torch.sim.stop_interface_trace()
    calls: list[list[str]] = []
    for record in records:
        if record["kind"] == "call":
            pair = [record["interface"], record["method"]]
        elif record["kind"] == "operator_begin":
            pair = ["operator", record["method"]]
        else:
            continue
        if pair not in calls:
            calls.append(pair)
    return {"code": code, "error": error, "calls": calls}


def page_traces(codes: list[list[str]]) -> list[dict[str, Any]]:
    """Start every sim device, as a page's earlier cells do, then trace the page's codes in order."""
    for index in range(torch.sim.device_count()):
        torch.ones(1, device=f"sim:{index}")
    return [traced_calls(code, device) for code, device in codes]


def main(source: str, target: str) -> None:
    """Each page in a child forked before any device started: a fresh process per page, as a notebook kernel is,
    without importing torch again (PyTorch asks some interface methods once per process)."""
    pages = json.loads(open(source, encoding="utf-8").read())
    results: dict[str, Any] = {}
    for page, codes in pages:
        reader, writer = os.pipe()
        child = os.fork()
        if child == 0:
            os.close(reader)
            status = 1
            try:
                with os.fdopen(writer, "w", encoding="utf-8") as out:
                    json.dump(page_traces(codes), out)
                status = 0
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
        os.close(writer)
        with os.fdopen(reader, encoding="utf-8") as pipe:
            text = pipe.read()
        _, status = os.waitpid(child, 0)
        results[page] = json.loads(text) if status == 0 else f"its call_path codes crashed the process ({status})"
    with open(target, "w", encoding="utf-8") as out:
        json.dump(results, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
