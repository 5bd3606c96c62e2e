"""Demand: which ATen overloads real models reach, and which missing kernels a backend needs first.

`measure()` runs the zoo (`zoo.py`) and users' own workload scripts on a device under an operator counter
(`csrc/operator_counter.cpp`) that counts every overload reached below the composites: what a user calls, what
autograd's engine calls, and what the decomposition of a composite calls, but not what a backend's own kernel
calls inside itself. The counts ship as `demand.json` with how they were measured, and `next_kernels()` ranks a
backend's missing kernels (falling back to the CPU, or nothing at all) by how many models need each one and how
often.
"""
from __future__ import annotations

import contextlib
import csv
import datetime
import io
import json
import runpy
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from pu1_explorer.dispatch_tables import FALLBACK, MISSING
from pu1_explorer.op_coverage import (
    COMPOSITES, COPIES, PRIVATEUSE1_ROUTES, CoverageRow, CoverageSnapshot, structured_delegates,
)

SHIPPED = Path(__file__).with_name("demand.json")
FORMAT = 1
WRITING_A_KERNEL = "guide page 5, Operators (notebooks/guide_05_operators)"
TODAY = {FALLBACK: "falls back to the CPU", COPIES: "its own kernel copies to the CPU",
         MISSING: "raises: no kernel"}


class DemandDataError(ValueError):
    """A demand file that is not one `Demand.to_json()` wrote."""


class WorkloadError(RuntimeError):
    """A workload script that failed on the device."""


@dataclass
class Run:
    """The overloads one run of one model reached, and how many times each."""

    model: str
    family: str
    source: str  # the class or script the model comes from
    config: dict
    inputs: str
    mode: str  # "train", "inference", "autocast train", or "script"
    counts: dict[str, int]


@dataclass
class Demand:
    """Counts of many runs, with how they were measured."""

    runs: list[Run]
    device: str  # where they were measured
    torch_version: str
    transformers_version: str | None = None
    measured_on: str = ""  # the date
    command: str = ""

    def models(self) -> list[str]:
        return list(dict.fromkeys(run.model for run in self.runs))

    def need(self) -> dict[str, tuple[set[str], int]]:
        """operator -> (the models that reached it, how many calls in all)."""
        result: dict[str, tuple[set[str], int]] = {}
        for run in self.runs:
            for operator, count in run.counts.items():
                models, calls = result.get(operator, (set(), 0))
                models.add(run.model)
                result[operator] = (models, calls + count)
        return result

    def by_model(self) -> list[dict]:
        """One row per model: where it comes from, its batch, its runs and the overloads they reached together."""
        rows: dict[str, dict] = {}
        for run in self.runs:
            row = rows.setdefault(run.model, {"model": run.model, "family": run.family, "source": run.source,
                                              "inputs": run.inputs, "modes": [], "overloads": set(), "calls": 0})
            row["modes"].append(run.mode)
            row["overloads"] |= set(run.counts)
            row["calls"] += sum(run.counts.values())
        return [{**row, "overloads": len(row["overloads"])} for row in rows.values()]

    def with_runs(self, runs: Iterable[Run]) -> Demand:
        """This demand with more runs (a user's workloads) added."""
        return Demand([*self.runs, *runs], self.device, self.torch_version, self.transformers_version,
                      self.measured_on, self.command)

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "device": self.device, "torch": self.torch_version,
                           "transformers": self.transformers_version, "measured_on": self.measured_on,
                           "command": self.command, "runs": [asdict(run) for run in self.runs]}, indent=1)

    def to_markdown(self) -> str:
        need = self.need()
        lines = [f"# Demand: {len(need)} overloads reached by {len(self.models())} models", "",
                 f"Measured on {self.device} with torch {self.torch_version}"
                 + (f" and transformers {self.transformers_version}" if self.transformers_version else "")
                 + (f", {self.measured_on}" if self.measured_on else "") + ".", "",
                 "| operator | models | calls |", "| --- | ---: | ---: |"]
        for operator, (models, calls) in sorted(need.items(), key=lambda item: (-len(item[1][0]), -item[1][1],
                                                                                   item[0])):
            lines.append(f"| `{operator}` | {len(models)} | {calls} |")
        return "\n".join(lines) + "\n"


def demand_from_json(text: str, origin: str = "the demand file") -> Demand:
    """Read back what `Demand.to_json()` wrote; a DemandDataError (one line) for anything else."""
    try:
        data = json.loads(text)
        if data.get("format") != FORMAT:
            raise DemandDataError(f"{origin} is not demand data of format {FORMAT}: write it with "
                                  "`pu1-explorer demand -o FILE`")
        return Demand([Run(**run) for run in data["runs"]], data["device"], data["torch"], data.get("transformers"),
                      data.get("measured_on", ""), data.get("command", ""))
    except DemandDataError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise DemandDataError(f"{origin} is not demand data ({type(error).__name__}: {error}); write it with "
                              "`pu1-explorer demand -o FILE`") from None


