"""sim with SIM_MEMORY=discrete: device memory that host code cannot touch, and everything users do still working.

Only the threads running the device's work (sim's kernels, torch.compile's kernels, copies) reach a discrete
device's memory: where the processor has memory protection keys, each such thread lifts the key's denial for itself
while it runs a task; where it has none, the driver opens the memory to the whole process while its executor works.
sim's own tests run again in that mode here: each step's tests, launches, pinned memory, the fallback and real models,
and the scorecard with its quick sweeps.
"""
from __future__ import annotations

import ctypes
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from pu1_explorer.conformance import PROBE_NAMES
from tests.conftest import run_forked

PROJECT = Path(__file__).resolve().parents[2]

# Each step's tests (device module to graphs), then what every step relies on: launches, pinned memory, the
# fallback, and real models trained against the CPU.
STEP_TESTS = ("test_device_module.py", "test_accelerator_api.py", "test_devices.py", "test_allocator.py",
              "test_operators.py", "test_attention.py", "test_streams_events.py", "test_generator.py",
              "test_autograd.py", "test_amp.py", "test_serialization.py", "test_autoload.py", "test_profiler.py",
              "test_compile.py", "test_distributed.py", "test_graphs.py",
              "test_kernel_launch.py", "test_pinned_memory.py", "test_fallback.py", "test_real_models.py")


def discrete_environment() -> dict[str, str]:
    """This process's environment with discrete memory, without the xdist worker's variables."""
    environment = {name: value for name, value in os.environ.items() if not name.startswith("PYTEST_XDIST")}
    return {**environment, "SIM_MEMORY": "discrete", "SIM_FALLBACK": "silent"}


@pytest.mark.parametrize(("setting", "mode"), [(None, "unified"), ("unified", "unified"), ("discrete", "discrete")])
def test_memory_mode_answers_the_mode_the_driver_runs(setting, mode, monkeypatch):
    monkeypatch.delenv("SIM_MEMORY", raising=False)
    result = run_forked(["-c", "import torch; print(torch.sim.memory_mode())"],
                        **({"SIM_MEMORY": setting} if setting else {}))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == mode


def read_device_memory(memory: str, *options: str) -> subprocess.CompletedProcess:
    """Runs host_reads_device_memory in a fresh process with SIM_MEMORY=`memory`."""
    return subprocess.run([sys.executable, "-m", "tests.backend.host_reads_device_memory", *options],
                          capture_output=True, text=True, cwd=PROJECT, timeout=120,
                          env={**os.environ, "SIM_MEMORY": memory})


def assert_stopped_at_the_address(run: subprocess.CompletedProcess) -> None:
    lines = run.stdout.splitlines()
    assert run.returncode != 0 and len(lines) == 2, run.stdout + run.stderr
    assert lines[0] == "computed on the device: [1.0, 2.0, 3.0, 4.0]"
    address = int(lines[1], 16)
    assert (f"sim: host code touched sim's device memory at {address:#x} (sim:0); with SIM_MEMORY=discrete only "
            "the driver's copies and kernels reach device memory") in run.stderr, run.stderr


def protection_keys_available() -> bool:
    """Whether this processor and kernel give a process memory protection keys (glibc's pkey_alloc)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if not hasattr(libc, "pkey_alloc"):
        return False
    key = libc.pkey_alloc(0, 0)
    if key < 0:
        return False
    libc.pkey_free(key)
    return True


def test_host_code_reads_unified_memory_and_is_stopped_at_discrete_memory_naming_the_address():
    unified = read_device_memory("unified")
    assert unified.returncode == 0, unified.stderr
    assert unified.stdout.splitlines()[2] == repr(struct.pack("<f", 1.0))

    assert_stopped_at_the_address(read_device_memory("discrete"))


@pytest.mark.skipif(not protection_keys_available(),
                    reason="this processor or kernel gives no memory protection keys, so discrete memory is opened to "
                           "the whole process while the device works, and a host read then goes unnoticed")
def test_host_code_is_stopped_at_discrete_memory_while_the_device_works():
    assert_stopped_at_the_address(read_device_memory("discrete", "--while-the-device-works"))


def test_without_protection_keys_discrete_memory_is_still_guarded_and_computed_on():
    assert_stopped_at_the_address(read_device_memory("discrete", "--take-every-protection-key"))


def test_every_steps_tests_pass_with_discrete_memory(tmp_path):
    files = [str(Path(__file__).parent / name) for name in STEP_TESTS]
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             f"--basetemp={tmp_path / 'basetemp'}", *files], capture_output=True, text=True,
                            cwd=PROJECT, env=discrete_environment(), timeout=1800)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr[-2000:]
    assert result.returncode == 0, "\n".join(line for line in result.stdout.splitlines()
                                             if line.startswith(("FAILED", "ERROR"))) or summary
    assert " passed" in summary, summary


def test_the_scorecard_with_its_quick_sweeps_passes_with_discrete_memory(tmp_path):
    result = subprocess.run([sys.executable, "-m", "pu1_explorer", "scorecard", "--device", "sim", "--opinfo", "quick",
                             "-o", str(tmp_path)], capture_output=True, text=True, cwd=PROJECT,
                            env=discrete_environment(), timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    card = json.loads((tmp_path / "scorecard.json").read_text())
    assert card["opinfo"] == "quick"
    assert {probe["name"] for probe in card["probes"]} == set(PROBE_NAMES)
    assert {probe["name"]: probe["status"] for probe in card["probes"]} == dict.fromkeys(PROBE_NAMES, "passed"), \
        [(probe["name"], probe["detail"]) for probe in card["probes"] if probe["status"] != "passed"]
