"""One contender of a timed comparison between devices (timing.alternating), alone in a fresh process.

Usage: python device_worker.py DEVICE MODULE FUNCTION KEYWORDS_JSON. The process builds its work once,
`MODULE.FUNCTION(device=DEVICE, **KEYWORDS)` (a callable), says `{"ready": true}` on stdout, then answers each line
`{"calls": N}` on stdin with `{"timings": [seconds, ...], "launching": [seconds, ...]}`: N calls, each timed from its
start until the device has finished the work it queued (`torch.accelerator.synchronize()`; nothing to wait for on the
CPU), and the processor time the calling thread spent in the call before that wait. It exits when
stdin closes. Nothing else is set: PyTorch's defaults (autograd's device threads, autoloaded backends) hold, as in a
user's process.
"""
from __future__ import annotations

import importlib
import json
import sys
import time
from typing import Callable

import torch


def finisher(device: str) -> Callable[[], None]:
    """What ends a timed call on `device`: waiting for its queued work, or nothing on the CPU."""
    if torch.device(device).type == "cpu":
        return lambda: None
    return torch.accelerator.synchronize


def main(arguments: list[str]) -> int:
    device, module, function, keywords = arguments[0], arguments[1], arguments[2], json.loads(arguments[3])
    work = getattr(importlib.import_module(module), function)(device=device, **keywords)
    finish = finisher(device)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        timings, launching = [], []
        for _ in range(json.loads(line)["calls"]):
            started, processor_started = time.perf_counter(), time.thread_time()
            work()
            launching.append(time.thread_time() - processor_started)
            finish()
            timings.append(time.perf_counter() - started)
        print(json.dumps({"timings": timings, "launching": launching}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
