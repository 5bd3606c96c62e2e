"""The scorecard itself: every probe and the sweeps against one device, `jobs` processes at a time."""
from __future__ import annotations

import concurrent.futures
import datetime
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from pu1_explorer.conformance.harness import install_advice, missing_requirements
from pu1_explorer.conformance.processes import child_argv, child_environment, ending, run_program
from pu1_explorer.conformance.results import OpResult, ProbeResult, Scorecard
from pu1_explorer.conformance.sweeps import QUICK_SAMPLES, SWEEPS, chunks, sweep_chunk, sweep_ops, sweep_result

OPINFO_MODES = ("quick", "full", "none")
_PROBES_MODULE = "pu1_explorer.conformance.probes"


@dataclass(frozen=True)
class Probe:
    """A capability check: `target` names a function `probe(device, imports)` that a fresh process imports and
    runs, as "module:function" or "path/to/file.py:function" (see `pu1_explorer.conformance.probes`).
    `uses_imports=False` runs it after `import torch` alone, without the backend's imports."""

    name: str
    target: str
    uses_imports: bool = True


PROBES: tuple[Probe, ...] = tuple(Probe(name, f"{_PROBES_MODULE}:{function}", uses_imports) for name, function,
                                  uses_imports in (
    ("device module", "device_module", True),
    ("torch.accelerator", "accelerator", True),
    ("devices and guard", "devices_and_guard", True),
    ("allocator statistics", "allocator_statistics", True),
    ("operators", "operators", True),
    ("streams and events", "streams_and_events", True),
    ("stream-ordering traces", "stream_ordering_traces", True),
    ("generator", "generator", True),
    ("pinned memory", "pinned_memory", True),
    ("autograd on layers", "autograd_on_layers", True),
    ("autocast (AMP)", "autocast", True),
    ("serialization", "serialization", True),
    ("autoload", "autoload", False),
    ("attention", "attention", True),
    ("RNNs", "rnns", True),
    ("profiler", "profiler", True),
    ("torch.compile", "torch_compile", True),
    ("distributed", "distributed", True),
    ("graph capture", "graph_capture", True),
))
PROBE_NAMES: tuple[str, ...] = tuple(p.name for p in PROBES) + tuple(SWEEPS)
# What a probe's ending usually means when the probe gave no hint of its own (it died before it started, or has none).
ENDING_HINTS = {
    "crashed": "the process died in native code: a crash in the backend's C++ (its import or a kernel); the "
               "process's output, kept with the result, holds the stack that faulthandler printed",
    "timed out": "the process never finished: a synchronize, event or lock in the backend that waits forever, or a "
                 "time limit too short for this machine (timeout=, --timeout)",
}


class UnknownDeviceError(ValueError):
    """The device is not the PrivateUse1 backend registered after the imports."""


class MissingDependencyError(ImportError):
    """A module the OpInfo sweeps need is not installed: the scorecard's environment, not the backend, is at fault."""


def run_probe(probe: Probe, device: str, imports: Sequence[str], env: dict[str, str], timeout: float,
              stop: threading.Event | None = None) -> ProbeResult:
    """One probe in a fresh process, its ending turned into a ProbeResult (the process's output kept unless passed)."""
    config = {"target": probe.target, "device": device, "imports": list(imports), "uses_imports": probe.uses_imports}
    run = run_program(child_argv("probe_child", config), env, timeout, stop=stop)
    result = next((m for m in run.messages if m.get("kind") == "result"), None)
    signalled = not run.timed_out and run.returncode is not None and run.returncode < 0
    if result is not None and not signalled:  # what the probe found, even when its process then hung
        status, detail = result["status"], result.get("detail", "")
    else:
        status, detail = ending(run, timeout)
        if not signalled and not run.timed_out:
            detail += " before reporting"
    counts = result.get("counts", {}) if result else {}
    log = run.log.strip() if status != "passed" else ""
    given = next((m.get("hint", "") for m in run.messages if m.get("kind") == "hint"), "")
    hint = "" if status in ("passed", "skipped") else (given or ENDING_HINTS.get(status, ""))
    return ProbeResult(probe.name, status, round(run.seconds, 3), detail, counts, [], log, hint)


def preflight(device: str, imports: Sequence[str] = (), env: dict[str, str] | None = None,
              timeout: float = 60.0, sweeps: bool = False) -> dict:
    """Check that `device` is the PrivateUse1 backend (after `imports`) and return its torch version: in this
    process when it already has torch, those modules and no extra `env`, else in a fresh one.

    With `sweeps`, also that the OpInfo sweeps' own dependencies import (else MissingDependencyError, one line).
    """
    torch = sys.modules.get("torch")
    if torch is not None and not env and all(spec in sys.modules for spec in imports):
        name = torch.device("privateuseone").type
        if name == device:
            found = {"name": name, "version": torch.__version__, "module": hasattr(torch, device),
                     "missing": missing_requirements()}
            return _check_requirements(found, sweeps)
    config = {"preflight": True, "device": device, "imports": list(imports)}
    run = run_program(child_argv("probe_child", config), child_environment(env), timeout)
    found = next((m for m in run.messages if m["kind"] in ("preflight", "fatal")), None)
    if found is None:
        how = "timed out" if run.timed_out else f"ended with code {run.returncode}"
        raise RuntimeError(f"checking device {device!r}: the process {how}: {run.log.strip()[-200:]}")
    if found["kind"] == "fatal":
        raise UnknownDeviceError(f"checking device {device!r}: {found['detail']}")
    if found["name"] != device:
        after = f" after importing {', '.join(imports)}" if imports else ""
        hint = "" if imports else " (a backend that does not autoload must be imported: imports=[...], --import)"
        raise UnknownDeviceError(f"unknown device {device!r}: the PrivateUse1 backend{after} is "
                                 f"{found['name']!r}{hint}")
    return _check_requirements(found, sweeps)


