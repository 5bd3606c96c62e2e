"""For every bring-up step, a snippet that fails before the step and works after it.

`run_check(step, installed_until)` runs the snippet in a fresh Python process whose
backend is brought up to `installed_until` (autoload off, so nothing else is
installed), and returns what happened: the guide shows the real error message
of the "before" run and the output of the "after" run.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

from torch_sim import STEPS

CHECKS: dict[str, str] = {
    "device_module": """
        print("torch.sim is", torch.sim.__name__, "and the backend is named", torch._C._get_privateuse1_backend_name())
    """,
    "hooks": """
        print("is_available:", torch.sim.is_available(), "| devices:", torch.sim.device_count())
        print("hooks registered:", torch._C._get_accelerator())
    """,
    "guard": """
        torch.accelerator.set_device_index(1)
        print("current device:", torch.accelerator.current_device_index())
    """,
    "allocator": """
        baseline = torch.accelerator.memory_allocated(1)
        storage = torch.UntypedStorage(1024, device="sim:1")
        print("allocated on sim:1:", torch.accelerator.memory_allocated(1) - baseline, "bytes")
    """,
    "operators": """
        x = torch.arange(6.0, device="sim").reshape(2, 3)
        print(x * 2 + 1)
    """,
    "streams_events": """
        stream = torch.Stream(device="sim")
        start, end = torch.Event(device="sim", enable_timing=True), torch.Event(device="sim", enable_timing=True)
        start.record(stream)
        end.record(stream)
        print("stream", stream.stream_id, "elapsed ms >= 0:", start.elapsed_time(end) >= 0)
    """,
    "generator": """
        generator = torch.Generator(device="sim").manual_seed(0)
        print(torch.rand(3, device="sim", generator=generator))
    """,
    "autograd": """
        kernel = torch._C._dispatch_has_kernel_for_dispatch_key("aten::silu", "AutogradPrivateUse1")
        assert kernel, "aten::silu has no AutogradPrivateUse1 kernel of its own"
        x = torch.randn(4, device="sim", requires_grad=True)
        torch.nn.functional.silu(x).sum().backward()
        print("sim's own silu backward ran; grad:", x.grad)
    """,
    "amp": """
        a = torch.randn(4, 4, device="sim")
        with torch.autocast("sim", dtype=torch.bfloat16):
            product = a @ a
        print("matmul under autocast gives", product.dtype)
    """,
    "serialization": """
        import io
        buffer = io.BytesIO()
        torch.save({"weights": torch.arange(3.0, device="sim:1")}, buffer)
        buffer.seek(0)
        print("loaded back:", torch.load(buffer)["weights"])
        storage = torch.UntypedStorage(8).sim(1)
        print("a host storage moved to", storage.device, "| is_sim:", storage.is_sim)
    """,
    "autoload": """
        print(torch.ones(2, device="sim:1"))
    """,
    "profiler": """
        from torch.profiler import ProfilerActivity, profile
        a = torch.randn(256, 256, device="sim")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
            a @ a
        kernels = [event.name for event in prof.events() if event.device_type == torch.autograd.DeviceType.PrivateUse1]
        if not kernels:
            raise RuntimeError("the profiler recorded no sim activity: no activity profiler is registered for sim")
        mm = next(row for row in prof.key_averages() if row.key == "aten::mm")
        print("sim kernels:", kernels, f"| aten::mm: {mm.device_time_total:.0f} us on sim")
    """,
    "compile": """
        from torch._inductor import metrics

        def scale_and_relu(x):
            return (x * 2).relu() + 1

        x = torch.randn(64, device="sim")
        result = torch.compile(scale_and_relu)(x)
        same = torch.equal(result.cpu(), scale_and_relu(x).cpu())
        print("compiled on", result.device, "| kernels inductor wrote:", metrics.generated_kernel_count, "| equal to eager:", same)
    """,
    "distributed": """
        import torch.distributed as dist
        dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1)  # no backend argument
        tensor = torch.arange(3.0, device="sim")
        dist.all_reduce(tensor)
        print("backend for sim:", dist.get_default_backend_for_device("sim"), "| all_reduce gave", tensor)
        dist.destroy_process_group()
    """,
}


@dataclass
class CheckResult:
    step: str
    installed_until: str | None
    succeeded: bool
    output: str
    error: str  # the last line of the error, empty when it succeeded

    @property
    def summary(self) -> str:
        """What the check printed, or the first 300 characters of its error."""
        if self.succeeded:
            return self.output.strip()
        return self.error if len(self.error) <= 300 else self.error[:300].rstrip() + " …"


def check_environment() -> dict[str, str]:
    """The environment the checks run in: sim's fallback quiet, warnings off, sim not autoloaded by `import torch`."""
    return dict(os.environ, SIM_FALLBACK="silent", PYTHONWARNINGS="ignore", TORCH_DEVICE_BACKEND_AUTOLOAD="0")


def check_program(step: str, installed_until: str | None) -> tuple[str, dict[str, str]]:
    """The program and environment that run `step`'s check with the backend brought up to `installed_until`."""
    if step not in CHECKS:
        raise ValueError(f"unknown bring-up step {step!r}; the steps are: {', '.join(STEPS)}")
    environment = check_environment()
    body = textwrap.dedent(CHECKS[step])
    if step == "autoload":
        # The autoload step is the entry point itself: before it, import torch does not load sim.
        loaded = installed_until == "autoload"
        environment["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "1" if loaded else "0"
        environment.pop("SIM_BRINGUP_STEP", None)
        return "import torch\n" + body, environment
    prelude = "import torch\nimport torch_sim\n"
    if installed_until is not None:
        prelude += f"torch_sim.bring_up({installed_until!r})\n"
    return prelude + body, environment


def _new_interpreter(argv: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env, timeout=timeout)


def run_check(step: str, installed_until: str | None, timeout: float = 120.0,
              run_python: Callable[[list[str], dict[str, str], float], subprocess.CompletedProcess] | None = None
              ) -> CheckResult:
    """Run one step's check in a fresh process with the backend brought up to `installed_until` (None: nothing).

    `run_python(argv, env, timeout)` runs `python *argv` and returns its CompletedProcess (default: a new
    interpreter; the explorer passes one that forks from a template)."""
    program, environment = check_program(step, installed_until)
    try:
        completed = (run_python or _new_interpreter)(["-c", program], environment, timeout)
    except subprocess.TimeoutExpired:
        return CheckResult(step, installed_until, False, "", f"the check did not finish within {timeout:.0f} s")
    error = "" if completed.returncode == 0 else error_summary(completed.stderr, completed.returncode)
    return CheckResult(step, installed_until, completed.returncode == 0, completed.stdout, error)


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b: ")


def error_summary(stderr: str, returncode: int) -> str:
    """The line that names the exception of a failed run, or how the process died."""
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.Signals._value2member_map_ else "a signal"
        return f"the process was killed by {name} (a crash, not an exception)"
    lines = stderr.strip().splitlines()
    for line in reversed(lines):
        if _EXCEPTION_LINE.match(line):
            return line.strip()
    return lines[-1].strip() if lines else f"the process exited with code {returncode}"


def step_before(step: str) -> str | None:
    """The step installed just before `step` (None for the first)."""
    index = STEPS.index(step)
    return STEPS[index - 1] if index > 0 else None
