"""A backend's integration guide, checked live: each step's check run before and after the step, and coverage.

The explorer knows no backend: a backend hands in its guide as data, a sequence of steps
in bring-up order, each an object with the attributes of `GuideStep` (sim's are
`torch_sim.GUIDE`). A step's check runs in a fresh process brought up to a step as the
step's `bring_up` says: `variable` names the step, then `function` is called. Before the
first step nothing is brought up. A step's page shows the backend's own code (`sources`), and for
sim's files where `pu1-explorer new` puts them in a vendor's backend (`pu1_explorer.new_backend.generated_path`).

>>> import torch_sim
>>> from pu1_explorer.guide import check_step
>>> check_step(torch_sim.GUIDE, "guard").demonstrates_the_step
True
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pu1_explorer import forkserver

if TYPE_CHECKING:  # the check's child process imports this package: it must see torch alone, not the explorer
    from pu1_explorer.op_coverage import CoverageChange


class GuideSource(Protocol):
    """Code a step's page shows."""

    @property
    def caption(self) -> str: ...  # what it is, e.g. "sim's Python module"

    @property
    def path(self) -> str | None: ...  # where it lives, shown beside the caption (None: an excerpt)

    @property
    def text(self) -> str: ...

    @property
    def language(self) -> str: ...  # a pygments lexer name: "python", "cpp"


class BringUp(Protocol):
    """How a fresh Python brings the backend up to a step."""

    @property
    def device(self) -> str: ...  # the device's name, e.g. "sim"

    @property
    def function(self) -> str: ...  # "module:function", called with no arguments once `variable` names the step

    @property
    def variable(self) -> str: ...  # the environment variable that names the step

    @property
    def environment(self) -> Mapping[str, str]: ...  # more variables every check process gets


class GuideStep(Protocol):
    """One step of a backend's guide, as the explorer reads it. A step may also name `driver_calls`, the functions
    of the device driver's C API its C++ calls, which its page then lists (sim's steps do)."""

    @property
    def number(self) -> int: ...  # 1, 2, … in bring-up order

    @property
    def name(self) -> str: ...  # the label: what `bring_up.variable` is set to

    @property
    def title(self) -> str: ...  # a heading, `code` spans allowed

    @property
    def probes(self) -> tuple[str, ...]: ...  # the scorecard probes that grade the step

    @property
    def explanation(self) -> str: ...  # paragraphs, '- ' items and `code` spans

    @property
    def sources(self) -> Sequence[GuideSource]: ...  # the backend's own code

    @property
    def check_program(self) -> Path: ...  # a Python file that fails before the step and works after it

    @property
    def checks_autoload(self) -> bool: ...  # the check is about `import torch` loading the backend by itself

    @property
    def bring_up(self) -> BringUp: ...


@dataclass
class CheckResult:
    """What one run of a step's check did, with the backend brought up to `installed_until`."""

    step: str
    installed_until: str | None
    succeeded: bool
    output: str
    error: str  # the exception's message, all its lines; empty when it succeeded

    @property
    def summary(self) -> str:
        """What the check printed, or its error, whole: the page shows what PyTorch raised, not a cut of it."""
        return self.output.strip() if self.succeeded else self.error


@dataclass
class StepCheck:
    """What a step's check did before and after the step, and how coverage moved."""

    step: str
    before_succeeded: bool
    before: str
    after_succeeded: bool
    after: str
    coverage_before: float | None = None
    coverage_after: float | None = None
    coverage_changes: list[CoverageChange] = field(default_factory=list)
    # overloads that reach a kernel of the backend's own, its fallback or its copy to the CPU
    runnable_before: int | None = None
    runnable_after: int | None = None

    @property
    def demonstrates_the_step(self) -> bool:
        return not self.before_succeeded and self.after_succeeded


@dataclass
class StepCoverage:
    """How the backend's ATen overloads resolve once the bring-up has reached `step` (transitive statuses)."""

    number: int
    step: str
    counts: dict[str, int]
    without_fallback_percent: float
    autograd_kernels: int  # overloads with a kernel of the backend's own on its Autograd key
    autocast_kernels: int  # overloads with a kernel on its Autocast key (a cast policy)


RunPython = Callable[[list[str], dict[str, str], float], subprocess.CompletedProcess]


def find_step(guide: Sequence[GuideStep], name: str) -> GuideStep:
    """The step of `guide` called `name`; a clear error naming the steps when there is none."""
    for step in guide:
        if step.name == name:
            return step
    raise ValueError(f"unknown step {name!r}; the steps are: {', '.join(step.name for step in guide)}")


def step_before(guide: Sequence[GuideStep], name: str) -> str | None:
    """The step installed just before `name` (None for the first)."""
    names = [step.name for step in guide]
    find_step(guide, name)
    index = names.index(name)
    return names[index - 1] if index > 0 else None


def check_environment(step: GuideStep) -> dict[str, str]:
    """The environment checks run in: the backend's own variables, warnings off, no backend autoloaded."""
    return {**os.environ, **step.bring_up.environment, "PYTHONWARNINGS": "ignore", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}