def shipped() -> Demand:
    """The demand measured on the zoo that ships with the explorer."""
    return demand_from_json(SHIPPED.read_text(), str(SHIPPED))


@contextlib.contextmanager
def counting(device: str | torch.device) -> Iterator[dict[str, int]]:
    """Count the overloads reached below the composites while the block runs, on every thread; the dict the
    block receives is filled when it ends."""
    from pu1_explorer.boxed import native_helper
    from pu1_explorer.devices import backend_key

    counter = native_helper().OperatorCounter()
    counter.start(backend_key(torch.device(device).type))
    counts: dict[str, int] = {}
    try:
        yield counts
    finally:
        counter.stop()
        counts.update(sorted(counter.take().items()))


def measure_zoo(device: str | torch.device, names: Iterable[str] | None = None,
                progress: Callable[[str], None] = lambda message: None) -> list[Run]:
    """Each run of each zoo model (all of them by default) on `device`, counted."""
    from pu1_explorer.zoo import ZOO, run, zoo_model

    models = [zoo_model(name) for name in names] if names else list(ZOO)
    device = torch.device(device)
    runs = []
    for model in models:
        for mode in model.modes:
            with counting(device) as counts:
                run(model, mode, device)
            runs.append(Run(model.name, model.family, model.source, model.config, model.inputs, mode, counts))
            progress(f"{model.name} ({mode}): {sum(counts.values())} calls of {len(counts)} overloads")
    return runs


def measure_script(path: str | Path, device: str | torch.device) -> Run:
    """One run of a user's workload script (it finds the device in its global `device`), counted on `device`."""
    path = Path(path)
    if path.suffix != ".py" or not path.is_file():
        raise FileNotFoundError(f"--workload {path}: no such .py file")
    try:
        with counting(device) as counts, contextlib.redirect_stdout(sys.stderr):  # stdout is the command's output
            runpy.run_path(str(path), init_globals={"device": str(device)}, run_name="__main__")
    except Exception as error:  # noqa: BLE001 - any failure of the user's script becomes one line
        frame = traceback.extract_tb(error.__traceback__)[-1]
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise WorkloadError(f"--workload {path} failed on {device}: {type(error).__name__}: {first_line} "
                            f"({Path(frame.filename).name}:{frame.lineno}); fix it, or measure it where it runs "
                            "(`pu1-explorer demand --workload FILE -o F`) and rank with `--demand F`") from None
    return Run(path.stem, "your workload", str(path), {}, "as the script makes them", "script", counts)


def measure(device: str | torch.device, models: Iterable[str] | None = None, workloads: Iterable[str] = (),
            zoo: bool = True, command: str = "", progress: Callable[[str], None] = lambda message: None) -> Demand:
    """The demand of the zoo (unless `zoo` is False) and of workload scripts, measured on `device`."""
    try:
        import transformers
        transformers_version = transformers.__version__
    except ImportError:
        transformers_version = None
    runs = measure_zoo(device, models, progress) if zoo else []
    runs += [measure_script(path, device) for path in workloads]
    return Demand(runs, torch.device(device).type, torch.__version__, transformers_version,
                  datetime.date.today().isoformat(), command)


@dataclass(frozen=True)
class KernelNeed:
    """A kernel the backend lacks, with who needs it and what happens without it."""

    operator: str
    models: tuple[str, ...]
    calls: int
    today: str
    cuda: bool  # CUDA has a kernel of its own for it
    mps: bool
    core: bool


