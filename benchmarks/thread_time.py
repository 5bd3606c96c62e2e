"""Where a step's time goes, thread by thread: processor time and time spent waiting for a processor.

Each device runs alone in a fresh process with PyTorch's defaults (sim's backward on autograd's device thread),
the processes taking turns. A process reads its threads' scheduler statistics (Linux's /proc/self/task/*/schedstat
and status) before and after STEPS timed steps and reports, per step: each thread's processor time, the time it was
ready to run but waited for a processor (the run queue), and its voluntary and involuntary context switches. A
machine with few cores shows here which threads compete for them. Run: `python benchmarks/thread_time.py`
(`--workload NAME`, `--rounds N`); `multiplies` is backend_speed.py's per-op row, 1,000 multiplies of 64x64 as one
step, where only launching a kernel and running it are left to compete; the other workloads are backend_speed.py's
training and optimizer rows. `--sim-threads N` gives sim's processes N intra-op threads (`torch.set_num_threads`),
which sim's kernels then run with: a study of what sim's OpenMP team costs, not how users run, and not the CPU's
bits wherever those depend on the number of threads. `--host-team alive` has each process's main thread run one
parallel CPU operation before it builds the workload, as a script that makes its data on the CPU does, so that
thread's own OpenMP team is alive beside sim's executor's; `--host-team released` then hands that team back to the
OpenMP runtime (`omp_pause_resource`, OpenMP 5.0) before the workload starts.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Callable

STEPS = 300
WARM_UP_STEPS = 50
COUNTERS = ("running_ns", "waiting_ns", "voluntary", "involuntary")


def thread_statistics() -> dict[int, dict[str, object]]:
    """Each thread of this process: name, processor and run-queue nanoseconds, context switches so far."""
    threads: dict[int, dict[str, object]] = {}
    for entry in os.listdir("/proc/self/task"):
        task = Path("/proc/self/task") / entry
        try:
            running_ns, waiting_ns, _ = (int(field) for field in (task / "schedstat").read_text().split())
            status = dict(line.split(":\t", 1) for line in (task / "status").read_text().splitlines() if ":\t" in line)
            name = (task / "comm").read_text().strip()
        except FileNotFoundError:  # the thread ended while we read
            continue
        threads[int(entry)] = {"name": name, "running_ns": running_ns, "waiting_ns": waiting_ns,
                               "voluntary": int(status["voluntary_ctxt_switches"]),
                               "involuntary": int(status["nonvoluntary_ctxt_switches"])}
    return threads


# Each workload: what one step is, and how to make it on a device from backend_speed.py's rows.
WORKLOADS: dict[str, tuple[str, Callable[[ModuleType, str], Callable[[], object]]]] = {
    "mlp": ("one SGD training step of the small MLP", lambda rows, device: rows.training_step("mlp", device)),
    "cnn": ("one SGD training step of the small CNN", lambda rows, device: rows.training_step("cnn", device)),
    "transformer": ("one SGD training step of the transformer encoder layer",
                    lambda rows, device: rows.training_step("transformer", device)),
    "gpt2": ("one AdamW training step of the small-config GPT-2", lambda rows, device: rows.gpt2_training_step(device)),
    "bert": ("one AdamW training step of the small-config BERT", lambda rows, device: rows.bert_training_step(device)),
    "vit": ("one AdamW training step of the small-config ViT", lambda rows, device: rows.vit_training_step(device)),
    **{kind.lower(): (f"one AdamW training step of the 2-layer nn.{kind}",
                      lambda rows, device, kind=kind: rows.recurrent_training_step(kind, device))
       for kind in ("LSTM", "GRU", "RNN")},
    **{f"{name.lower()}-{implementation}": (
        f"one {name} step, {implementation}=True, 20 parameters of 128x128",
        lambda rows, device, name=name, implementation=implementation: rows.optimizer_step(name, implementation,
                                                                                           device))
       for name in ("AdamW", "Adam", "SGD") for implementation in ("foreach", "fused")},
    "multiplies": ("1,000 multiplies of 64x64", lambda rows, device: rows.multiplies(device, 64, 1000)),
}


HOST_TEAM_CHOICES = ("alive", "released")
OMP_PAUSE_SOFT = 1  # omp_pause_resource_t's omp_pause_soft


def start_host_team(release: bool) -> None:
    """Runs a parallel CPU operation on this (the main) thread, which starts its OpenMP team; with `release`, hands
    the team back to the OpenMP runtime afterwards (its worker threads end)."""
    import torch

    data = torch.ones(1 << 22)
    data.add_(1)  # 4M elements: well above PyTorch's grain size, so it runs as a parallel region
    if not release:
        return
    runtimes = sorted({line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
                       if "/libgomp" in line})
    if not runtimes:
        raise SystemExit("thread_time.py: --host-team released needs PyTorch's OpenMP runtime (libgomp), "
                         "and this torch has not loaded one; run without --host-team")
    openmp = ctypes.CDLL(runtimes[0])
    if openmp.omp_pause_resource(OMP_PAUSE_SOFT, openmp.omp_get_initial_device()) != 0:
        raise SystemExit("thread_time.py: the OpenMP runtime refused to release the main thread's team")


def measure(device: str, workload: str, sim_threads: int | None = None,
            host_team: str | None = None) -> dict[str, object]:
    """Trains `workload` on `device` in this process; the step's time and each thread's share of it, per step."""
    import torch

    sys.path.insert(0, str(Path(__file__).parent))
    import backend_speed

    if device == "sim" and sim_threads is not None:
        torch.set_num_threads(sim_threads)
    if host_team is not None:
        start_host_team(release=host_team == "released")
    step = WORKLOADS[workload][1](backend_speed, device)
    finish = torch.sim.synchronize if device == "sim" else (lambda: None)
    for _ in range(WARM_UP_STEPS):
        step()
    finish()
    before = thread_statistics()
    start = time.perf_counter()
    for _ in range(STEPS):
        step()
    finish()
    seconds = time.perf_counter() - start
    after = thread_statistics()
    threads = []
    for thread_id in sorted(after):
        now, then = after[thread_id], before.get(thread_id, dict.fromkeys(COUNTERS, 0))  # none: started since
        threads.append({"name": now["name"], **{key: (now[key] - then[key]) / STEPS for key in COUNTERS}})
    return {"step_ns": seconds / STEPS * 1e9, "threads": threads}


def labelled(threads: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    """Threads keyed by name and order of creation among threads of that name: `sim-executor #2`."""
    seen: dict[str, int] = {}
    result = {}
    for thread in threads:
        seen[thread["name"]] = seen.get(thread["name"], 0) + 1
        result[f"{thread['name']} #{seen[thread['name']]}"] = thread
    return result


def run_worker(device: str, workload: str, sim_threads: int | None, host_team: str | None) -> dict[str, object]:
    """One fresh process measuring `device`."""
    options = [] if sim_threads is None else ["--sim-threads", str(sim_threads)]
    options += [] if host_team is None else ["--host-team", host_team]
    finished = subprocess.run([sys.executable, __file__, "--worker", device, "--workload", workload, *options],
                              capture_output=True, text=True, env=dict(os.environ, SIM_FALLBACK="silent"))
    if finished.returncode != 0:
        last_line = (finished.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"thread_time.py: the {device} process failed: {last_line}")
    return json.loads(finished.stdout.strip().splitlines()[-1])


def main(arguments: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="mlp", choices=tuple(WORKLOADS))
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per device, taking turns")
    parser.add_argument("--sim-threads", type=int, help="intra-op threads of sim's processes (a study; default: "
                        "PyTorch's, as the CPU's processes)")
    parser.add_argument("--host-team", choices=HOST_TEAM_CHOICES, help="the main thread runs a parallel CPU "
                        "operation first, and its OpenMP team stays alive or is released (a study)")
    parser.add_argument("--worker", choices=("cpu", "sim"), help=argparse.SUPPRESS)
    options = parser.parse_args(arguments)
    if not Path("/proc/self/task").is_dir():
        parser.error("this script reads Linux's per-thread scheduler statistics (/proc/self/task); run it on Linux")
    if options.rounds < 1:
        parser.error(f"--rounds must be at least 1 (a process per device and round), got {options.rounds}")
    if options.sim_threads is not None and options.sim_threads < 1:
        parser.error(f"--sim-threads must be at least 1 (torch.set_num_threads), got {options.sim_threads}")
    if options.worker:
        print(json.dumps(measure(options.worker, options.workload, options.sim_threads, options.host_team)))
        return 0
    results: dict[str, list[dict[str, object]]] = {"cpu": [], "sim": []}
    for _ in range(options.rounds):
        for device in results:
            results[device].append(run_worker(device, options.workload, options.sim_threads, options.host_team))
    processes = f"{options.rounds} fresh process{'es' if options.rounds != 1 else ''}"
    settings = ("" if options.sim_threads is None else
               f"; sim with {options.sim_threads} intra-op thread{'s' if options.sim_threads != 1 else ''} "
               "(torch.set_num_threads: a study, not PyTorch's default)")
    if options.host_team is not None:
        settings += (f"; the main thread's OpenMP team started before the workload and {options.host_team} "
                    "(a study)")
    print(f"# {WORKLOADS[options.workload][0]}: {STEPS} steps after {WARM_UP_STEPS} warm-up, "
          f"{processes} per device taking turns; medians over the processes, per step{settings}")
    steps = {device: statistics.median(run["step_ns"] for run in runs) for device, runs in results.items()}
    print(f"step: cpu {steps['cpu'] / 1e3:.0f} us, sim {steps['sim'] / 1e3:.0f} us, "
          f"sim/cpu {steps['sim'] / steps['cpu']:.2f}x")
    print(f"{'device':6} {'thread':18} {'running us':>11} {'waiting us':>11} {'voluntary':>10} {'involuntary':>12}")
    for device, runs in results.items():
        per_run = [labelled(run["threads"]) for run in runs]
        for label in per_run[0]:
            rows = [run[label] for run in per_run if label in run]
            running = statistics.median(row["running_ns"] for row in rows) / 1e3
            if running < 1:
                continue
            waiting = statistics.median(row["waiting_ns"] for row in rows) / 1e3
            voluntary = statistics.median(row["voluntary"] for row in rows)
            involuntary = statistics.median(row["involuntary"] for row in rows)
            print(f"{device:6} {label:18} {running:11.0f} {waiting:11.0f} {voluntary:10.1f} {involuntary:12.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