def check_command(step: GuideStep, installed_until: str | None) -> tuple[list[str], dict[str, str]]:
    """The `python` arguments and environment that run `step`'s check, the backend brought up to `installed_until`."""
    environment = check_environment(step)
    environment.pop(step.bring_up.variable, None)
    program = str(step.check_program)
    if step.checks_autoload:
        # the step is `import torch` loading the backend: before it, autoloading is off and nothing is brought up
        environment["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "1" if installed_until == step.name else "0"
        return [program], environment
    if installed_until is None:
        return ["-m", "pu1_explorer.guide.brought_up", program], environment
    environment[step.bring_up.variable] = installed_until
    return ["-m", "pu1_explorer.guide.brought_up", "--bring-up", step.bring_up.function, program], environment


def _new_interpreter(argv: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env, timeout=timeout)


def run_check(step: GuideStep, installed_until: str | None, timeout: float = 120.0,
              run_python: RunPython | None = None) -> CheckResult:
    """Run `step`'s check in a fresh process with the backend brought up to `installed_until` (None: nothing).

    `run_python(argv, env, timeout)` runs `python *argv` and returns its CompletedProcess (default: a new
    interpreter; `forkserver.run` forks one from a template instead)."""
    argv, environment = check_command(step, installed_until)
    try:
        completed = (run_python or _new_interpreter)(argv, environment, timeout)
    except subprocess.TimeoutExpired:
        return CheckResult(step.name, installed_until, False, "", f"the check did not finish within {timeout:.0f} s")
    error = "" if completed.returncode == 0 else error_summary(completed.stderr, completed.returncode)
    return CheckResult(step.name, installed_until, completed.returncode == 0, completed.stdout, error)


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b: ")


def error_summary(stderr: str, returncode: int) -> str:
    """The exception of a failed run, from the line that names it to the end of its message (messages span
    lines), or how the process died."""
    if returncode < 0:
        return f"the process was killed by {forkserver.signal_name(returncode)} (a crash, not an exception)"
    lines = stderr.strip().splitlines()
    for index in range(len(lines) - 1, -1, -1):
        if _EXCEPTION_LINE.match(lines[index]):
            return "\n".join(line.rstrip() for line in lines[index:]).strip()
    return lines[-1].strip() if lines else f"the process exited with code {returncode}"


def forked_check(step: GuideStep, installed_until: str | None, timeout: float = 120.0) -> CheckResult:
    """`run_check` in a process forked from a template; a check about autoloading keeps a process of its own,
    since what it checks is `import torch` itself."""
    return run_check(step, installed_until, timeout, run_python=None if step.checks_autoload else forkserver.run)


def _coverage_rows(step: GuideStep, steps: Sequence[str | None], with_rows: bool, timeout: float) -> list[dict]:
    """Coverage measured in one fresh process that brings the backend up to each of `steps` in turn."""
    bring_up = step.bring_up
    argv = ["-m", "pu1_explorer.guide.measure_coverage", "--device", bring_up.device, "--bring-up", bring_up.function,
            "--variable", bring_up.variable, *(["--rows"] if with_rows else []), "--",
            *("" if name is None else name for name in steps)]
    environment = check_environment(step)
    environment.pop(bring_up.variable, None)
    completed = forkserver.run(argv, environment, timeout)
    if completed.returncode != 0:
        raise RuntimeError(error_summary(completed.stderr, completed.returncode))
    return [json.loads(line) for line in completed.stdout.splitlines() if line.startswith("{")]


def _runnable(measured: dict) -> int:
    """How many overloads reach a kernel of the backend's own, its fallback or its copy to the CPU."""
    counts = measured["counts"]
    return sum(counts.get(status, 0) for status in ("kernel", "fallback", "copies_to_cpu"))


_CHECKS: dict[tuple, StepCheck] = {}


def _identity(guide: Sequence[GuideStep]) -> tuple:
    """What makes two guides the same for the caches: their steps' names, checks and bring-up."""
    bring_up = guide[0].bring_up if guide else None
    return (tuple((step.name, str(step.check_program)) for step in guide),
            None if bring_up is None else (bring_up.function, bring_up.variable, bring_up.device))


def check_step(guide: Sequence[GuideStep], name: str, with_coverage: bool = True) -> StepCheck:
    """Run the step's check in two fresh processes (before and after the step) and compare coverage (cached)."""
    step = find_step(guide, name)
    key = (_identity(guide), name, with_coverage)
    if key in _CHECKS:
        return _CHECKS[key]
    previous = step_before(guide, name)
    before = forked_check(step, previous)
    after = forked_check(step, name)
    result = StepCheck(name, before.succeeded, before.summary, after.succeeded, after.summary)
    if with_coverage and not step.checks_autoload:
        from pu1_explorer.op_coverage import CoverageChange

        measured_before, measured_after = _coverage_rows(step, [previous, name], with_rows=True, timeout=300)
        rows_before, rows_after = measured_before["rows"], measured_after["rows"]
        result.coverage_before, result.coverage_after = measured_before["percent"], measured_after["percent"]
        result.runnable_before, result.runnable_after = _runnable(measured_before), _runnable(measured_after)
        result.coverage_changes = [CoverageChange(operator, rows_before.get(operator, "missing"), status)
                                   for operator, status in sorted(rows_after.items())
                                   if rows_before.get(operator) != status]
    _CHECKS[key] = result
    return result


_COVERAGE: dict[tuple, list[StepCoverage]] = {}


def coverage_by_step(guide: Sequence[GuideStep]) -> list[StepCoverage]:
    """The coverage after each step of `guide`, measured in one fresh process that brings the backend up step by
    step (cached)."""
    if not guide:
        raise ValueError("the guide has no steps: pass a backend's guide, e.g. torch_sim.GUIDE")
    key = _identity(guide)
    if key not in _COVERAGE:
        rows = _coverage_rows(guide[0], [step.name for step in guide], with_rows=False, timeout=600)
        _COVERAGE[key] = [StepCoverage(step.number, row["step"], row["counts"], row["percent"], row["autograd"],
                                       row["autocast"]) for step, row in zip(guide, rows)]
    return list(_COVERAGE[key])