@dataclass
class NextKernels:
    """A backend's missing kernels, most needed first."""

    label: str
    needs: list[KernelNeed]
    models: list[str]  # every model of the demand
    reached: int  # overloads the demand reached
    measured: str = ""  # where the demand comes from, in words
    top: int | None = None
    missing: int = field(default=0)  # all missing kernels the demand reaches, before `top`

    def headline(self) -> str:
        if not self.needs:
            return (f"{self.label} runs every one of the {self.reached} overloads that the {len(self.models)} "
                    "models reach without the CPU fallback: no kernel is missing")
        shown = f"; the first {len(self.needs)}" if len(self.needs) < self.missing else ""
        return (f"{self.label} lacks {self.missing} kernels that the {len(self.models)} models need (they reach "
                f"{self.reached} overloads){shown}, most needed first")

    def needed_by(self, need: KernelNeed) -> str:
        """The models that need a kernel, in words: "every model" when all do."""
        if len(need.models) == len(self.models) > 1:
            return f"every model ({len(self.models)})"
        return ", ".join(need.models)

    def to_markdown(self, heading: bool = True, brief: bool = False) -> str:
        """The ranking as Markdown; `heading=False` leaves the page title out (for a page that has its own), and
        `brief` keeps the columns a narrow page has room for (rank, kernel, models, calls, what happens today)."""
        lines = ([f"# Next kernels for {self.label}", ""] if heading else []) + [self.headline() + ".", ""]
        if self.measured:
            lines += [f"Demand: {self.measured}.", ""]
        if self.needs and brief:
            lines += ["| # | kernel | models | calls | without it |", "| ---: | --- | ---: | ---: | --- |"]
            lines += [f"| {rank} | `{need.operator.removeprefix('aten::')}` | {len(need.models)} | {need.calls} | "
                      f"{need.today} |" for rank, need in enumerate(self.needs, 1)]
        elif self.needs:
            lines += ["| # | operator | models | calls | without it | CUDA | MPS | needed by |",
                      "| ---: | --- | ---: | ---: | --- | --- | --- | --- |"]
            for rank, need in enumerate(self.needs, 1):
                lines.append(f"| {rank} | `{need.operator}` | {len(need.models)} | {need.calls} | {need.today} | "
                             f"{'yes' if need.cuda else 'no'} | {'yes' if need.mps else 'no'} | "
                             f"{self.needed_by(need)} |")
        if self.needs:
            lines += ["", f"How to write one: {WRITING_A_KERNEL}."]
        return "\n".join(lines) + "\n"

    def to_csv(self) -> str:
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(["rank", "operator", "models", "calls", "without_it", "cuda", "mps", "core", "needed_by"])
        for rank, need in enumerate(self.needs, 1):
            writer.writerow([rank, need.operator, len(need.models), need.calls, need.today, need.cuda, need.mps,
                             need.core, " ".join(need.models)])
        return buffer.getvalue()

    def to_json(self) -> str:
        return json.dumps({"label": self.label, "headline": self.headline(), "models": self.models,
                           "reached": self.reached, "missing": self.missing, "measured": self.measured,
                           "writing_a_kernel": WRITING_A_KERNEL,
                           "needs": [asdict(need) for need in self.needs]}, indent=1)


def next_kernels_from_json(text: str) -> NextKernels:
    """Read back what `NextKernels.to_json()` (`next-kernels --format json`) wrote, in another process."""
    data = json.loads(text)
    needs = [KernelNeed(**{**need, "models": tuple(need["models"])}) for need in data["needs"]]
    return NextKernels(data["label"], needs, data["models"], data["reached"], data["measured"], None, data["missing"])


def _lacking_kernel(operator: str, rows: dict[str, CoverageRow], lacking: set[str]) -> str:
    """The overload whose kernel a lacking call needs: the call's own, or for a composite that lacks a kernel only
    through the `.out` overload (or the route) it calls, when the demand reached that one too, that one's, followed
    on: `aten::sin` (CompositeExplicitAutogradNonFunctional) needs `aten::sin.out`."""
    for _ in range(6):
        if rows[operator].backend not in COMPOSITES:
            break
        target = next((target for target in (structured_delegates().get(operator),
                                             PRIVATEUSE1_ROUTES.get(operator)) if target in lacking), None)
        if target is None:
            break
        operator = target
    return operator


def check_top(top: int | None) -> None:
    """Refuse a number of kernels to list below 1."""
    if top is not None and top < 1:
        raise ValueError(f"--top {top}: give a number of kernels of at least 1")


def next_kernels(snapshot: CoverageSnapshot, demand: Demand, top: int | None = None) -> NextKernels:
    """The kernels `snapshot`'s backend lacks (its calls fall back to the CPU or fail) among the overloads the demand
    reaches, ranked by how many models need each one, then by calls."""
    from pu1_explorer.baselines import baseline

    check_top(top)
    rows = snapshot.by_operator()
    cuda, mps = baseline("cuda").operators, baseline("mps").operators
    reached = {operator for run in demand.runs for operator in run.counts if operator in rows}
    lacking = {operator for operator in reached if rows[operator].transitive in TODAY}
    models: dict[str, set[str]] = {}
    calls: dict[str, int] = {}
    for run in demand.runs:
        in_run: dict[str, int] = {}  # a call and the `.out` call it makes are one call of the kernel both need
        for operator, count in run.counts.items():
            if operator in lacking:
                kernel = _lacking_kernel(operator, rows, lacking)
                in_run[kernel] = max(in_run.get(kernel, 0), count)
        for kernel, count in in_run.items():
            models.setdefault(kernel, set()).add(run.model)
            calls[kernel] = calls.get(kernel, 0) + count
    missing = [KernelNeed(kernel, tuple(sorted(models[kernel])), calls[kernel], TODAY[rows[kernel].transitive],
                          kernel in cuda, kernel in mps, rows[kernel].core) for kernel in models]
    missing.sort(key=lambda item: (-len(item.models), -item.calls, item.operator))
    measured = (f"{len(demand.models())} models measured on {demand.device} with torch {demand.torch_version}"
                + (f", {demand.measured_on}" if demand.measured_on else ""))
    return NextKernels(snapshot.label, missing[:top] if top else missing, demand.models(), len(reached), measured,
                       top, len(missing))
