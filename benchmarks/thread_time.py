"""Where a step's time goes, thread by thread: processor time and time spent waiting for a processor.

Each device runs alone in a fresh process with PyTorch's defaults (sim's backward on autograd's device thread),
the processes taking turns. A process reads its threads' scheduler statistics (Linux's /proc/self/task/*/schedstat
and status) before and after STEPS timed steps and reports, per step: each thread's processor time, the time it was
ready to run but waited for a processor (the run queue), and its voluntary and involuntary context switches. A
machine with few cores shows here which threads compete for them. Run: `python benchmarks/thread_time.py`
(`--workload mlp|cnn|transformer|multiplies`, `--rounds N`); `multiplies` is backend_speed.py's per-op row, 1,000
multiplies of 64x64 as one step, where only launching a kernel and running it are left to compete.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

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


def measure(device: str, workload: str) -> dict[str, object]:
    """Trains `workload` on `device` in this process; the step's time and each thread's share of it, per step."""
    import torch

    sys.path.insert(0, str(Path(__file__).parent))
    from backend_speed import multiplies, training_step

    step = multiplies(device, 64, 1000) if workload == "multiplies" else training_step(workload, device)
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


def run_worker(device: str, workload: str) -> dict[str, object]:
    """One fresh process measuring `device`."""
    finished = subprocess.run([sys.executable, __file__, "--worker", device, "--workload", workload],
                              capture_output=True, text=True)
    if finished.returncode != 0:
        last_line = (finished.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"thread_time.py: the {device} process failed: {last_line}")
    return json.loads(finished.stdout.strip().splitlines()[-1])


def main(arguments: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="mlp", choices=("mlp", "cnn", "transformer", "multiplies"))
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per device, taking turns")
    parser.add_argument("--worker", choices=("cpu", "sim"), help=argparse.SUPPRESS)
    options = parser.parse_args(arguments)
    if not Path("/proc/self/task").is_dir():
        parser.error("this script reads Linux's per-thread scheduler statistics (/proc/self/task); run it on Linux")
    if options.rounds < 1:
        parser.error(f"--rounds must be at least 1 (a process per device and round), got {options.rounds}")
    if options.worker:
        print(json.dumps(measure(options.worker, options.workload)))
        return 0
    results: dict[str, list[dict[str, object]]] = {"cpu": [], "sim": []}
    for _ in range(options.rounds):
        for device in results:
            results[device].append(run_worker(device, options.workload))
    processes = f"{options.rounds} fresh process{'es' if options.rounds != 1 else ''}"
    what = ("1,000 multiplies of 64x64" if options.workload == "multiplies"
            else f"one SGD training step of the small {options.workload}")
    print(f"# {what}: {STEPS} steps after {WARM_UP_STEPS} warm-up, "
          f"{processes} per device taking turns; medians over the processes, per step")
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