def _check_requirements(found: dict, sweeps: bool) -> dict:
    if sweeps and found.get("missing"):
        raise MissingDependencyError(install_advice(found["missing"]))
    return found


def _chosen_probes(available: dict[str, Probe], probes: Sequence[str] | None, opinfo: str) -> list[str]:
    if probes is None:
        return list(available) + (list(SWEEPS) if opinfo != "none" else [])
    unknown = [name for name in probes if name not in available and name not in SWEEPS]
    if unknown:
        names = ", ".join(list(available) + list(SWEEPS))
        raise ValueError(f"unknown probe {unknown[0]!r}; the probes are: {names}")
    return [name for name in list(available) + list(SWEEPS) if name in probes]


def scorecard(device: str, imports: Sequence[str] = (), timeout: float = 60.0, jobs: int = 2, opinfo: str = "quick",
              progress: Callable[[str], None] | None = None, *, env: dict[str, str] | None = None,
              probes: Sequence[str] | None = None, extra_probes: Sequence[Probe] = (),
              ops: Sequence[str] | None = None) -> Scorecard:
    """Run every probe (or those named in `probes`) against PrivateUse1 device `device`, `jobs` processes at a time.

    `imports`: modules or .py files each process imports after torch; `env`: extra environment
    variables for the processes; `extra_probes`: more `Probe`s (run whatever `probes` says); `ops`: the op_db
    names the sweeps cover instead of the `opinfo` mode's.
    Raises ValueError (before any probe runs) for an unknown probe name, OpInfo mode or device, and
    MissingDependencyError when the sweeps would run but a module they need is not installed.
    """
    if opinfo not in OPINFO_MODES:
        raise ValueError(f"opinfo must be one of {', '.join(OPINFO_MODES)}, not {opinfo!r}")
    if jobs < 1 or timeout <= 0:
        raise ValueError("jobs must be at least 1 and timeout positive")
    device = str(device).split(":")[0]
    available = {p.name: p for p in PROBES}
    available.update({p.name: p for p in extra_probes})
    chosen = _chosen_probes(available, probes, opinfo)
    started_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    started = time.perf_counter()
    environment = child_environment(env)
    found = preflight(device, imports, env, timeout, sweeps=any(name in SWEEPS for name in chosen))
    limit = QUICK_SAMPLES if opinfo == "quick" else 0
    mode = "quick" if opinfo == "none" else opinfo  # an explicitly named sweep with opinfo="none" runs quick

    stop = threading.Event()  # set when the caller is interrupted: the workers kill their processes
    wanted_sweeps = [name for name in chosen if name in SWEEPS]
    swept_ops = {name: list(ops) if ops is not None else sweep_ops(SWEEPS[name], mode) for name in wanted_sweeps}
    work = [(SWEEPS[name], op) for op in dict.fromkeys(op for name in wanted_sweeps for op in swept_ops[name])
            for name in wanted_sweeps if op in swept_ops[name]]
    tasks: list[tuple[str, Callable[[], object]]] = [
        ("sweep", lambda chunk=chunk: sweep_chunk(chunk, device, imports, environment, timeout, limit, stop))
        for chunk in (chunks(work) if work else [])]
    tasks += [(name, lambda probe=available[name]: run_probe(probe, device, imports, environment, timeout, stop))
              for name in chosen if name not in SWEEPS]
    # the longest tasks first: sweeps and compiling
    order = sorted(range(len(tasks)), key=lambda i: (tasks[i][0] != "sweep", tasks[i][0] != "torch.compile"))
    swept: dict[tuple[str, str], OpResult] = {}
    logs: dict[str, str] = {}
    sweeps_left = sum(name == "sweep" for name, _ in tasks)
    results: dict[str, ProbeResult] = {}
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs)
    try:
        futures = {pool.submit(tasks[i][1]): i for i in order}
        for future in concurrent.futures.as_completed(futures):
            name = tasks[futures[future]][0]
            if name != "sweep":
                results[name] = future.result()
                _report_progress(progress, results[name], len(results), len(chosen))
                continue
            chunk_results, chunk_logs = future.result()
            swept.update(chunk_results)
            for kind, text in chunk_logs.items():
                logs[kind] = logs.get(kind, "") + text
            sweeps_left -= 1
            if sweeps_left:
                continue
            for sweep in wanted_sweeps:
                kind = SWEEPS[sweep]
                op_results = [swept[(kind, op)] for op in swept_ops[sweep]]
                results[sweep] = sweep_result(sweep, kind, op_results, sum(op.seconds for op in op_results),
                                              logs.get(kind, ""))
                _report_progress(progress, results[sweep], len(results), len(chosen))
    except BaseException:
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    for sweep in wanted_sweeps:  # a sweep with no operators at all
        if sweep not in results:
            results[sweep] = sweep_result(sweep, SWEEPS[sweep], [], 0.0, "")
    return Scorecard(device=device, torch_version=found["version"], started=started_at,
                     seconds=round(time.perf_counter() - started, 3), probes=[results[name] for name in chosen],
                     imports=list(imports), opinfo=opinfo)


def _report_progress(progress: Callable[[str], None] | None, result: ProbeResult, done: int, total: int) -> None:
    if progress is not None:
        progress(f"[{done}/{total}] {result.name}: {result.status} ({result.seconds:.1f} s) {result.detail}")
